package instrument

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/internal/contract"
)

// nopExporter drops spans, so benchmarks measure the processor only.
type nopExporter struct{}

func (nopExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (nopExporter) Shutdown(context.Context) error                             { return nil }

func benchProvider(b *testing.B, withProcessor bool) (*sdktrace.TracerProvider, *Tracker) {
	b.Helper()
	var sp sdktrace.SpanProcessor = sdktrace.NewSimpleSpanProcessor(nopExporter{})
	if withProcessor {
		sp = NewSpanProcessor(sp, WithClock(newManualClock()))
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

// BenchmarkLedgerArrived measures the ledger's work per arriving span of a
// large invocation.
func BenchmarkLedgerArrived(b *testing.B) {
	l := newLedger(newConfig([]Option{WithClock(newManualClock())}), metricnoop.NewMeterProvider().Meter("b"))
	root := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled})
	attrs := []attribute.KeyValue{
		attribute.String(contract.AttrInvocationID, "inv"),
		attribute.String(contract.AttrOperationName, contract.OpChat),
		attribute.Int64(contract.AttrUsageInputTokens, 10),
		attribute.Int64(contract.AttrUsageOutputTokens, 2),
	}
	spans := make([]sdktrace.ReadOnlySpan, 0, 1<<16)
	for i := range 1 << 16 {
		sid := trace.SpanID{0, byte(i >> 16), byte(i >> 8), byte(i), 1}
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: root.TraceID(), SpanID: sid, TraceFlags: trace.FlagsSampled})
		spans = append(spans, tracetest.SpanStub{Name: "chat m", SpanContext: sc, Parent: root, Attributes: attrs}.Snapshot())
	}
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if i == len(spans) {
			b.StopTimer()
			l = newLedger(newConfig([]Option{WithClock(newManualClock())}), metricnoop.NewMeterProvider().Meter("b"))
			i = 0
			b.StartTimer()
		}
		l.arrived(spans[i], 0)
		i++
	}
}
