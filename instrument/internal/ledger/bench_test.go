package ledger

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// BenchmarkLedgerArrived measures the ledger's work per arriving span of a
// large invocation.
func BenchmarkLedgerArrived(b *testing.B) {
	newLedger := func() *Ledger {
		l, _ := newTestLedger(2*time.Second, defaultMaxSpans) // instrument's default settle
		return l
	}
	l := newLedger()
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
			l = newLedger()
			i = 0
			b.StartTimer()
		}
		l.Arrived(spans[i], 0)
		i++
	}
}
