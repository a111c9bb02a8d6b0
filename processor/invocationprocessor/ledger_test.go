package invocationprocessor

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
)

func requireOne(t *testing.T, h *harness, id string) ptrace.Span {
	t.Helper()
	s := h.of(id)
	require.Len(t, s, 1, "summaries of %s", id)
	return s[0]
}

func assertStatus(t *testing.T, s ptrace.Span, status string, revision int64) {
	t.Helper()
	assert.Equal(t, status, strAttr(s, contract.AttrStatus), "status (reasons %v, anomalies %v)",
		strsAttr(s, contract.AttrIncompleteReasons), strsAttr(s, contract.AttrAnomalies))
	assert.Equal(t, revision, intAttr(s, contract.AttrRevision), "revision")
}

func TestFinalInOneBatch(t *testing.T) {
	h := newHarness(t, 4, nil)
	h.consume(batch(scenario("inv-1", 0)...))
	s := requireOne(t, h, "inv-1")
	assertStatus(t, s, contract.StatusFinal, 1)
	assert.Equal(t, 6, h.passed())
	assert.Equal(t, int64(150), intAttr(s, contract.AttrUsageInputTokens))
	assert.Equal(t, int64(15), intAttr(s, contract.AttrUsageOutputTokens))
	assert.Equal(t, int64(50), intAttr(s, contract.AttrAfterResultInput))
	assert.Equal(t, int64(5), intAttr(s, contract.AttrAfterResultOutput))
	assert.Equal(t, int64(2), intAttr(s, contract.AttrModelCalls))
	assert.Equal(t, int64(1), intAttr(s, contract.AttrBackgroundJobs))
	assert.Equal(t, int64(1), intAttr(s, contract.AttrContinuations))
	assert.Equal(t, int64(6), intAttr(s, contract.AttrSpans))
	assert.Equal(t, int64(2), intAttr(s, contract.AttrTraces))
	assert.Equal(t, int64(0), intAttr(s, contract.AttrDuplicateSpans))
	assert.Equal(t, int64(20_000), intAttr(s, contract.AttrTimeToFinalMS))
	assert.Equal(t, tid(1), s.TraceID())
	assert.Equal(t, sid(1), s.ParentSpanID())
	assert.Equal(t, ts(0), s.StartTimestamp())
	assert.Equal(t, ts(30), s.EndTimestamp())
	require.Equal(t, 1, s.Links().Len())
	assert.Equal(t, sid(10), s.Links().At(0).SpanID())
	assert.Empty(t, strsAttr(s, contract.AttrAnomalies))
	assert.Empty(t, strsAttr(s, contract.AttrIncompleteReasons))
}

func TestPassThroughWithoutInvocationID(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.consume(batch(sp{name: "GET /", trace: 9, id: 9, start: 0, end: 1}))
	assert.Equal(t, 1, h.passed())
	assert.Empty(t, h.summaries())
	for _, s := range h.p.shards {
		assert.Empty(t, s.invs, "span without invocation.id must not be indexed")
	}
}

func TestRootMissing(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.OpenTimeout = time.Hour })
	h.consume(batch(scenario("inv-1", 0)[1:]...))
	assert.Empty(t, h.summaries())
	h.advance(59 * time.Minute)
	assert.Empty(t, h.summaries(), "nothing is final or incomplete before open_timeout")
	h.advance(time.Minute)
	s := requireOne(t, h, "inv-1")
	assertStatus(t, s, contract.StatusIncomplete, 1)
	assert.Equal(t, []string{contract.ReasonRootMissing, contract.ReasonOpenTimeout}, strsAttr(s, contract.AttrIncompleteReasons))
	assert.True(t, s.ParentSpanID().IsEmpty(), "no parent without a root")
	assert.Equal(t, tid(1), s.TraceID(), "trace of the first span seen")
	_, ok := s.Attributes().Get(contract.AttrTimeToFinalMS)
	assert.False(t, ok, "time_to_final_ms is absent without a root")
	assert.Equal(t, int64(150), intAttr(s, contract.AttrUsageInputTokens))
}

func TestChildrenArriveBeforeParents(t *testing.T) {
	h := newHarness(t, 1, nil)
	spans := scenario("inv-1", 0)
	for i := len(spans) - 1; i >= 0; i-- {
		h.consume(batch(spans[i]))
		if i > 0 {
			assert.Empty(t, h.summaries(), "final before span %d arrived", i)
		}
	}
	assertStatus(t, requireOne(t, h, "inv-1"), contract.StatusFinal, 1)
}

func TestChildrenMissing(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.OpenTimeout = time.Minute; c.RemoteSettle = time.Second; c.PendingDelay = 0 })
	spans := scenario("inv-1", 0)
	// execute_tool declares one child: the background span never comes.
	h.consume(batch(spans[0], spans[1], spans[2]))
	pend := requireOne(t, h, "inv-1")
	assertStatus(t, pend, contract.StatusPending, 0)
	assert.Equal(t, []string{"missing_children:execute_tool shell"}, strsAttr(pend, contract.AttrIncompleteReasons))
	h.advance(time.Minute)
	got := h.of("inv-1")
	require.Len(t, got, 2)
	assertStatus(t, got[1], contract.StatusIncomplete, 1)
	assert.Equal(t, []string{"missing_children:execute_tool shell", contract.ReasonOpenTimeout}, strsAttr(got[1], contract.AttrIncompleteReasons))
}

func TestFollowupMissingThenArrivingFirst(t *testing.T) {
	t.Run("missing", func(t *testing.T) {
		h := newHarness(t, 1, func(c *Config) { c.EmitPending = false })
		spans := scenario("inv-1", 0)
		h.consume(batch(spans[:4]...))
		assert.Empty(t, h.summaries(), "emit_pending=false")
		h.shutdown()
		s := requireOne(t, h, "inv-1")
		assertStatus(t, s, contract.StatusIncomplete, 1)
		assert.Equal(t, []string{"open_followup:background shell", contract.ReasonShutdown}, strsAttr(s, contract.AttrIncompleteReasons))
	})
	t.Run("continuation first", func(t *testing.T) {
		h := newHarness(t, 1, withPendingDelay(0))
		spans := scenario("inv-1", 0)
		h.consume(batch(spans[4], spans[5]))
		h.consume(batch(spans[0], spans[1], spans[2]))
		assertStatus(t, requireOne(t, h, "inv-1"), contract.StatusPending, 0)
		h.consume(batch(spans[3]))
		got := h.of("inv-1")
		require.Len(t, got, 2)
		assertStatus(t, got[1], contract.StatusFinal, 1)
	})
}

func TestPendingThenFinal(t *testing.T) {
	h := newHarness(t, 2, nil)
	spans := scenario("inv-1", 0)
	h.consume(batch(spans[:4]...))
	h.consume(batch(spans[4]))
	h.consume(batch(spans[5]))
	got := h.of("inv-1")
	require.Len(t, got, 2)
	assertStatus(t, got[0], contract.StatusPending, 0)
	assert.Equal(t, []string{"open_followup:background shell"}, strsAttr(got[0], contract.AttrIncompleteReasons))
	assertStatus(t, got[1], contract.StatusFinal, 1)
	assert.NotEqual(t, got[0].SpanID(), got[1].SpanID())
	// A retry of the whole invocation changes nothing.
	h.consume(batch(spans...))
	assert.Len(t, h.of("inv-1"), 2)
	assert.Equal(t, 12, h.passed())
}

func TestRemoteSettle(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.RemoteSettle = 2 * time.Second; c.PendingDelay = 0 })
	spans := scenario("inv-1", 0)
	spans[2].remote = true // the shell's environment carries the context
	h.consume(batch(spans...))
	assertStatus(t, requireOne(t, h, "inv-1"), contract.StatusPending, 0)
	assert.Equal(t, []string{"remote_settling:execute_tool shell"}, strsAttr(h.of("inv-1")[0], contract.AttrIncompleteReasons))

	h.advance(1500 * time.Millisecond)
	// An uncounted child from the subprocess arrives: the quiet time restarts.
	h.consume(batch(sp{inv: "inv-1", name: "chat", trace: 1, id: 50, parent: 3, start: 4, end: 5, op: contract.OpChat, usage: tokens(7, 1)}))
	h.advance(1500 * time.Millisecond)
	assert.Len(t, h.of("inv-1"), 1, "not settled 1.5s after the latest arrival")
	h.advance(500 * time.Millisecond)
	got := h.of("inv-1")
	require.Len(t, got, 2)
	assertStatus(t, got[1], contract.StatusFinal, 1)
	assert.Equal(t, int64(157), intAttr(got[1], contract.AttrUsageInputTokens))
	assert.Empty(t, strsAttr(got[1], contract.AttrAnomalies), "children under a remote parent are not extra")
}

func TestLateSpanRevision(t *testing.T) {
	h := newHarness(t, 1, nil)
	h.consume(batch(scenario("inv-1", 0)...))
	late := sp{inv: "inv-1", name: "chat", trace: 2, id: 12, parent: 10, start: 23, end: 31, op: contract.OpChat, usage: tokens(1, 2)}
	h.consume(batch(late))
	got := h.of("inv-1")
	require.Len(t, got, 2)
	assertStatus(t, got[0], contract.StatusFinal, 1)
	assertStatus(t, got[1], contract.StatusFinal, 2)
	assert.Equal(t, int64(151), intAttr(got[1], contract.AttrUsageInputTokens))
	assert.Equal(t, int64(3), intAttr(got[1], contract.AttrModelCalls))
	assert.Equal(t, ts(31), got[1].EndTimestamp())
	assert.Equal(t, []string{"extra_children:continue_agent coder", "late_span:chat"}, strsAttr(got[1], contract.AttrAnomalies))
	// The same late span again is a duplicate: no third revision.
	h.consume(batch(late))
	assert.Len(t, h.of("inv-1"), 2)

	// After retention the invocation is forgotten.
	h.advance(15 * time.Minute)
	for _, s := range h.p.shards {
		assert.Empty(t, s.invs)
	}
}

func TestDuplicates(t *testing.T) {
	h := newHarness(t, 3, withPendingDelay(0))
	spans := scenario("inv-1", 0)
	h.consume(batch(spans[0], spans[1], spans[1], spans[2]))
	h.consume(batch(spans[1], spans[2], spans[3], spans[4], spans[5], spans[5]))
	got := h.of("inv-1")
	require.Len(t, got, 2)
	final := got[1]
	assertStatus(t, final, contract.StatusFinal, 1)
	assert.Equal(t, int64(4), intAttr(final, contract.AttrDuplicateSpans))
	assert.Equal(t, int64(150), intAttr(final, contract.AttrUsageInputTokens))
	assert.Equal(t, int64(6), intAttr(final, contract.AttrSpans))
	assert.Equal(t, 10, h.passed(), "duplicates pass through too")
}

func TestForeignFollowup(t *testing.T) {
	h := newHarness(t, 4, func(c *Config) { c.OpenTimeout = time.Hour })
	a := scenario("inv-a", 0)
	// inv-b's continuation claims to follow up inv-a's background job.
	b := []sp{
		{inv: "inv-b", name: "continue_agent coder", trace: 200, id: 200, start: 21, end: 30, role: contract.RoleContinuation, children: int64(0), followupOf: []uint64{4}, linkTrace: 1},
		{inv: "inv-b", name: "invoke_agent coder", trace: 201, id: 201, start: 0, end: 1, role: contract.RoleRoot, children: int64(0)},
	}
	h.consume(batch(append(a[:4], b...)...))
	fb := requireOne(t, h, "inv-b")
	assertStatus(t, fb, contract.StatusFinal, 1)
	assert.Equal(t, []string{"foreign_followup:continue_agent coder"}, strsAttr(fb, contract.AttrAnomalies))
	assertStatus(t, requireOne(t, h, "inv-a"), contract.StatusPending, 0)
	h.advance(time.Hour)
	got := h.of("inv-a")
	require.Len(t, got, 2)
	assertStatus(t, got[1], contract.StatusIncomplete, 1)
	assert.Contains(t, strsAttr(got[1], contract.AttrIncompleteReasons), "open_followup:background shell")
}

func TestExtraChildren(t *testing.T) {
	h := newHarness(t, 1, nil)
	spans := scenario("inv-1", 0)
	extra := sp{inv: "inv-1", name: "chat", trace: 1, id: 30, parent: 1, start: 4, end: 5, op: contract.OpChat, usage: tokens(3, 4)}
	h.consume(batch(append(spans, extra)...))
	s := requireOne(t, h, "inv-1")
	assertStatus(t, s, contract.StatusFinal, 1)
	assert.Equal(t, []string{"extra_children:invoke_agent coder"}, strsAttr(s, contract.AttrAnomalies))
	assert.Equal(t, int64(153), intAttr(s, contract.AttrUsageInputTokens), "extra children's usage counts")

	// Arriving before the parent's declaration gives the same anomaly.
	h2 := newHarness(t, 1, nil)
	h2.consume(batch(extra, spans[1], spans[2]))
	h2.consume(batch(spans[0], spans[3], spans[4], spans[5]))
	s2 := requireOne(t, h2, "inv-1")
	assertStatus(t, s2, contract.StatusFinal, 1)
	assert.Equal(t, []string{"extra_children:invoke_agent coder"}, strsAttr(s2, contract.AttrAnomalies))
}

func TestInvalidUsage(t *testing.T) {
	h := newHarness(t, 1, nil)
	root := sp{inv: "inv-1", name: "invoke_agent coder", trace: 1, id: 1, start: 0, end: 10, role: contract.RoleRoot, children: int64(5)}
	calls := []sp{
		{inv: "inv-1", name: "chat a", trace: 1, id: 2, parent: 1, start: 1, end: 2, children: int64(0), op: contract.OpChat,
			usage: map[string]any{contract.AttrUsageInputTokens: "100", contract.AttrUsageOutputTokens: int64(1)}},
		{inv: "inv-1", name: "chat b", trace: 1, id: 3, parent: 1, start: 1, end: 2, children: int64(0), op: contract.OpChat,
			usage: map[string]any{contract.AttrUsageInputTokens: 2.5, contract.AttrUsageOutputTokens: int64(-3)}},
		{inv: "inv-1", name: "chat c", trace: 1, id: 4, parent: 1, start: 1, end: 2, children: int64(0), op: contract.OpChat,
			usage: map[string]any{contract.AttrUsageInputTokens: int64(math.MaxInt64), contract.AttrUsageOutputTokens: int64(2)}},
		{inv: "inv-1", name: "chat d", trace: 1, id: 5, parent: 1, start: 1, end: 2, children: int64(0), op: contract.OpChat,
			usage: map[string]any{contract.AttrUsageInputTokens: int64(1), contract.AttrUsageCacheReadTokens: true}},
		// Not a model call: its usage is never summed nor checked.
		{inv: "inv-1", name: "execute_tool x", trace: 1, id: 6, parent: 1, start: 1, end: 2, children: int64(0), op: contract.OpExecuteTool,
			usage: map[string]any{contract.AttrUsageInputTokens: "junk"}},
	}
	require.NotPanics(t, func() { h.consume(batch(append([]sp{root}, calls...)...)) })
	s := requireOne(t, h, "inv-1")
	// v0.2 rule 5: a count that cannot be summed leaves the totals
	// unproven, so the invocation closes incomplete, not final.
	assertStatus(t, s, contract.StatusIncomplete, 1)
	assert.Equal(t, int64(math.MaxInt64), intAttr(s, contract.AttrUsageInputTokens), "the 1 after MaxInt64 would overflow")
	assert.Equal(t, int64(3), intAttr(s, contract.AttrUsageOutputTokens))
	assert.Equal(t, int64(4), intAttr(s, contract.AttrModelCalls))
	assert.ElementsMatch(t, []string{
		"invalid_usage:gen_ai.usage.input_tokens on chat a",
		"invalid_usage:gen_ai.usage.input_tokens on chat b",
		"invalid_usage:gen_ai.usage.output_tokens on chat b",
		"invalid_usage:gen_ai.usage.input_tokens on chat d",
		"invalid_usage:gen_ai.usage.cache_read.input_tokens on chat d",
	}, strsAttr(s, contract.AttrIncompleteReasons))
	assert.Empty(t, strsAttr(s, contract.AttrAnomalies))
}

func TestInvalidCountNeverFinal(t *testing.T) {
	for name, bad := range map[string]any{
		"string":   "2",
		"double":   2.0,
		"negative": int64(-1),
		"too big":  int64(1 << 40),
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, 1, func(c *Config) { c.OpenTimeout = time.Minute; c.RemoteSettle = time.Second; c.EmitPending = false })
			spans := scenario("inv-1", 0)
			spans[2].children = bad
			h.consume(batch(spans...))
			assert.Empty(t, h.summaries())
			h.advance(time.Minute)
			s := requireOne(t, h, "inv-1")
			assertStatus(t, s, contract.StatusIncomplete, 1)
			want := []string{"invalid_count:execute_tool shell"}
			if _, isInt := bad.(int64); !isInt {
				// The wrong type is also malformed (CONTRACT.md v0.6 rule 1).
				want = append(want, "malformed_attribute:invocation.children on execute_tool shell")
			}
			assert.Equal(t, append(want, contract.ReasonOpenTimeout), strsAttr(s, contract.AttrIncompleteReasons))
		})
	}
	t.Run("missing followups", func(t *testing.T) {
		h := newHarness(t, 1, func(c *Config) { c.EmitPending = false })
		spans := scenario("inv-1", 0)
		spans[3].followups = nil
		h.consume(batch(spans...))
		h.shutdown()
		s := requireOne(t, h, "inv-1")
		assert.Equal(t, []string{"invalid_count:background shell", contract.ReasonShutdown}, strsAttr(s, contract.AttrIncompleteReasons))
	})
}

func TestEviction(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.MaxOpenInvocations = 2 })
	for i, id := range []string{"inv-1", "inv-2", "inv-3"} {
		h.clock.Advance(time.Second)
		h.consume(batch(scenario(id, uint64(i*100))[1:]...))
	}
	s := requireOne(t, h, "inv-1")
	assertStatus(t, s, contract.StatusIncomplete, 1)
	assert.Equal(t, []string{contract.ReasonRootMissing, contract.ReasonEvicted}, strsAttr(s, contract.AttrIncompleteReasons))
	assert.Empty(t, h.of("inv-2"))
	assert.Empty(t, h.of("inv-3"))
	// inv-1's root arrives late: a corrected summary, now final.
	h.consume(batch(scenario("inv-1", 0)[0]))
	got := h.of("inv-1")
	require.Len(t, got, 2)
	assertStatus(t, got[1], contract.StatusFinal, 2)
	assert.Contains(t, strsAttr(got[1], contract.AttrAnomalies), "late_span:invoke_agent coder")
	assert.Equal(t, 2, h.p.shards[0].open.n)
}

func TestOpenTimeoutFromFirstArrival(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.OpenTimeout = 10 * time.Minute })
	spans := scenario("inv-1", 0)
	h.consume(batch(spans[:4]...))
	h.advance(9 * time.Minute)
	h.consume(batch(spans[4])) // a later arrival does not extend the timeout
	h.advance(time.Minute)
	got := h.of("inv-1")
	require.Len(t, got, 2)
	assertStatus(t, got[1], contract.StatusIncomplete, 1)
	assert.Equal(t, []string{"missing_children:continue_agent coder", contract.ReasonOpenTimeout}, strsAttr(got[1], contract.AttrIncompleteReasons))
}

func TestShutdownEmitsOpen(t *testing.T) {
	h := newHarness(t, 4, nil)
	require.NoError(t, h.p.Start(context.Background(), nil))
	for i := range 10 {
		h.consume(batch(scenario("inv-"+string(rune('a'+i)), uint64(i*100))[:3]...))
	}
	n := len(h.summaries())
	h.shutdown()
	all := h.summaries()
	require.Len(t, all, n+10)
	for _, s := range all[n:] {
		assertStatus(t, s, contract.StatusIncomplete, 1)
		assert.Contains(t, strsAttr(s, contract.AttrIncompleteReasons), contract.ReasonShutdown)
	}
}

func TestSpanLimit(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.MaxSpansPerInvocation = 4 })
	h.consume(batch(scenario("inv-1", 0)...))
	assert.Equal(t, 6, h.passed(), "spans beyond the limit still pass")
	s := requireOne(t, h, "inv-1")
	assertStatus(t, s, contract.StatusIncomplete, 1)
	assert.Contains(t, strsAttr(s, contract.AttrIncompleteReasons), reasonSpanLimit)
	assert.Contains(t, strsAttr(s, contract.AttrAnomalies), reasonSpanLimit)
	assert.LessOrEqual(t, intAttr(s, contract.AttrSpans), int64(4))
	// More spans of it change nothing.
	h.consume(batch(sp{inv: "inv-1", name: "chat", trace: 1, id: 99, parent: 1, start: 1, end: 2, op: contract.OpChat, usage: tokens(1, 1)}))
	assert.Len(t, h.of("inv-1"), 1)
}

func TestConsumedByFollowupClosed(t *testing.T) {
	h := newHarness(t, 4, nil)
	spans := scenario("inv-a", 0)[:4] // root, chat, tool, background (followups 1)
	// inv-x's turn was already running when the job ended and read the
	// notification: a plain consumed link; inv-a closes the followup.
	x := []sp{
		{inv: "inv-x", name: "invoke_agent coder", trace: 300, id: 300, start: 15, end: 40, role: contract.RoleRoot, children: int64(1)},
		{inv: "inv-x", name: "chat", trace: 300, id: 301, parent: 300, start: 21, end: 25, children: int64(0), op: contract.OpChat, usage: tokens(70, 7), consumedOf: []uint64{4}, linkTrace: 1},
	}
	closed := sp{inv: "inv-a", name: contract.SpanNameFollowupClosed, trace: 400, id: 400, start: 20, end: 20, role: contract.RoleFollowupClosed,
		children: int64(0), followupOf: []uint64{4}, linkTrace: 1,
		extra: map[string]any{contract.AttrFollowupReason: contract.ReasonConsumedBy, contract.AttrFollowupConsumer: "inv-x"}}
	h.consume(batch(append(spans, x...)...))
	h.consume(batch(closed))
	a := h.of("inv-a")
	require.Len(t, a, 2)
	assertStatus(t, a[1], contract.StatusFinal, 1)
	assert.Equal(t, int64(100), intAttr(a[1], contract.AttrUsageInputTokens), "the consuming turn's usage stays with its invocation")
	assert.Equal(t, int64(0), intAttr(a[1], contract.AttrContinuations))
	assert.Equal(t, int64(2), intAttr(a[1], contract.AttrTraces))
	xs := requireOne(t, h, "inv-x")
	assertStatus(t, xs, contract.StatusFinal, 1)
	assert.Equal(t, int64(70), intAttr(xs, contract.AttrUsageInputTokens))
	assert.Empty(t, strsAttr(xs, contract.AttrAnomalies))
}

func TestAfterResultClassifiedWhenRootArrivesLast(t *testing.T) {
	h := newHarness(t, 1, nil)
	spans := scenario("inv-1", 0)
	h.consume(batch(spans[5], spans[1], spans[4], spans[3], spans[2]))
	h.consume(batch(spans[0]))
	s := requireOne(t, h, "inv-1")
	assertStatus(t, s, contract.StatusFinal, 1)
	assert.Equal(t, int64(50), intAttr(s, contract.AttrAfterResultInput))
	assert.Equal(t, int64(5), intAttr(s, contract.AttrAfterResultOutput))
}

func TestCost(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) {
		c.Prices = map[string]Price{"m1": {Input: 3, Output: 15, CacheRead: 0.3, CacheCreation: 3.75}}
	})
	calls := []sp{
		{inv: "inv-1", name: "invoke_agent coder", trace: 1, id: 1, start: 0, end: 10, role: contract.RoleRoot, children: int64(2)},
		{inv: "inv-1", name: "chat m1", trace: 1, id: 2, parent: 1, start: 1, end: 2, children: int64(0), op: contract.OpChat,
			usage: map[string]any{
				contract.AttrUsageInputTokens: int64(1_000_000), contract.AttrUsageOutputTokens: int64(100_000),
				contract.AttrUsageCacheReadTokens: int64(600_000), contract.AttrUsageCacheCreateTokens: int64(200_000),
			},
			extra: map[string]any{contract.AttrResponseModel: "m1", contract.AttrRequestModel: "alias"}},
		{inv: "inv-1", name: "chat m2", trace: 1, id: 3, parent: 1, start: 1, end: 2, children: int64(0), op: contract.OpChat,
			usage: tokens(5, 5), extra: map[string]any{contract.AttrRequestModel: "m2"}},
	}
	h.consume(batch(calls...))
	s := requireOne(t, h, "inv-1")
	v, ok := s.Attributes().Get(contract.AttrCost)
	require.True(t, ok)
	// 200k uncached*3 + 100k*15 + 600k*0.3 + 200k*3.75, per million.
	assert.InDelta(t, 0.6+1.5+0.18+0.75, v.Double(), 1e-9)
	assert.Equal(t, "USD", strAttr(s, contract.AttrCostCurrency))
	assert.Equal(t, []string{"unpriced_model:m2"}, strsAttr(s, contract.AttrAnomalies))
}

// TestSummaryNotReindexed: a summary seen again by a collector that
// trusts its emitter (a second tier) passes through once more and is
// never indexed.
func TestSummaryNotReindexed(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.Summaries.AcceptFrom = []string{testCollector} })
	h.consume(batch(scenario("inv-1", 0)...))
	first := h.sink.AllTraces()
	require.Len(t, first, 2)
	h.consume(first[1]) // a second tier sees the summary
	assert.Len(t, h.of("inv-1"), 2, "summary passed through once more, not indexed")
	all := h.sink.AllTraces()
	require.Len(t, all, 3)
	assert.True(t, all[2] == first[1], "the trusted summary's batch passes unchanged, not copied")
	assert.Equal(t, int64(6), h.p.shards[0].invs["inv-1"].Indexed)
}

// flakyConsumer refuses the first `fail` summary batches.
type flakyConsumer struct {
	consumertest.TracesSink
	mu   sync.Mutex
	fail int
	err  error
}

func (f *flakyConsumer) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	if len(summarySpans([]ptrace.Traces{td})) > 0 {
		f.mu.Lock()
		refuse := f.fail > 0
		f.fail--
		f.mu.Unlock()
		if refuse {
			return f.err
		}
	}
	return f.TracesSink.ConsumeTraces(ctx, td)
}

func TestSummarySendRetried(t *testing.T) {
	refused := errors.New("refused")
	next := &flakyConsumer{fail: 1, err: refused}
	clk := newFakeClock()
	p, err := newProcessor(settingsForTest(), createDefaultConfig().(*Config), next, clk, 1)
	require.NoError(t, err)
	require.NoError(t, p.ConsumeTraces(context.Background(), batch(scenario("inv-1", 0)...)))
	assert.Len(t, next.AllTraces(), 1, "the spans passed through")
	assert.Empty(t, summarySpans(next.AllTraces()))
	require.NoError(t, p.tick(context.Background(), clk.Advance(time.Second)))
	got := summarySpans(next.AllTraces())
	require.Len(t, got, 1, "the refused summary is sent again")
	assertStatus(t, got[0], contract.StatusFinal, 1)
	require.NoError(t, p.Shutdown(context.Background()))
}

func TestSummarySendPermanentErrorDropped(t *testing.T) {
	refused := consumererror.NewPermanent(errors.New("bad data"))
	next := &flakyConsumer{fail: 1, err: refused}
	clk := newFakeClock()
	p, err := newProcessor(settingsForTest(), createDefaultConfig().(*Config), next, clk, 1)
	require.NoError(t, err)
	require.NoError(t, p.ConsumeTraces(context.Background(), batch(scenario("inv-1", 0)...)))
	require.NoError(t, p.tick(context.Background(), clk.Advance(time.Second)))
	assert.Empty(t, summarySpans(next.AllTraces()), "a permanent refusal is not retried")
	require.NoError(t, p.Shutdown(context.Background()))
}

// checkIndex verifies the shard's bookkeeping: every heap entry and list
// member is the live invocation of its id.
func checkIndex(t *testing.T, s *shard) {
	t.Helper()
	for i, inv := range s.timers {
		require.Same(t, s.invs[inv.ID], inv, "heap entry %d is stale", i)
		require.Equal(t, i, inv.index.heapIdx)
	}
	for _, l := range []*invList{&s.open, &s.closed} {
		n := 0
		for inv := l.head; inv != nil && n <= len(s.invs); inv = inv.index.next {
			require.Same(t, s.invs[inv.ID], inv, "list member is stale")
			n++
		}
		require.Equal(t, l.n, n)
	}
	require.Equal(t, len(s.invs), s.open.n+s.closed.n)
}

func TestRecreatedAfterForgotten(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) {
		c.MaxOpenInvocations = 1
		c.MaxClosedInvocations = 1
	})
	mk := func(inv string, id uint64) sp {
		return sp{inv: inv, name: "chat", trace: id, id: id, start: 0, end: 1, op: contract.OpChat, usage: tokens(1, 1)}
	}
	// One batch opens four: p, q and r are evicted, p and q are forgotten
	// (one closed slot), p's fingerprint is dropped (one remembered id),
	// then p comes back as a new invocation.
	h.consume(batch(mk("p", 1), mk("q", 2), mk("r", 3), mk("s", 5)))
	checkIndex(t, h.p.shards[0])
	require.Len(t, h.of("p"), 1)
	h.consume(batch(mk("p", 4)))
	checkIndex(t, h.p.shards[0])
	h.advance(time.Hour)
	checkIndex(t, h.p.shards[0])
	h.shutdown()
	checkIndex(t, h.p.shards[0])
	got := h.of("p")
	require.Len(t, got, 2)
	assert.Equal(t, int64(1), intAttr(got[1], contract.AttrSpans), "the recreated p knows only its new span")
}

func TestClosedInvocationKeepsCompactState(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.OpenTimeout = time.Minute })
	spans := scenario("inv-1", 0)
	h.consume(batch(spans...))
	assertStatus(t, requireOne(t, h, "inv-1"), contract.StatusFinal, 1)
	inv := h.p.shards[0].invs["inv-1"]
	assert.Empty(t, inv.Spans, "a final invocation owes nothing: no full span state is kept")
	assert.Equal(t, 6, inv.CompactedSpans(), "one compact record per span ID, for duplicates and revisions")

	// A duplicate is still recognised: no revision.
	h.consume(batch(spans[1]))
	assert.Len(t, h.of("inv-1"), 1)
	assert.Equal(t, int64(1), inv.Duplicates)
	// The same span ID in another trace is not: a revision, never final.
	reused := spans[1]
	reused.trace, reused.name = 77, "chat retry"
	h.consume(batch(reused))
	got := h.of("inv-1")
	require.Len(t, got, 2)
	assertStatus(t, got[1], contract.StatusIncomplete, 2)
	assert.Equal(t, []string{"span_id_reused:chat retry"}, strsAttr(got[1], contract.AttrIncompleteReasons))
	assert.Equal(t, int64(150), intAttr(got[1], contract.AttrUsageInputTokens), "the reused span is not indexed")

	// An invocation closed with an obligation open keeps the owing span in
	// full; when the missing child arrives the revision is final and the
	// span is compacted too.
	h2 := newHarness(t, 1, func(c *Config) { c.OpenTimeout = time.Minute; c.EmitPending = false })
	b := scenario("inv-2", 0)
	h2.consume(batch(b[0], b[1], b[2]))
	h2.advance(time.Minute)
	inv2 := h2.p.shards[0].invs["inv-2"]
	assert.Len(t, inv2.Spans, 1, "only the tool that still owes its child")
	assert.Equal(t, 2, inv2.CompactedSpans())
	h2.consume(batch(b[3:]...))
	got2 := h2.of("inv-2")
	require.Len(t, got2, 2)
	assertStatus(t, got2[1], contract.StatusFinal, 2)
	assert.Equal(t, []string{"late_span:background shell", "late_span:chat", "late_span:continue_agent coder"}, strsAttr(got2[1], contract.AttrAnomalies))
	assert.Empty(t, inv2.Spans)
	assert.Equal(t, 6, inv2.CompactedSpans())
}

func TestRevisionWaitsForRemoteSettle(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.RemoteSettle = 2 * time.Second; c.PendingDelay = 0 })
	spans := scenario("inv-1", 0)
	spans[2].remote = true
	h.consume(batch(spans...))
	h.advance(2 * time.Second)
	got := h.of("inv-1")
	require.Len(t, got, 2)
	assertStatus(t, got[1], contract.StatusFinal, 1)

	child := func(id uint64, in int64) sp {
		return sp{inv: "inv-1", name: "chat", trace: 1, id: id, parent: 3, start: 4, end: 5, op: contract.OpChat, usage: tokens(in, 1)}
	}
	// Two uncounted children from the subprocess, a second apart: each
	// restarts the quiet time, after close as before it.
	h.consume(batch(child(60, 7)))
	h.advance(time.Second)
	h.consume(batch(child(61, 8)))
	h.advance(1999 * time.Millisecond)
	assert.Len(t, h.of("inv-1"), 2, "no revision while the remote subtree settles")
	h.advance(time.Millisecond)
	got = h.of("inv-1")
	require.Len(t, got, 3, "one revision for both late spans, by the settle timer")
	assertStatus(t, got[2], contract.StatusFinal, 2)
	assert.Equal(t, int64(165), intAttr(got[2], contract.AttrUsageInputTokens))

	t.Run("retention ends first", func(t *testing.T) {
		h := newHarness(t, 1, func(c *Config) { c.RemoteSettle = 2 * time.Second; c.Retention = time.Second; c.PendingDelay = 0 })
		h.consume(batch(spans...))
		h.advance(2 * time.Second)
		h.consume(batch(child(60, 7)))
		h.advance(time.Second) // retention ends before the settle time
		got := h.of("inv-1")
		require.Len(t, got, 3)
		assertStatus(t, got[2], contract.StatusIncomplete, 2)
		assert.Equal(t, []string{"remote_settling:execute_tool shell"}, strsAttr(got[2], contract.AttrIncompleteReasons))
		h.advance(time.Second)
		assert.Empty(t, h.p.shards[0].invs, "forgotten once its last summary's retention ended")
	})
	t.Run("shutdown while settling", func(t *testing.T) {
		h := newHarness(t, 1, func(c *Config) { c.RemoteSettle = 2 * time.Second; c.PendingDelay = 0 })
		h.consume(batch(spans...))
		h.advance(2 * time.Second)
		h.consume(batch(child(60, 7)))
		h.shutdown()
		got := h.of("inv-1")
		require.Len(t, got, 3)
		assertStatus(t, got[2], contract.StatusIncomplete, 2)
	})
}

// TestInvocationBlockSize: an invocation and its first names and traces
// fit Go's 704-byte size class with the allocator's 8-byte header
// (ledger.go, invocationBlock); a field added to invocation or the Graph
// that crosses it costs every invocation 64 bytes more.
func TestInvocationBlockSize(t *testing.T) {
	if n := unsafe.Sizeof(invocationBlock{}); n > maxInvocationBlock {
		t.Fatalf("invocationBlock is %d bytes, more than %d: it takes the next size class", n, maxInvocationBlock)
	}
}
