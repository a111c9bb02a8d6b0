package invocationprocessor

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
)

// owedReasons lists a view's owed items' reasons.
func owedReasons(v statusapi.Invocation) []string {
	if v.Waiting == nil {
		return nil
	}
	var out []string
	for _, o := range v.Waiting.Owed {
		out = append(out, o.Reason)
	}
	return out
}

func ownRoot(inv string, children int64, extra map[string]any) sp {
	x := map[string]any{contract.AttrConversationID: "conv-" + inv}
	for k, v := range extra {
		x[k] = v
	}
	return sp{inv: inv, name: "invoke_agent coder", trace: 1, id: 1, start: 0, end: 5, role: contract.RoleRoot, children: children, extra: x}
}

// TestOwesDetached: a root that declared a detached span owes it (issue
// 33, observation 3): owes_work with missing_detached, not only the
// open_timeout deadline.
func TestOwesDetached(t *testing.T) {
	h, views := statusHarness(t, 1, nil)
	h.consume(batch(ownRoot("inv-d", 0, map[string]any{contract.AttrDetached: int64(1)})))
	v := views.latest(t, "inv-d")
	assert.Equal(t, statusapi.StatusPending, v.Status)
	assert.True(t, v.Waiting.OwesWork())
	assert.Equal(t, []string{contract.ReasonMissingDetached + ":invoke_agent coder"}, owedReasons(v))
}

// TestOwesFollowupReopenedAfterFinal: a job arriving after the final
// summary re-opens a followup in a revision; the closed invocation owes
// it until its continuation arrives (observation 4).
func TestOwesFollowupReopenedAfterFinal(t *testing.T) {
	h, views := statusHarness(t, 1, nil)
	h.consume(batch(ownRoot("inv-f", 0, nil)))
	require.Equal(t, statusapi.StatusFinal, views.latest(t, "inv-f").Status)
	assert.False(t, views.latest(t, "inv-f").Waiting.OwesWork())

	job := sp{inv: "inv-f", name: "background shell", trace: 1, id: 4, parent: 1, start: 3, end: 20, role: contract.RoleBackground,
		children: int64(0), followups: int64(1), late: true}
	h.consume(batch(job))
	v := views.latest(t, "inv-f")
	assert.False(t, v.Open(), "a revision, not a reopened invocation")
	assert.True(t, v.Waiting.OwesWork(), "the late job's followup is owed")
	assert.Equal(t, []string{contract.ReasonOpenFollowup + ":background shell"}, owedReasons(v))

	// Retention does not forget it while it owes.
	h.advance(createDefaultConfig().(*Config).Retention + time.Second)
	assert.True(t, views.latest(t, "inv-f").Waiting.OwesWork())
	for _, s := range h.p.shards {
		assert.Equal(t, 1, s.closed.n, "kept while it owes")
	}

	cont := sp{inv: "inv-f", name: "continue_agent coder", trace: 2, id: 10, start: 21, end: 30, role: contract.RoleContinuation,
		children: int64(0), followupOf: []uint64{4}, linkTrace: 1}
	h.consume(batch(cont))
	v = views.latest(t, "inv-f")
	assert.False(t, v.Waiting.OwesWork(), "owed: %v", owedReasons(v))
}

// TestOwesWake: a wake span makes its invocation owe the running turn
// from its arrival (observation 2), a wake of a turn nobody owns names
// its session, and the turn's span ends it.
func TestOwesWake(t *testing.T) {
	h, views := statusHarness(t, 1, nil)
	root := ownRoot("inv-w", 1, nil)
	job := sp{inv: "inv-w", name: "background shell", trace: 1, id: 4, parent: 1, start: 3, end: 20, role: contract.RoleBackground,
		children: int64(0), followups: int64(1)}
	h.consume(batch(root, job))
	before := owedReasons(views.latest(t, "inv-w"))
	assert.Equal(t, []string{contract.ReasonOpenFollowup + ":background shell"}, before)

	wake := sp{inv: "inv-w", name: "wake_agent coder", trace: 2, id: 11, parent: 10, start: 21, end: 21, role: contract.RoleWake,
		extra: map[string]any{contract.AttrConversationID: "conv-inv-w"}}
	h.consume(batch(wake))
	v := views.latest(t, "inv-w")
	assert.Contains(t, owedReasons(v), contract.ReasonRunningTurn+":wake_agent coder")
	assert.True(t, slices.ContainsFunc(v.Waiting.Owed, statusapi.Owed.RunningTurn))

	cont := sp{inv: "inv-w", name: "continue_agent coder", trace: 2, id: 10, start: 21, end: 30, role: contract.RoleContinuation,
		children: int64(1), followupOf: []uint64{4}, linkTrace: 1}
	h.consume(batch(cont))
	v = views.latest(t, "inv-w")
	assert.Equal(t, statusapi.StatusFinal, v.Status)
	assert.False(t, v.Waiting.OwesWork())

	// An unattributed turn's wake arrives before its root: the session is
	// known, and owes the turn.
	uwake := sp{inv: "inv-u", name: "wake_agent coder", trace: 5, id: 51, parent: 50, start: 40, end: 40, role: contract.RoleWake,
		extra: map[string]any{contract.AttrConversationID: "conv-u", contract.AttrAgentName: "coder"}}
	h.consume(batch(uwake))
	u := views.latest(t, "inv-u")
	assert.Equal(t, "conv-u", u.Session)
	assert.True(t, u.Waiting.OwesWork())
	assert.Equal(t, []string{contract.ReasonRunningTurn + ":wake_agent coder"}, owedReasons(u))
}

// TestOwesTimeoutWritesOff: open_timeout is the one write-off: the closed
// view owes nothing of what it owed, but a job arriving later is owed.
func TestOwesTimeoutWritesOff(t *testing.T) {
	h, views := statusHarness(t, 1, nil)
	h.consume(batch(ownRoot("inv-t", 1, nil)))
	require.True(t, views.latest(t, "inv-t").Waiting.OwesWork())
	h.advance(createDefaultConfig().(*Config).OpenTimeout + time.Second)
	v := views.latest(t, "inv-t")
	require.Equal(t, statusapi.StatusIncomplete, v.Status)
	assert.False(t, v.Waiting.OwesWork(), "open_timeout wrote it off: %v", owedReasons(v))

	job := sp{inv: "inv-t", name: "background shell", trace: 1, id: 4, parent: 1, start: 3, end: 20, role: contract.RoleBackground,
		children: int64(0), followups: int64(1), late: true}
	h.consume(batch(job))
	assert.Equal(t, []string{contract.ReasonOpenFollowup + ":background shell"}, owedReasons(views.latest(t, "inv-t")))
}

// TestOwesEvictionKeepsOwing: an invocation evicted by the open bound
// still owes the job it waits for.
func TestOwesEvictionKeepsOwing(t *testing.T) {
	h, views := statusHarness(t, 1, func(c *Config) { c.MaxOpenInvocations = 1 })
	h.consume(batch(ownRoot("inv-e1", 1, nil)))
	h.consume(batch(ownRoot("inv-e2", 1, nil)))
	v := views.latest(t, "inv-e1")
	require.Equal(t, statusapi.StatusIncomplete, v.Status, "evicted")
	assert.True(t, v.Waiting.OwesWork(), "its child is still owed")
}
