package sdksettings_test

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/internal/testbin"
	"github.com/agentledger/agentledger/processor/invocationprocessor"
)

// collector is a running processor that spans are fed to batch by batch.
type collector struct {
	p    processor.Traces
	sink *consumertest.TracesSink
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	f := invocationprocessor.NewFactory()
	sink := new(consumertest.TracesSink)
	p, err := f.CreateTraces(context.Background(), processortest.NewNopSettings(f.Type()), f.CreateDefaultConfig(), sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
	return &collector{p: p, sink: sink}
}

func (c *collector) feed(t *testing.T, spans []tracetest.SpanStub) {
	t.Helper()
	if err := c.p.ConsumeTraces(context.Background(), toTraces(spans)); err != nil {
		t.Fatal(err)
	}
}

// last returns the latest summary of id emitted so far.
func (c *collector) last(id string) (testbin.Summary, bool) {
	var last testbin.Summary
	found := false
	for _, td := range c.sink.AllTraces() {
		for _, s := range testbin.SummariesFromTraces(td) {
			if s.InvocationID == id && (!found || s.Revision >= last.Revision) {
				last, found = s, true
			}
		}
	}
	return last, found
}

// TestLateDropRevisesFinal: an invocation the collector already closed
// final, with exact totals, loses a model call to the sampler after its
// root ended, from each context no open span counts (a worker's, an ended
// span's, another process's sampled span's). The declaration the
// instrumentation exports reaches the collector as a late member: its
// revision is incomplete with not_sampled:<call name>, and so is the
// in-process ledger; without it the collector's final would stand
// without the call's usage.
func TestLateDropRevisesFinal(t *testing.T) {
	for _, wrap := range []bool{true, false} {
		for _, kind := range []string{"worker", "ended span", "new root from ended span", "remote parent"} {
			name := kind
			if wrap {
				name = "Sampler, " + kind
			}
			t.Run(name, func(t *testing.T) {
				var sampler sdktrace.Sampler = dropNamed("chat late")
				if wrap {
					sampler = instrument.Sampler(sampler)
				}
				mem := tracetest.NewInMemoryExporter()
				sp := instrument.NewSpanProcessor(sdktrace.NewSimpleSpanProcessor(mem), instrument.WithRemoteSettle(0))
				tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp), sdktrace.WithSampler(sampler))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				tracker := instrument.NewTracker(instrument.WithTracerProvider(tp))
				call := func(ctx context.Context, name string, in int64, opts ...trace.SpanStartOption) {
					opts = append(opts, trace.WithSpanKind(trace.SpanKindClient),
						trace.WithAttributes(attribute.String(contract.AttrOperationName, contract.OpChat)))
					_, span := tp.Tracer("example.com/llm").Start(ctx, name, opts...)
					instrument.NoteUnrecorded(ctx, span, name)
					span.SetAttributes(attribute.Int64(contract.AttrUsageInputTokens, in), attribute.Int64(contract.AttrUsageOutputTokens, 7))
					span.End()
				}
				ctx, inv := tracker.StartInvocation(context.Background(), "coder", "session-late")
				call(ctx, "chat 1", 100)
				ectx, tool := tp.Tracer("example.com/agent").Start(ctx, "execute_tool edit")
				tool.End()
				rootSC := trace.SpanContextFromContext(ctx)
				inv.End()

				col := newCollector(t)
				col.feed(t, mem.GetSpans())
				first, ok := col.last(inv.ID())
				if !ok || first.Status != contract.StatusFinal || first.InputTokens != 100 {
					t.Fatalf("before the late call the collector says %+v (found %v), want final with 100 input tokens", first, ok)
				}
				if s, _ := sp.Ledger().Summary(inv.ID()); s.Status != instrument.StatusFinal {
					t.Fatalf("before the late call the ledger says %s %v", s.Status, s.Reasons)
				}
				sent := len(mem.GetSpans())

				wctx, err := instrument.ContextWithInvocation(context.Background(), inv.ID())
				if err != nil {
					t.Fatal(err)
				}
				switch kind {
				case "worker":
					call(wctx, "chat late", 900)
				case "ended span":
					call(ectx, "chat late", 900)
				case "new root from ended span":
					call(ectx, "chat late", 900, trace.WithNewRoot())
				case "remote parent":
					call(trace.ContextWithRemoteSpanContext(wctx, rootSC), "chat late", 900)
				}
				if err := tp.ForceFlush(context.Background()); err != nil {
					t.Fatal(err)
				}
				late := mem.GetSpans()[sent:]
				if len(late) == 0 {
					t.Fatal("nothing was exported for the dropped call: the collector cannot know of it")
				}
				col.feed(t, late)
				got, _ := col.last(inv.ID())
				if got.Status == contract.StatusFinal || got.Revision <= first.Revision ||
					!slices.Contains(got.IncompleteReasons, contract.ReasonNotSampled+":chat late") {
					t.Fatalf("after the late drop the collector says revision %d %s %v, want a later revision, not final, with not_sampled:chat late",
						got.Revision, got.Status, got.IncompleteReasons)
				}
				s, _ := sp.Ledger().Summary(inv.ID())
				if s.Status == instrument.StatusFinal || !slices.Contains(s.Reasons, contract.ReasonNotSampled+":chat late") {
					t.Fatalf("after the late drop the ledger says %s %v", s.Status, s.Reasons)
				}
			})
		}
	}
}
