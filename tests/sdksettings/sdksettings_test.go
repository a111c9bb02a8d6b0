package sdksettings_test

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
)

// setting is one SDK configuration of a pipeline and the workload's
// twists that go with it.
type setting struct {
	name    string
	limits  func(*sdktrace.SpanLimits)
	sampler sdktrace.Sampler
	// batch: a batching processor with a queue of 2 behind an
	// ExportReporter, while the exporter is held.
	batch bool
	// worker: one call from a context that carries only the invocation
	// id; nested: one call inside another.
	worker, nested bool
	// late: once no turn is open (root and continuation ended), calls
	// named "chat late" from a worker's context, from an ended span's
	// context and under another process's sampled span (the root's
	// context as a subprocess receives it, with the baggage).
	late bool
	// lossy: the setting loses or cuts what the rule reads, or usage:
	// never final.
	lossy bool
}

// dropNamed drops the spans named name, whatever their parent.
type dropNamed string

func (d dropNamed) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	res := sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample, Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
	if p.Name == string(d) {
		res.Decision = sdktrace.Drop
	}
	return res
}

func (d dropNamed) Description() string { return "dropNamed" }

var settings = []setting{
	{name: "defaults"},
	{name: "attribute count 10", limits: func(l *sdktrace.SpanLimits) { l.AttributeCountLimit = 10 }},
	{name: "attribute count 6", limits: func(l *sdktrace.SpanLimits) { l.AttributeCountLimit = 6 }, lossy: true},
	{name: "value length 8", limits: func(l *sdktrace.SpanLimits) { l.AttributeValueLengthLimit = 8 }, lossy: true},
	{name: "value length 31", limits: func(l *sdktrace.SpanLimits) { l.AttributeValueLengthLimit = 31 }},
	{name: "link count 0", limits: func(l *sdktrace.SpanLimits) { l.LinkCountLimit = 0 }},
	{name: "Sampler, worker call dropped", sampler: instrument.Sampler(dropNamed("chat worker")), worker: true, lossy: true},
	{name: "no Sampler, worker call dropped", sampler: dropNamed("chat worker"), worker: true, lossy: true},
	{name: "no Sampler, tool dropped", sampler: dropNamed("execute_tool shell")},
	{name: "Sampler, late calls dropped", sampler: instrument.Sampler(dropNamed("chat late")), late: true, lossy: true},
	{name: "no Sampler, late calls dropped", sampler: dropNamed("chat late"), late: true, lossy: true},
	{name: "late calls recorded", late: true},
	{name: "batch queue drops", batch: true, lossy: true},
	{name: "double instrumentation", nested: true, lossy: true},
}

type gate struct {
	release chan struct{}
	mem     *tracetest.InMemoryExporter
}

func (g *gate) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	<-g.release
	return g.mem.ExportSpans(ctx, spans)
}

func (g *gate) Shutdown(context.Context) error { return nil }

// served is the usage the fake served.
type served struct{ input, output, calls int64 }

// run runs one invocation under s, returning the ledger's summary, the
// exported spans and what was served.
func run(t *testing.T, s setting, rng *rand.Rand) (instrument.Summary, []tracetest.SpanStub, served) {
	t.Helper()
	mem := tracetest.NewInMemoryExporter()
	var next sdktrace.SpanProcessor = sdktrace.NewSimpleSpanProcessor(mem)
	var opts []instrument.SpanProcessorOption
	var g *gate
	if s.batch {
		g = &gate{release: make(chan struct{}), mem: mem}
		r := instrument.NewExportReporter(g)
		next = sdktrace.NewBatchSpanProcessor(r, sdktrace.WithMaxQueueSize(2), sdktrace.WithMaxExportBatchSize(1))
		opts = append(opts, instrument.WithExportReporter(r))
	}
	sp := instrument.NewSpanProcessor(next, append(opts, instrument.WithRemoteSettle(0))...)
	lim := sdktrace.NewSpanLimits()
	if s.limits != nil {
		s.limits(&lim)
	}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(sp), sdktrace.WithRawSpanLimits(lim)}
	if s.sampler != nil {
		tpOpts = append(tpOpts, sdktrace.WithSampler(s.sampler))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracker := instrument.NewTracker(instrument.WithTracerProvider(tp))
	var srv served
	call := func(ctx context.Context, name string) (context.Context, trace.Span) {
		cctx, span := tp.Tracer("example.com/llm").Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String(contract.AttrOperationName, contract.OpChat), attribute.String(contract.AttrRequestModel, "m")))
		instrument.NoteUnrecorded(ctx, span, name)
		in, out := rng.Int64N(4000), rng.Int64N(900)
		srv.input, srv.output, srv.calls = srv.input+in, srv.output+out, srv.calls+1
		span.SetAttributes(attribute.String(contract.AttrResponseModel, "m-1"), attribute.String("server.address", "127.0.0.1"))
		span.SetAttributes(attribute.Int64(contract.AttrUsageInputTokens, in), attribute.Int64(contract.AttrUsageOutputTokens, out))
		return cctx, span
	}
	ctx, inv := tracker.StartInvocation(context.Background(), "coder", "session-0123456789abcdef-0123456789abcdef")
	_, c := call(ctx, "chat 1")
	c.End()
	tctx, tool := tp.Tracer("example.com/agent").Start(ctx, "execute_tool shell")
	_, c = call(tctx, "chat 2")
	c.End()
	tool.End()
	if s.worker {
		wctx, err := instrument.ContextWithInvocation(context.Background(), inv.ID())
		if err != nil {
			t.Fatal(err)
		}
		_, c = call(wctx, "chat worker")
		c.End()
	}
	if s.nested {
		octx, outer := call(ctx, "chat outer")
		_, inner := call(octx, "chat inner")
		inner.End()
		outer.End()
	}
	_, job := tracker.StartBackground(ctx, "shell")
	ectx, ended := tp.Tracer("example.com/agent").Start(ctx, "execute_tool edit")
	ended.End()
	rootSC := trace.SpanContextFromContext(ctx)
	inv.End()
	job.EndWithFollowup(nil)
	cctx, cont, err := tracker.StartContinuation(context.Background(), "coder", "session-0123456789abcdef-0123456789abcdef", job.Carrier())
	if err != nil {
		t.Fatal(err)
	}
	_, c = call(cctx, "chat after")
	c.End()
	cont.End()
	if s.late {
		wctx, err := instrument.ContextWithInvocation(context.Background(), inv.ID())
		if err != nil {
			t.Fatal(err)
		}
		for _, lctx := range []context.Context{wctx, ectx, trace.ContextWithRemoteSpanContext(wctx, rootSC)} {
			_, c = call(lctx, "chat late")
			c.End()
		}
	}
	if g != nil {
		close(g.release)
	}
	if err := tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	sum, ok := sp.Ledger().Summary(inv.ID())
	if !ok {
		t.Fatal("the ledger does not know the invocation")
	}
	return sum, mem.GetSpans(), srv
}

// TestSDKSettingsBothHalves: under each setting, final implies the totals
// served, in process and in the collector's processor fed the exported
// spans, and the two halves agree on whether the invocation is final.
func TestSDKSettingsBothHalves(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	for _, s := range settings {
		t.Run(s.name, func(t *testing.T) {
			sum, spans, srv := run(t, s, rng)
			col := collectorSays(t, spans, sum.InvocationID)
			inFinal, colFinal := sum.Status == instrument.StatusFinal, col.Status == contract.StatusFinal
			if inFinal && (sum.Usage.InputTokens != srv.input || sum.Usage.OutputTokens != srv.output) {
				t.Fatalf("in process final with %d/%d, served %d/%d", sum.Usage.InputTokens, sum.Usage.OutputTokens, srv.input, srv.output)
			}
			if colFinal && (col.InputTokens != srv.input || col.OutputTokens != srv.output) {
				t.Fatalf("collector final with %d/%d, served %d/%d", col.InputTokens, col.OutputTokens, srv.input, srv.output)
			}
			if inFinal != colFinal {
				t.Fatalf("in process %s %v, collector %s %v", sum.Status, sum.Reasons, col.Status, col.IncompleteReasons)
			}
			if s.lossy && inFinal {
				t.Fatalf("final under %s", s.name)
			}
			t.Logf("in process %s %v; collector %s %v", sum.Status, sum.Reasons, col.Status, col.IncompleteReasons)
		})
	}
}
