package invocationprocessor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadatatest"
)

func TestInternalTelemetry(t *testing.T) {
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
	cfg := createDefaultConfig().(*Config)
	cfg.MaxOpenInvocations = 2
	cfg.MaxSpansPerInvocation = 3
	cfg.PendingDelay = 0 // every pending at once: the counters below count them
	clk := newFakeClock()
	p, err := newProcessor(metadatatest.NewSettings(tt), cfg, consumertest.NewNop(), clk, 1)
	require.NoError(t, err)
	ctx := context.Background()

	a := scenario("inv-a", 0)
	require.NoError(t, p.ConsumeTraces(ctx, batch(a[0], a[1], a[1]))) // pending (root children 2), one duplicate
	clk.Advance(1500 * time.Millisecond)
	require.NoError(t, p.ConsumeTraces(ctx, batch(a[2]))) // discharges the root's second child, opens the tool's
	require.NoError(t, p.ConsumeTraces(ctx, batch(scenario("inv-b", 100)[1])))
	require.NoError(t, p.ConsumeTraces(ctx, batch(scenario("inv-c", 200)[1]))) // evicts inv-a
	c := scenario("inv-c", 200)
	// inv-c holds its chat span and the root's ID it references; the tool
	// is the third entry, the next two spans hit span_limit.
	require.NoError(t, p.ConsumeTraces(ctx, batch(c[2], c[3], c[4])))
	require.NoError(t, p.Shutdown(ctx)) // inv-b incomplete

	ignore := []metricdatatest.Option{metricdatatest.IgnoreTimestamp()}
	metadatatest.AssertEqualProcessorInvocationSummaries(t, tt, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: attribute.NewSet(attribute.String("status", contract.StatusPending))},
		{Value: 3, Attributes: attribute.NewSet(attribute.String("status", contract.StatusIncomplete))},
	}, ignore...)
	metadatatest.AssertEqualProcessorInvocationDuplicateSpans(t, tt, []metricdata.DataPoint[int64]{{Value: 1}}, ignore...)
	metadatatest.AssertEqualProcessorInvocationSpansIndexed(t, tt, []metricdata.DataPoint[int64]{{Value: 6}}, ignore...)
	metadatatest.AssertEqualProcessorInvocationOpenInvocations(t, tt, []metricdata.DataPoint[int64]{{Value: 0}}, ignore...)
	metadatatest.AssertEqualProcessorInvocationBoundHits(t, tt, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: attribute.NewSet(attribute.String("bound", boundOpen))},
		{Value: 2, Attributes: attribute.NewSet(attribute.String("bound", boundSpans))},
		// Three closed invocations, two retention slots: inv-a is forgotten.
		{Value: 1, Attributes: attribute.NewSet(attribute.String("bound", boundRetention))},
		// inv-a was evicted while its tool's child was owed: it is forgotten
		// owing work.
		{Value: 1, Attributes: attribute.NewSet(attribute.String("bound", boundOwingForgotten))},
	}, ignore...)
	got, err := tt.GetMetric("otelcol_processor_invocation_finality_delay")
	require.NoError(t, err)
	h := got.Data.(metricdata.Histogram[float64])
	require.Len(t, h.DataPoints, 1)
	require.Equal(t, uint64(3), h.DataPoints[0].Count)
	// inv-a: last discharge at 1.5s, evicted at 1.5s; the others discharged nothing after arriving.
	require.InDelta(t, 0, h.DataPoints[0].Sum, 1e-9)
}
