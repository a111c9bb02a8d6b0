package instrument

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// nopExporter drops spans, so benchmarks measure the processor only.
type nopExporter struct{}

func (nopExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (nopExporter) Shutdown(context.Context) error                             { return nil }

func benchProvider(b *testing.B, withProcessor bool) (*sdktrace.TracerProvider, *Tracker) {
	b.Helper()
	var sp sdktrace.SpanProcessor = sdktrace.NewSimpleSpanProcessor(nopExporter{})
	if withProcessor {
		sp = NewSpanProcessor(sp, withClock(newManualClock()))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, NewTracker(WithTracerProvider(tp))
}

// benchInvocation starts the root of an invocation: with the Tracker when
// the pipeline has the ledger, else a plain span with the same baggage (a
// Tracker on a pipeline without its SpanProcessor reports that loudly).
func benchInvocation(tp *sdktrace.TracerProvider, tracker *Tracker, ledger bool) (context.Context, trace.Span) {
	if ledger {
		ctx, inv := tracker.StartInvocation(context.Background(), "a", "s")
		return ctx, inv.Span()
	}
	ctx, _ := ContextWithInvocation(context.Background(), NewInvocationID())
	return tp.Tracer("agent").Start(ctx, "invoke_agent a")
}

// BenchmarkSpan measures one model-call span inside a running invocation:
// with the SDK's simple span processor alone (mode=sdk, the baseline) and
// with the ledger's SpanProcessor wrapping it (mode=ledger). Both export
// to an exporter that drops the spans. Compare the modes with benchstat
// -col /mode.
func BenchmarkSpan(b *testing.B) {
	for _, tc := range []struct {
		name string
		on   bool
	}{{"mode=sdk", false}, {"mode=ledger", true}} {
		b.Run(tc.name, func(b *testing.B) {
			tp, tracker := benchProvider(b, tc.on)
			ctx, root := benchInvocation(tp, tracker, tc.on)
			defer root.End()
			tr := tp.Tracer("llm")
			attrs := trace.WithAttributes(
				attribute.String(contract.AttrOperationName, contract.OpChat),
				attribute.Int64(contract.AttrUsageInputTokens, 10),
				attribute.Int64(contract.AttrUsageOutputTokens, 2))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				_, s := tr.Start(ctx, "chat m", attrs)
				s.End()
			}
		})
	}
}

// benchPipeline is a TracerProvider with a batch span processor exporting
// to nopExporter, with (ledger) or without the ledger's SpanProcessor in
// front of it, and default options otherwise (system clock, retention).
type benchPipeline struct {
	tp      *sdktrace.TracerProvider
	tracker *Tracker
	agent   trace.Tracer
	llm     trace.Tracer
	tools   trace.Tracer
	ledger  bool
}

func newBenchPipeline(b *testing.B, ledger bool) *benchPipeline {
	b.Helper()
	var sp sdktrace.SpanProcessor = sdktrace.NewBatchSpanProcessor(nopExporter{})
	if ledger {
		sp = NewSpanProcessor(sp, WithMeterProvider(metricnoop.NewMeterProvider()))
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &benchPipeline{
		tp:      tp,
		tracker: NewTracker(WithTracerProvider(tp), WithMeterProvider(metricnoop.NewMeterProvider())),
		agent:   tp.Tracer("example.com/agent"),
		llm:     tp.Tracer("example.com/llm"),
		tools:   tp.Tracer("example.com/tools"),
		ledger:  ledger,
	}
}

// run is one realistic invocation: a root, then five turns of a model
// call with usage followed by a tool call, each a child of the root, with
// three attributes each made per call, as a client wrapper and an agent
// make them. With the ledger the root is the Tracker's (which adds
// invocation.id and invocation.role, and the id in baggage); without it
// the agent starts the same root span with its three attributes.
func (p *benchPipeline) run(ctx context.Context) {
	var root trace.Span
	if p.ledger {
		var inv *Invocation
		ctx, inv = p.tracker.StartInvocation(ctx, "coder", "session-1")
		root = inv.Span()
	} else {
		ctx, root = p.agent.Start(ctx, "invoke_agent coder", trace.WithAttributes(
			attribute.String(contract.AttrOperationName, contract.OpInvokeAgent),
			attribute.String(contract.AttrAgentName, "coder"),
			attribute.String(contract.AttrConversationID, "session-1")))
	}
	for i := range int64(5) {
		_, chat := p.llm.Start(ctx, "chat gpt-test", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String(contract.AttrOperationName, contract.OpChat),
			attribute.Int64(contract.AttrUsageInputTokens, 1200+i),
			attribute.Int64(contract.AttrUsageOutputTokens, 80+i)))
		chat.End()
		_, tool := p.tools.Start(ctx, "execute_tool shell", trace.WithAttributes(
			attribute.String(contract.AttrOperationName, contract.OpExecuteTool),
			attribute.String(contract.AttrToolName, "shell"),
			attribute.String(contract.AttrToolCallID, "call_1")))
		tool.End()
	}
	root.End()
}

// BenchmarkInvocation measures one realistic invocation in process (root,
// five model calls with usage, five tool calls; three attributes each)
// through a batch span processor to an exporter that drops the spans:
// with the SDK alone (mode=sdk, the baseline) and with the ledger's
// SpanProcessor in front of the batch processor (mode=ledger). Compare
// the modes with benchstat -col /mode.
func BenchmarkInvocation(b *testing.B) {
	for _, mode := range []struct {
		name   string
		ledger bool
	}{{"mode=sdk", false}, {"mode=ledger", true}} {
		b.Run(mode.name, func(b *testing.B) {
			p := newBenchPipeline(b, mode.ledger)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				p.run(ctx)
			}
		})
	}
}

// BenchmarkInvocationParallel is BenchmarkInvocation with invocations
// running on every P at once (b.RunParallel), sharing one pipeline.
func BenchmarkInvocationParallel(b *testing.B) {
	for _, mode := range []struct {
		name   string
		ledger bool
	}{{"mode=sdk", false}, {"mode=ledger", true}} {
		b.Run(mode.name, func(b *testing.B) {
			p := newBenchPipeline(b, mode.ledger)
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				for pb.Next() {
					p.run(ctx)
				}
			})
		})
	}
}
