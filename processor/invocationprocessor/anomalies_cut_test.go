package invocationprocessor

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/ledgerrule"
)

// Issue 34, observation 3: an invocation that already has the most other
// anomalies a ledger keeps still lists the usage_mismatch its last span
// carries, and the summary says its list was cut.
func TestRequiredAnomalyPastTheCap(t *testing.T) {
	h := newHarness(t, 1, nil)
	s := scenario("inv-1", 0)
	h.consume(batch(s...)) // final
	for i := range ledgerrule.MaxAnomalies + 6 {
		// Each late span is a distinct late_span anomaly.
		h.consume(batch(sp{inv: "inv-1", name: fmt.Sprintf("late %d", i), trace: 1, id: 1000 + uint64(i), parent: 1, start: 40, end: 41}))
	}
	flaggedSpan := flagged(sp{inv: "inv-1", name: "invoke_agent helper", trace: 1, id: 5000, parent: 1, start: 42, end: 43}, true)
	h.consume(batch(flaggedSpan))
	sums := h.of("inv-1")
	require.NotEmpty(t, sums)
	last := strsAttr(sums[len(sums)-1], contract.AttrAnomalies)
	assert.Contains(t, last, contract.AnomalyUsageMismatch+":invoke_agent helper")
	assert.Contains(t, last, contract.AnomalyAnomaliesCut)
	assert.NotContains(t, last, contract.AnomalyLateSpan+":invoke_agent helper", "other anomalies stay bounded")
	h.shutdown()
}
