package instrument

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// dropByName drops the spans named name, whatever their parent.
type dropByName string

func (d dropByName) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	res := sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample, Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
	if p.Name == string(d) {
		res.Decision = sdktrace.Drop
	}
	return res
}

func (d dropByName) Description() string { return "dropByName" }

// TestDeclarationSpan: a call dropped once no turn of its invocation is
// open is exported as a declaration: a sampled, zero-length root span of
// a new trace, named as the call, with the invocation's id, role
// unrecorded, children 0 and unrecorded 1, the provider's resource and
// the instrumentation's scope, as the SDK's limits never cut it. Nothing
// is declared for an invocation whose root was not sampled.
func TestDeclarationSpan(t *testing.T) {
	for _, wrap := range []bool{true, false} {
		var sampler sdktrace.Sampler = dropByName("chat late")
		if wrap {
			sampler = Sampler(sampler)
		}
		mem := tracetest.NewInMemoryExporter()
		sp := NewSpanProcessor(sdktrace.NewSimpleSpanProcessor(mem), withClock(newManualClock()), WithRemoteSettle(0))
		res := resource.NewSchemaless(attribute.String("service.name", "agent-x"))
		lim := sdktrace.NewSpanLimits()
		lim.AttributeValueLengthLimit = 4 // shorter than the id: a declaration is not cut
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp), sdktrace.WithSampler(sampler),
			sdktrace.WithResource(res), sdktrace.WithRawSpanLimits(lim))
		tracker := NewTracker(WithTracerProvider(tp))
		ctx, inv := tracker.StartInvocation(context.Background(), "coder", "s")
		inv.End()
		sent := len(mem.GetSpans())
		wctx, err := ContextWithInvocation(context.Background(), inv.ID())
		if err != nil {
			t.Fatal(err)
		}
		_, call := tp.Tracer("example.com/llm").Start(wctx, "chat late", trace.WithSpanKind(trace.SpanKindClient))
		NoteUnrecorded(wctx, call, "chat late")
		call.End()
		late := mem.GetSpans()[sent:]
		if len(late) != 1 {
			t.Fatalf("Sampler %v: %d spans exported for the dropped call, want its declaration", wrap, len(late))
		}
		d := late[0]
		want := map[attribute.Key]attribute.Value{
			contract.AttrInvocationID: attribute.StringValue(inv.ID()),
			contract.AttrRole:         attribute.StringValue(contract.RoleUnrecorded),
			contract.AttrChildren:     attribute.IntValue(0),
			contract.AttrUnrecorded:   attribute.IntValue(1),
		}
		got := map[attribute.Key]attribute.Value{}
		for _, kv := range d.Attributes {
			got[kv.Key] = kv.Value
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("Sampler %v: %s = %v, want %v", wrap, k, got[k].Emit(), v.Emit())
			}
		}
		if d.Name != "chat late" || d.Parent.IsValid() || !d.SpanContext.IsSampled() || !d.StartTime.Equal(d.EndTime) ||
			d.SpanContext.TraceID() == trace.SpanContextFromContext(ctx).TraceID() ||
			!sameService(d.Resource, "agent-x") || d.InstrumentationScope.Name != ScopeName || d.DroppedAttributes != 0 {
			t.Errorf("Sampler %v: declaration %+v", wrap, d)
		}
		s, _ := sp.Ledger().Summary(inv.ID())
		if s.Status == StatusFinal {
			t.Errorf("Sampler %v: ledger final after the drop: %v", wrap, s.Reasons)
		}
		_ = tp.Shutdown(context.Background())

		// An invocation whose root was not sampled: nothing to declare.
		mem2 := tracetest.NewInMemoryExporter()
		tp2 := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(NewSpanProcessor(sdktrace.NewSimpleSpanProcessor(mem2))),
			sdktrace.WithSampler(Sampler(sdktrace.NeverSample())))
		tracker2 := NewTracker(WithTracerProvider(tp2))
		_, inv2 := tracker2.StartInvocation(context.Background(), "coder", "s")
		inv2.End()
		w2, err := ContextWithInvocation(context.Background(), inv2.ID())
		if err != nil {
			t.Fatal(err)
		}
		_, c2 := tp2.Tracer("example.com/llm").Start(w2, "chat late")
		NoteUnrecorded(w2, c2, "chat late")
		c2.End()
		if n := len(mem2.GetSpans()); n != 0 {
			t.Errorf("%d spans exported for an invocation whose root was not sampled", n)
		}
		_ = tp2.Shutdown(context.Background())
	}
}

// sameService reports whether res names the service name.
func sameService(res *resource.Resource, name string) bool {
	if res == nil {
		return false
	}
	v, ok := res.Set().Value("service.name")
	return ok && v.AsString() == name
}
