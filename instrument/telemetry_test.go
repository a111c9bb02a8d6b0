package instrument

import (
	"context"
	"slices"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/agentledger/agentledger/contract"
)

func TestInternalTelemetry(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	p := newPipelineWith(t, []SpanProcessorOption{WithMeterProvider(mp), WithMaxOpenInvocations(1)})

	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	tctx, tool := p.tool(ctx)
	tool.End()
	_, late := p.tp.Tracer("x").Start(tctx, "late")
	late.End()
	_, second := p.tracker.StartInvocation(context.Background(), "coder", "s1") // evicts the first
	second.End()
	inv.End()

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, dp := range sum.DataPoints {
					got[m.Name] += dp.Value
				}
			}
		}
	}
	if got["agentledger.instrument.late_children"] != 1 || got["agentledger.instrument.ledger.evicted"] != 1 {
		t.Errorf("counters = %v", got)
	}
}

// TestSpanLimitFailsClosed (issue 9 item 12): an invocation with more span
// IDs than WithMaxSpansPerInvocation is cut, counted, and closes
// incomplete with span_limit at once, never final.
func TestSpanLimitFailsClosed(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	p := newPipelineWith(t, []SpanProcessorOption{WithMeterProvider(mp), WithMaxSpansPerInvocation(3)})
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	for range 3 {
		p.chat(ctx, 10, 1)
	}
	s, err := p.sp.Ledger().Wait(cancelled(), inv.ID())
	if err != nil {
		t.Fatalf("not closed at the limit: %v", err)
	}
	wantStatus(t, s, contract.StatusIncomplete)
	if want := []string{contract.ReasonRootMissing, "span_limit"}; !slices.Equal(s.Reasons, want) {
		t.Errorf("reasons %v, want %v", s.Reasons, want)
	}
	p.chat(ctx, 10, 1)
	inv.End()
	if s := p.summary(t, inv.ID()); s.Status == contract.StatusFinal {
		t.Errorf("final after the cut: %+v", s)
	}
	// The first chat's parent (the root) takes a span ID too: the third
	// chat is cut, and once cut the invocation indexes nothing more (the
	// fourth chat, and the root although its ID is held), as the collector.
	if n := counterValue(t, reader, "agentledger.instrument.ledger.span_limit"); n != 3 {
		t.Errorf("span_limit counter %d, want 3", n)
	}
}
