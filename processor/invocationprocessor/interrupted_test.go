package invocationprocessor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/agentledger/agentledger/contract"
)

// interruptedJob is scenario's invocation whose job's followup a
// followup_closed span closes with reason instead of a continuation:
// root, chat, tool, background shell, then the closing span.
func interruptedJob(inv, reason string) ([]sp, sp) {
	spans := scenario(inv, 0)[:4]
	closed := sp{inv: inv, name: contract.SpanNameFollowupClosed, trace: 400, id: 400, start: 20, end: 20, role: contract.RoleFollowupClosed,
		children: int64(0), followupOf: []uint64{4}, linkTrace: 1,
		extra: map[string]any{contract.AttrFollowupReason: reason}}
	return spans, closed
}

// TestFollowupInterrupted pins CONTRACT.md v0.7: a job whose followup is
// closed interrupted is named on the summary, which stays final, in
// either order of the job and the closing span; other reasons name
// nothing.
func TestFollowupInterrupted(t *testing.T) {
	const want = contract.AnomalyFollowupInterrupted + ":background shell"
	for _, tc := range []struct {
		name, reason string
		jobLast      bool
		anomalies    []string
	}{
		{"interrupted", contract.ReasonInterrupted, false, []string{want}},
		{"interrupted before the job", contract.ReasonInterrupted, true, []string{want}},
		{"session_closed", contract.ReasonSessionClosed, false, []string{}},
		{"session_closed before the job", contract.ReasonSessionClosed, true, []string{}},
		{"cancelled", contract.ReasonCancelled, false, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, 1, nil)
			spans, closed := interruptedJob("inv-1", tc.reason)
			if tc.jobLast {
				h.consume(batch(closed, spans[0], spans[1], spans[2]))
				h.consume(batch(spans[3]))
			} else {
				h.consume(batch(spans...))
				h.consume(batch(closed))
			}
			sums := h.of("inv-1")
			require.NotEmpty(t, sums)
			s := sums[len(sums)-1]
			assertStatus(t, s, contract.StatusFinal, 1)
			assert.Equal(t, tc.anomalies, strsAttr(s, contract.AttrAnomalies))
		})
	}
}

// A job closed interrupted by two spans (it promised two followups) is
// named once; a second job of the same name too.
func TestFollowupInterruptedOncePerName(t *testing.T) {
	h := newHarness(t, 1, nil)
	spans, closed := interruptedJob("inv-1", contract.ReasonInterrupted)
	spans[0].children = int64(3)
	spans[3].followups = int64(2)
	second := closed
	second.trace, second.id = 401, 401
	other := sp{inv: "inv-1", name: "background shell", trace: 1, id: 5, parent: 1, start: 3, end: 20, role: contract.RoleBackground,
		children: int64(0), followups: int64(1)}
	third := closed
	third.trace, third.id, third.followupOf = 402, 402, []uint64{5}
	h.consume(batch(append(spans, closed, second, other, third)...))
	s := requireOne(t, h, "inv-1")
	assertStatus(t, s, contract.StatusFinal, 1)
	assert.Equal(t, []string{contract.AnomalyFollowupInterrupted + ":background shell"}, strsAttr(s, contract.AttrAnomalies))
}

// A span closing interrupted a job that never arrives names no job: the
// link is a foreign_followup.
func TestFollowupInterruptedJobNeverArrives(t *testing.T) {
	h := newHarness(t, 1, nil)
	root := sp{inv: "inv-1", name: "invoke_agent coder", trace: 1, id: 1, start: 0, end: 10, role: contract.RoleRoot, children: int64(0)}
	closed := sp{inv: "inv-1", name: contract.SpanNameFollowupClosed, trace: 400, id: 400, start: 20, end: 20, role: contract.RoleFollowupClosed,
		children: int64(0), followupOf: []uint64{4}, linkTrace: 1,
		extra: map[string]any{contract.AttrFollowupReason: contract.ReasonInterrupted}}
	h.consume(batch(closed, root))
	s := requireOne(t, h, "inv-1")
	assertStatus(t, s, contract.StatusFinal, 1)
	assert.Equal(t, []string{contract.AnomalyForeignFollowup + ":" + contract.SpanNameFollowupClosed}, strsAttr(s, contract.AttrAnomalies))
}

// A link naming the job's span ID in another trace discharges nothing
// (v0.6 rule 2) and names no job, in either order.
func TestFollowupInterruptedOtherTrace(t *testing.T) {
	for _, jobLast := range []bool{false, true} {
		h := newHarness(t, 1, nil)
		spans, closed := interruptedJob("inv-1", contract.ReasonInterrupted)
		closed.linkTrace = 7
		if jobLast {
			h.consume(batch(closed, spans[0], spans[1], spans[2]))
			h.consume(batch(spans[3]))
		} else {
			h.consume(batch(spans...))
			h.consume(batch(closed))
		}
		h.advance(5 * time.Hour)
		sums := h.of("inv-1")
		require.NotEmpty(t, sums)
		s := sums[len(sums)-1]
		assert.Equal(t, contract.StatusIncomplete, strAttr(s, contract.AttrStatus))
		assert.Contains(t, strsAttr(s, contract.AttrIncompleteReasons), contract.ReasonMalformedLink+":"+contract.SpanNameFollowupClosed)
		assert.NotContains(t, strsAttr(s, contract.AttrAnomalies), contract.AnomalyFollowupInterrupted+":background shell", "job last: %v", jobLast)
	}
}

// After close the job's span is kept compact; a late span closing it
// interrupted still names it, in the revision it causes.
func TestFollowupInterruptedLateAfterCompaction(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.consume(batch(scenario("inv-1", 0)...))
	_, closed := interruptedJob("inv-1", contract.ReasonInterrupted)
	h.consume(batch(closed))
	sums := h.of("inv-1")
	require.Len(t, sums, 2)
	assertStatus(t, sums[1], contract.StatusFinal, 2)
	assert.Equal(t, []string{
		contract.AnomalyFollowupInterrupted + ":background shell",
		contract.AnomalyLateSpan + ":" + contract.SpanNameFollowupClosed,
	}, strsAttr(sums[1], contract.AttrAnomalies))
}

// The closing span arrives before a restart and the job after it: the
// replayed facts name the job as the live path does.
func TestFollowupInterruptedAcrossRestart(t *testing.T) {
	mem, clk, sink := newMemStorage(), newFakeClock(), new(consumertest.TracesSink)
	spans, closed := interruptedJob("inv-1", contract.ReasonInterrupted)
	h := newStoredHarness(t, mem, clk, sink, nil)
	h.consume(batch(closed, spans[0], spans[1], spans[2]))
	h.shutdown()
	h2 := newStoredHarness(t, mem, clk, sink, nil)
	h2.consume(batch(spans[3]))
	sums := h2.of("inv-1")
	require.NotEmpty(t, sums)
	s := sums[len(sums)-1]
	assertStatus(t, s, contract.StatusFinal, 1)
	assert.Equal(t, []string{contract.AnomalyFollowupInterrupted + ":background shell"}, strsAttr(s, contract.AttrAnomalies))
	h2.shutdown()
}
