package instrument

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func TestInternalTelemetry(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	p := newPipelineWith(t, []Option{WithMeterProvider(mp), WithMaxOpenInvocations(1)})

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
