package invocationprocessor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/agentledger/agentledger/contract"
)

// TestSDKDroppedCountsSurviveRestart: a model call that lost attributes to
// the SDK's limits (OTLP's dropped_attributes_count) keeps its invocation
// from ever being final, across a restart that replays it from the
// journal.
func TestSDKDroppedCountsSurviveRestart(t *testing.T) {
	mem := newMemStorage()
	clk := newFakeClock()
	sink := new(consumertest.TracesSink)
	s := scenario("inv-1", 0)

	h := newStoredHarness(t, mem, clk, sink, nil)
	td := batch(s[0], s[1], s[2], s[3])
	td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(1).SetDroppedAttributesCount(2)
	h.consume(td)
	h.shutdown()

	clk.Advance(time.Minute)
	h2 := newStoredHarness(t, mem, clk, sink, nil)
	h2.consume(batch(s[4], s[5]))
	sums := h2.of("inv-1")
	require.NotEmpty(t, sums)
	last := sums[len(sums)-1]
	assert.Equal(t, contract.StatusIncomplete, strAttr(last, contract.AttrStatus))
	assert.Contains(t, strsAttr(last, contract.AttrIncompleteReasons), "sdk_limit:attributes on "+s[1].name)
	h2.shutdown()
}
