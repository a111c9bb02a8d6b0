package invocationprocessor

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/agentledger/agentledger/contract"
)

// Indexes of scenario's root and continuation.
const (
	scenarioRoot         = 0
	scenarioContinuation = 4
)

// flagged returns s carrying invocation.usage.mismatch = v (CONTRACT.md
// v0.8), as an adapter sets it on a turn's invoke_agent span.
func flagged(s sp, v any) sp {
	extra := map[string]any{contract.AttrUsageMismatch: v}
	for k, w := range s.extra {
		extra[k] = w
	}
	s.extra = extra
	return s
}

// TestUsageMismatch pins CONTRACT.md v0.8: each flagged span is named on
// the summary, which stays final with the wire's totals, whichever
// arrives first.
func TestUsageMismatch(t *testing.T) {
	const onRoot = contract.AnomalyUsageMismatch + ":invoke_agent coder"
	const onCont = contract.AnomalyUsageMismatch + ":continue_agent coder"
	for _, tc := range []struct {
		name      string
		flag      []int // indexes in scenario
		reversed  bool
		anomalies []string
	}{
		{"root", []int{scenarioRoot}, false, []string{onRoot}},
		{"continuation", []int{scenarioContinuation}, false, []string{onCont}},
		{"both", []int{scenarioRoot, scenarioContinuation}, false, []string{onCont, onRoot}},
		{"both, continuation first", []int{scenarioRoot, scenarioContinuation}, true, []string{onCont, onRoot}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 1, nil)
			spans := scenario("inv-1", 0)
			for _, i := range tc.flag {
				spans[i] = flagged(spans[i], true)
			}
			if tc.reversed {
				for i, j := 0, len(spans)-1; i < j; i, j = i+1, j-1 {
					spans[i], spans[j] = spans[j], spans[i]
				}
			}
			for _, s := range spans {
				h.consume(batch(s))
			}
			// In scenario order the root ends with obligations open: a
			// pending summary comes first.
			sums := h.of("inv-1")
			require.NotEmpty(t, sums)
			s := sums[len(sums)-1]
			assertStatus(t, s, contract.StatusFinal, 1)
			assert.Equal(t, tc.anomalies, strsAttr(s, contract.AttrAnomalies))
			assert.Equal(t, int64(150), intAttr(s, contract.AttrUsageInputTokens))
			assert.Equal(t, int64(15), intAttr(s, contract.AttrUsageOutputTokens))
		})
	}
}

// False is no anomaly; a value that is not a bool is malformed, never
// final, and names no span (v0.8, v0.6 rule 1).
func TestUsageMismatchNotTrue(t *testing.T) {
	malformed := []string{contract.ReasonMalformedAttribute + ":" + contract.AttrUsageMismatch + " on invoke_agent coder"}
	for _, tc := range []struct {
		name    string
		value   any
		status  string
		reasons []string
	}{
		{"false", false, contract.StatusFinal, []string{}},
		{"string", "true", contract.StatusIncomplete, malformed},
		{"int", int64(1), contract.StatusIncomplete, malformed},
		{"array", []any{true}, contract.StatusIncomplete, malformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 1, nil)
			spans := scenario("inv-1", 0)
			spans[scenarioRoot] = flagged(spans[scenarioRoot], tc.value)
			h.consume(batch(spans...))
			s := requireOne(t, h, "inv-1")
			assertStatus(t, s, tc.status, 1)
			assert.Equal(t, tc.reasons, strsAttr(s, contract.AttrIncompleteReasons))
			assert.Equal(t, []string{}, strsAttr(s, contract.AttrAnomalies))
		})
	}
}

// Only an indexed span names itself: a flagged duplicate of an arrived
// span, or a flagged span reusing its ID in another trace, adds nothing
// (v0.8 rule 1).
func TestUsageMismatchNotIndexed(t *testing.T) {
	h := newHarness(t, 1, nil)
	spans := scenario("inv-1", 0)
	h.consume(batch(spans[:4]...))
	again := flagged(spans[scenarioRoot], true)
	reused := flagged(spans[scenarioRoot], true)
	reused.trace = 9
	h.consume(batch(again, reused))
	h.consume(batch(spans[4:]...))
	sums := h.of("inv-1")
	require.NotEmpty(t, sums)
	s := sums[len(sums)-1]
	assert.NotContains(t, strsAttr(s, contract.AttrAnomalies), contract.AnomalyUsageMismatch+":invoke_agent coder")
	assert.Contains(t, strsAttr(s, contract.AttrIncompleteReasons), contract.ReasonSpanIDReused+":invoke_agent coder")
}

// A flagged span arriving after the summary is named in the revision it
// causes.
func TestUsageMismatchLate(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.consume(batch(scenario("inv-1", 0)...))
	late := flagged(sp{inv: "inv-1", name: "invoke_agent helper", trace: 1, id: 30, parent: 1, start: 11, end: 12,
		children: int64(0), late: true}, true)
	h.consume(batch(late))
	sums := h.of("inv-1")
	require.Len(t, sums, 2)
	assert.Equal(t, int64(2), intAttr(sums[1], contract.AttrRevision))
	assert.Contains(t, strsAttr(sums[1], contract.AttrAnomalies), contract.AnomalyUsageMismatch+":invoke_agent helper")
	assert.Contains(t, strsAttr(sums[1], contract.AttrAnomalies), contract.AnomalyLateSpan+":invoke_agent helper")
}

// The flagged root arrives before a restart and the rest after it: the
// replayed facts name it as the live path does.
func TestUsageMismatchAcrossRestart(t *testing.T) {
	mem, clk, sink := newMemStorage(), newFakeClock(), new(consumertest.TracesSink)
	spans := scenario("inv-1", 0)
	spans[scenarioRoot] = flagged(spans[scenarioRoot], true)
	h := newStoredHarness(t, mem, clk, sink, nil)
	h.consume(batch(spans[:2]...))
	h.shutdown()
	h2 := newStoredHarness(t, mem, clk, sink, nil)
	h2.consume(batch(spans[2:]...))
	sums := h2.of("inv-1")
	require.NotEmpty(t, sums)
	s := sums[len(sums)-1]
	assertStatus(t, s, contract.StatusFinal, 1)
	assert.Equal(t, []string{contract.AnomalyUsageMismatch + ":invoke_agent coder"}, strsAttr(s, contract.AttrAnomalies))
	h2.shutdown()
}
