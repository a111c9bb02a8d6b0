package invocationprocessor

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadatatest"
)

// withPendingDelay sets pending_delay.
func withPendingDelay(d time.Duration) func(*Config) {
	return func(c *Config) { c.PendingDelay = d }
}

// statuses lists the (status, revision) of summaries, in order.
func statuses(sums []ptrace.Span) []string {
	var out []string
	for _, s := range sums {
		out = append(out, strAttr(s, contract.AttrStatus)+"/"+strconv.FormatInt(intAttr(s, contract.AttrRevision), 10))
	}
	return out
}

// The caller's turn as it is exported while its background job still
// runs: the root, its chat and the tool that launched the job (which
// declares the job span as its child). scenario's s[3] is the job span,
// exported when the job ends; s[4] and s[5] the continuation it wakes.
func callerTurn(s []sp) ptrace.Traces { return batch(s[0], s[1], s[2]) }

// pending_delay: 0 keeps the behaviour of the earlier default: the pending
// goes out with the batch that brought the root.
func TestPendingDelayZeroEmitsAtOnce(t *testing.T) {
	h := newHarness(t, 2, withPendingDelay(0))
	s := scenario("inv", 0)
	h.consume(callerTurn(s))
	assert.Equal(t, []string{"pending/0"}, statuses(h.of("inv")))
	h.consume(batch(s[3], s[4], s[5]))
	assert.Equal(t, []string{"pending/0", "final/1"}, statuses(h.of("inv")))
}

// The default is the SDK batch span processor's schedule delay, 5s: an
// invocation whose spans arrive shuffled and close it within 5s of its
// root gets no pending; one still open then gets it at 5s, and its final
// after.
func TestPendingDelayDefault(t *testing.T) {
	require.Equal(t, 5*time.Second, createDefaultConfig().(*Config).PendingDelay)
	h := newHarness(t, 2, nil)
	shuffled, slow := scenario("shuffled", 0), scenario("slow", 100)
	h.consume(batch(shuffled[0], shuffled[1], shuffled[5], slow[0], slow[1], slow[2]))
	h.advance(4 * time.Second)
	h.consume(batch(shuffled[2], shuffled[4], shuffled[3]))
	require.Equal(t, []string{"final/1"}, statuses(h.of("shuffled")), "closed within the delay: no pending")
	require.Empty(t, h.of("slow"))
	h.advance(999 * time.Millisecond)
	require.Empty(t, h.of("slow"), "a millisecond before 5s")
	h.advance(time.Millisecond)
	require.Equal(t, []string{"pending/0"}, statuses(h.of("slow")))
	assert.Equal(t, []string{"missing_children:execute_tool shell"}, strsAttr(h.of("slow")[0], contract.AttrIncompleteReasons))
	h.consume(batch(slow[3], slow[4], slow[5]))
	require.Equal(t, []string{"pending/0", "final/1"}, statuses(h.of("slow")))
	require.Equal(t, []string{"final/1"}, statuses(h.of("shuffled")))
}

// Spans that merely arrive out of order: the invocation closes within the
// delay, so it never gets a pending, only its final.
func TestPendingDelayClosesWithinDelay(t *testing.T) {
	h := newHarness(t, 2, withPendingDelay(time.Second))
	s := scenario("inv", 0)
	h.consume(batch(s[1], s[2], s[4], s[5])) // children and the continuation first
	h.advance(200 * time.Millisecond)
	h.consume(batch(s[0])) // the root: the job span is still owed
	h.advance(500 * time.Millisecond)
	require.Empty(t, h.of("inv"), "no pending within the delay")
	h.consume(batch(s[3])) // the job closes it, 700ms after the root
	h.advance(time.Second)
	h.advance(time.Minute)
	sums := h.of("inv")
	require.Equal(t, []string{"final/1"}, statuses(sums))
	assert.Equal(t, int64(150), intAttr(sums[0], contract.AttrUsageInputTokens))
	assert.Equal(t, int64(6), intAttr(sums[0], contract.AttrSpans))
}

// Still open when the delay ends: the timer emits exactly one pending at
// the delay's end, counted from the root's arrival (not the first span's),
// and the final follows.
func TestPendingDelayTimerEmitsOnce(t *testing.T) {
	h := newHarness(t, 2, withPendingDelay(time.Second))
	s := scenario("inv", 0)
	h.consume(batch(s[1], s[2]))
	h.advance(300 * time.Millisecond)
	h.consume(batch(s[0])) // root at +300ms: pending due at +1300ms
	h.advance(999 * time.Millisecond)
	require.Empty(t, h.of("inv"), "a millisecond before the delay's end")
	h.advance(time.Millisecond)
	require.Equal(t, []string{"pending/0"}, statuses(h.of("inv")), "at the delay's end, by the timer alone")
	pending := h.of("inv")[0]
	assert.Equal(t, []string{"missing_children:execute_tool shell"}, strsAttr(pending, contract.AttrIncompleteReasons))
	h.advance(5 * time.Second)
	h.consume(batch(s[0])) // a duplicate root changes nothing
	h.consume(batch(s[3])) // the job ended: its followup is owed, the pending already went out
	require.Len(t, h.of("inv"), 1, "one pending only")
	h.consume(batch(s[4], s[5]))
	require.Equal(t, []string{"pending/0", "final/1"}, statuses(h.of("inv")))
}

// An invocation known to owe a background job's work gets its pending at
// once, whatever the delay: an ended job whose followup has not arrived,
// or a turn a wake span announced. Nothing else is: a missing child (a job
// still running looks like a span still in flight) waits for the delay.
func TestPendingAtOnceForJobWork(t *testing.T) {
	t.Run("ended job with the root", func(t *testing.T) {
		h := newHarness(t, 1, nil)
		s := scenario("inv", 0)
		h.consume(batch(s[0], s[1], s[2], s[3]))
		require.Equal(t, []string{"pending/0"}, statuses(h.of("inv")))
		assert.Equal(t, []string{contract.ReasonOpenFollowup + ":background shell"}, strsAttr(h.of("inv")[0], contract.AttrIncompleteReasons))
		h.advance(time.Minute)
		h.consume(batch(s[4], s[5]))
		require.Equal(t, []string{"pending/0", "final/1"}, statuses(h.of("inv")))
	})
	t.Run("job ends within the delay", func(t *testing.T) {
		h := newHarness(t, 1, nil)
		s := scenario("inv", 0)
		h.consume(callerTurn(s))
		h.advance(2 * time.Second)
		require.Empty(t, h.of("inv"), "the running job is a missing child: the delay applies")
		h.consume(batch(s[3])) // the job ended at +2s: its continuation is owed
		require.Equal(t, []string{"pending/0"}, statuses(h.of("inv")), "at once, before the delay's end")
		h.advance(10 * time.Second)
		require.Len(t, h.of("inv"), 1, "one pending only")
		h.consume(batch(s[4], s[5]))
		require.Equal(t, []string{"pending/0", "final/1"}, statuses(h.of("inv")))
	})
	t.Run("ended job before the root", func(t *testing.T) {
		// Job work known before the root arrived: the pending waits for
		// the root (no result was seen before) and goes with it.
		h := newHarness(t, 1, nil)
		s := scenario("inv", 0)
		h.consume(batch(s[1], s[2], s[3]))
		require.Empty(t, h.of("inv"))
		h.advance(time.Second)
		h.consume(batch(s[0]))
		require.Equal(t, []string{"pending/0"}, statuses(h.of("inv")))
	})
	t.Run("wake of a running turn", func(t *testing.T) {
		h := newHarness(t, 1, nil)
		s := scenario("inv", 0)
		wake := sp{inv: "inv", name: "wake_agent coder", trace: 2, id: 12, parent: 10, start: 21, end: 21, role: contract.RoleWake,
			extra: map[string]any{contract.AttrConversationID: "conv-1"}}
		h.consume(callerTurn(s))
		require.Empty(t, h.of("inv"))
		h.consume(batch(wake)) // the job's span still in flight, its turn running
		require.Equal(t, []string{"pending/0"}, statuses(h.of("inv")))
		assert.Contains(t, strsAttr(h.of("inv")[0], contract.AttrIncompleteReasons), "missing_children:execute_tool shell")
		s[4].children = int64(2) // the continuation counts its wake
		h.consume(batch(s[3], s[4], s[5]))
		require.Equal(t, []string{"pending/0", "final/1"}, statuses(h.of("inv")))
	})
	t.Run("closed in the same batch", func(t *testing.T) {
		// Job work that the same batch also delivers is not owed after
		// it: final, no pending.
		h := newHarness(t, 1, nil)
		s := scenario("inv", 0)
		h.consume(batch(s...))
		require.Equal(t, []string{"final/1"}, statuses(h.of("inv")))
	})
	t.Run("never after the final", func(t *testing.T) {
		// A job arriving after the final re-opens a followup (a
		// revision is owed): still no pending, which never follows a
		// final.
		h := newHarness(t, 1, nil)
		s := scenario("inv", 0)
		h.consume(batch(s...))
		late := sp{inv: "inv", name: "background late", trace: 1, id: 7, parent: 1, start: 40, end: 50, role: contract.RoleBackground,
			children: int64(0), followups: int64(1)}
		h.consume(batch(late))
		h.advance(time.Minute)
		for _, st := range statuses(h.of("inv")) {
			assert.NotEqual(t, "pending/0", st)
		}
		require.Equal(t, "final/1", statuses(h.of("inv"))[0])
		require.Greater(t, len(h.of("inv")), 1, "the late job made a revision")
	})
	t.Run("emit_pending false", func(t *testing.T) {
		h := newHarness(t, 1, func(c *Config) { c.EmitPending = false })
		s := scenario("inv", 0)
		h.consume(batch(s[0], s[1], s[2], s[3]))
		h.advance(time.Minute)
		require.Empty(t, h.of("inv"))
	})
}

// The timer that emits the pending is the invocation's only one: it is
// due at the delay's end although open_timeout is hours away.
func TestPendingDelayJoinsNextDue(t *testing.T) {
	h := newHarness(t, 1, withPendingDelay(250*time.Millisecond))
	s := scenario("inv", 0)
	h.consume(callerTurn(s))
	sh := h.p.shards[0]
	sh.mu.Lock()
	require.Len(t, sh.timers, 1)
	due := sh.timers[0].index.due
	sh.mu.Unlock()
	assert.Equal(t, h.clock.Now().Add(250*time.Millisecond).UnixNano(), due)
	// The tick interval follows the delay, so the pending is at most a
	// quarter of it late with the real timer goroutine.
	assert.Equal(t, 62500*time.Microsecond, h.p.tickIv, "a quarter of the delay")
	assert.Equal(t, 500*time.Millisecond, newHarness(t, 1, nil).p.tickIv, "a quarter of remote_settle (the default delay is longer)")
	assert.Equal(t, minTickInterval, newHarness(t, 1, withPendingDelay(time.Millisecond)).p.tickIv, "clamped")
}

// remoteInvocation is a root with one remote tool: its obligations are met
// at once, and it is final after remote_settle (2s by default) of quiet.
func remoteInvocation(inv string) []sp {
	return []sp{
		{inv: inv, name: "invoke_agent coder", trace: 1, id: 1, start: 0, end: 10, role: contract.RoleRoot, children: int64(1)},
		{inv: inv, name: "execute_tool remote", trace: 1, id: 2, parent: 1, start: 1, end: 2, children: int64(0), remote: true, op: contract.OpExecuteTool},
		// An uncounted child of the remote tool, arriving late.
		{inv: inv, name: "chat", trace: 1, id: 3, parent: 2, start: 1, end: 2, op: contract.OpChat, usage: tokens(7, 3)},
	}
}

// A remote subtree settles: with a delay shorter than remote_settle the
// pending goes out while it settles (counted from the root, although a
// later arrival restarted the settle time); with a longer one the
// invocation is final first and never pending.
func TestPendingDelayWithRemoteSettle(t *testing.T) {
	t.Run("delay below settle", func(t *testing.T) {
		h := newHarness(t, 2, withPendingDelay(time.Second))
		s := remoteInvocation("inv")
		h.consume(batch(s[0], s[1]))
		h.advance(900 * time.Millisecond)
		h.consume(batch(s[2])) // settle restarts: final at +2900ms
		h.advance(99 * time.Millisecond)
		require.Empty(t, h.of("inv"))
		h.advance(time.Millisecond) // +1000ms after the root
		require.Equal(t, []string{"pending/0"}, statuses(h.of("inv")))
		assert.Equal(t, []string{contract.ReasonRemoteSettling + ":execute_tool remote"}, strsAttr(h.of("inv")[0], contract.AttrIncompleteReasons))
		h.advance(1899 * time.Millisecond)
		require.Len(t, h.of("inv"), 1, "not final before remote_settle")
		h.advance(time.Millisecond)
		sums := h.of("inv")
		require.Equal(t, []string{"pending/0", "final/1"}, statuses(sums))
		assert.Equal(t, int64(7), intAttr(sums[1], contract.AttrUsageInputTokens))
	})
	t.Run("delay above settle", func(t *testing.T) {
		h := newHarness(t, 2, withPendingDelay(3*time.Second))
		s := remoteInvocation("inv")
		h.consume(batch(s[0], s[1]))
		h.advance(900 * time.Millisecond)
		h.consume(batch(s[2]))
		h.advance(2 * time.Second) // settled at +2900ms
		require.Equal(t, []string{"final/1"}, statuses(h.of("inv")))
		h.advance(time.Minute)
		require.Equal(t, []string{"final/1"}, statuses(h.of("inv")))
	})
}

// An invocation that reaches open_timeout before its pending would be due
// (the root arrived late) gets its incomplete, and no pending after it.
func TestPendingDelayNeverAfterClose(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) {
		c.OpenTimeout = 10 * time.Second
		c.PendingDelay = 5 * time.Second
	})
	s := scenario("inv", 0)
	h.consume(batch(s[1], s[2]))
	h.advance(8 * time.Second)
	h.consume(batch(s[0])) // pending due at 13s, open_timeout at 10s
	h.advance(2 * time.Second)
	h.advance(10 * time.Second)
	sums := h.of("inv")
	require.Equal(t, []string{"incomplete/1"}, statuses(sums))
	assert.Contains(t, strsAttr(sums[0], contract.AttrIncompleteReasons), contract.ReasonOpenTimeout)
}

// The status extension reports state, not summaries: an open invocation is
// shown pending from its root's arrival, whether or not a pending summary
// went out yet.
func TestPendingDelayStatusUnaffected(t *testing.T) {
	h, views := statusHarness(t, 1, withPendingDelay(time.Second))
	s := scenario("inv", 0)
	h.consume(callerTurn(s))
	require.Empty(t, h.of("inv"))
	v := views.latest(t, "inv")
	assert.Equal(t, statusapi.StatusPending, v.Status)
	require.NotNil(t, v.Waiting)
	assert.Len(t, v.Waiting.MissingChildren, 1)
}

// The summaries counter counts what was delivered, by status: a pending
// the timer sent is counted once, and one never made is not counted.
func TestPendingDelayTelemetry(t *testing.T) {
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
	cfg := createDefaultConfig().(*Config)
	cfg.PendingDelay = time.Second
	clk := newFakeClock()
	p, err := newProcessor(metadatatest.NewSettings(tt), cfg, consumertest.NewNop(), clk, 1)
	require.NoError(t, err)
	ctx := context.Background()
	a, b := scenario("inv-a", 0), scenario("inv-b", 100)
	require.NoError(t, p.ConsumeTraces(ctx, batch(a[0], a[1], a[2], b[0], b[1], b[2])))
	clk.Advance(500 * time.Millisecond)
	require.NoError(t, p.ConsumeTraces(ctx, batch(a[3], a[4], a[5]))) // inv-a final within the delay
	require.NoError(t, p.tick(ctx, clk.Advance(500*time.Millisecond)))
	require.NoError(t, p.tick(ctx, clk.Advance(time.Second))) // inv-b's pending, once
	require.NoError(t, p.ConsumeTraces(ctx, batch(b[3], b[4], b[5])))
	require.NoError(t, p.Shutdown(ctx))
	metadatatest.AssertEqualProcessorInvocationSummaries(t, tt, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: attribute.NewSet(attribute.String("status", contract.StatusPending))},
		{Value: 2, Attributes: attribute.NewSet(attribute.String("status", contract.StatusFinal))},
	}, metricdatatest.IgnoreTimestamp())
}

// A restart in the middle of the delay, with storage: the root's arrival
// time is replayed from the journal, so the pending goes out at the
// delay's end after the restart (gracefully stopped or crashed), or at
// once when the delay ended while the collector was down; never twice.
func TestPendingDelayRestart(t *testing.T) {
	for _, tc := range []struct {
		name     string
		graceful bool
		compact  bool          // the journal is folded into a snapshot before the stop
		down     time.Duration // between the stop and the restart
		wait     time.Duration // after the restart, before the pending is due
	}{
		{"graceful, delay not over", true, false, 100 * time.Millisecond, 499 * time.Millisecond},
		{"crash, delay not over", false, false, 100 * time.Millisecond, 499 * time.Millisecond},
		{"graceful, delay over while down", true, false, time.Minute, 0},
		{"crash, delay over while down", false, false, time.Minute, 0},
		{"compacted, crash, delay not over", false, true, 100 * time.Millisecond, 499 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := newMemStorage()
			clk := newFakeClock()
			sink := new(consumertest.TracesSink)
			s := scenario("inv", 0)
			h := newStoredHarness(t, mem, clk, sink, withPendingDelay(time.Second))
			if tc.compact {
				h.p.store.compactMin = 1
			}
			h.consume(callerTurn(s)) // root at 0: pending due at 1s
			h.advance(400 * time.Millisecond)
			require.Empty(t, h.of("inv"))
			if tc.compact {
				for _, sh := range h.p.shards {
					require.Zero(t, sh.partition().logBytes, "compacted")
				}
			}
			if tc.graceful {
				h.shutdown()
			}
			clk.Advance(tc.down)
			h = newStoredHarness(t, mem, clk, sink, withPendingDelay(time.Second))
			if tc.wait > 0 {
				h.advance(tc.wait)
				require.Empty(t, h.of("inv"), "a millisecond before the delay's end")
				h.advance(time.Millisecond)
			} else {
				h.advance(0)
			}
			require.Equal(t, []string{"pending/0"}, statuses(h.of("inv")))

			// Restarted again, after the pending went out: not again.
			h.shutdown()
			clk.Advance(time.Minute)
			h = newStoredHarness(t, mem, clk, sink, withPendingDelay(time.Second))
			h.advance(time.Second)
			require.Equal(t, []string{"pending/0"}, statuses(h.of("inv")))
			h.consume(batch(s[3], s[4], s[5]))
			sums := h.of("inv")
			require.Equal(t, []string{"pending/0", "final/1"}, statuses(sums))
			assert.Equal(t, int64(150), intAttr(sums[1], contract.AttrUsageInputTokens))
			h.shutdown()
		})
	}
}

// A pending the timer made but that was never written (the tick's write
// failed, then the collector crashed) is made again after the restart,
// once; one that was written but not delivered is sent from the restored
// outbox, not made again.
func TestPendingDelayRestartAfterUnwrittenPending(t *testing.T) {
	mem := newMemStorage()
	clk := newFakeClock()
	sink := new(consumertest.TracesSink)
	s := scenario("inv", 0)
	h := newStoredHarness(t, mem, clk, sink, withPendingDelay(time.Second))
	h.consume(callerTurn(s))
	mem.setFailWrites(true)
	require.Error(t, h.p.tick(context.Background(), clk.Advance(time.Second)))
	mem.setFailWrites(false)
	require.Empty(t, h.of("inv"), "held back until written")
	// crash
	h = newStoredHarness(t, mem, clk, sink, withPendingDelay(time.Second))
	h.advance(0)
	require.Equal(t, []string{"pending/0"}, statuses(h.of("inv")))

	// Written, the next consumer refuses it, crash: the restored outbox
	// sends it; the replayed state knows it was made.
	s2 := scenario("inv-2", 100)
	flaky := &flakySink{}
	h = newStoredHarness(t, mem, clk, &flaky.TracesSink, withPendingDelay(time.Second))
	h.p.next = flaky
	h.consume(callerTurn(s2))
	flaky.mu.Lock()
	flaky.refuseSummaries = 1
	flaky.mu.Unlock()
	_ = h.p.tick(context.Background(), clk.Advance(time.Second))
	require.Empty(t, h2of(&flaky.TracesSink, "inv-2"))
	// crash
	h = newStoredHarness(t, mem, clk, &flaky.TracesSink, withPendingDelay(time.Second))
	h.advance(0)
	h.advance(time.Second)
	require.Equal(t, []string{"pending/0"}, statuses(h2of(&flaky.TracesSink, "inv-2")))
	h.consume(batch(s2[3], s2[4], s2[5]))
	require.Equal(t, []string{"pending/0", "final/1"}, statuses(h2of(&flaky.TracesSink, "inv-2")))
}

// With storage, a pending made at once for job work is journalled with the
// batch that brought the job: a restart (crash or graceful) neither makes
// it again nor loses it, and an invocation whose job was known when the
// tick's write failed gets it at the restart's first tick, once.
func TestPendingJobWorkRestart(t *testing.T) {
	for _, graceful := range []bool{false, true} {
		t.Run(map[bool]string{false: "crash", true: "graceful"}[graceful], func(t *testing.T) {
			mem := newMemStorage()
			clk := newFakeClock()
			sink := new(consumertest.TracesSink)
			s := scenario("inv", 0)
			h := newStoredHarness(t, mem, clk, sink, nil)
			h.consume(callerTurn(s))
			h.advance(time.Second)
			if graceful {
				h.shutdown()
			}
			h = newStoredHarness(t, mem, clk, sink, nil)
			h.advance(time.Second)
			require.Empty(t, h.of("inv"), "2s after the root, the job running: no pending")
			h.consume(batch(s[3]))
			require.Equal(t, []string{"pending/0"}, statuses(h.of("inv")), "the job ended: at once")
			if graceful {
				h.shutdown()
			}
			clk.Advance(time.Minute)
			h = newStoredHarness(t, mem, clk, sink, nil)
			h.advance(time.Second)
			// After a crash its delivery may not have been recorded: it is
			// re-sent, the same span; never made again.
			ids := map[pcommon.SpanID]bool{}
			for _, sum := range h.of("inv") {
				require.Equal(t, "pending/0", statuses([]ptrace.Span{sum})[0])
				ids[sum.SpanID()] = true
			}
			require.Len(t, ids, 1, "one pending")
			before := len(h.of("inv"))
			h.consume(batch(s[4], s[5]))
			sums := h.of("inv")
			require.Len(t, sums, before+1)
			assertStatus(t, sums[before], contract.StatusFinal, 1)
			h.shutdown()
		})
	}
	t.Run("write failed", func(t *testing.T) {
		mem := newMemStorage()
		clk := newFakeClock()
		sink := new(consumertest.TracesSink)
		s := scenario("inv", 0)
		h := newStoredHarness(t, mem, clk, sink, nil)
		h.consume(callerTurn(s))
		mem.setFailWrites(true)
		require.Error(t, h.p.ConsumeTraces(context.Background(), batch(s[3])))
		mem.setFailWrites(false)
		require.Empty(t, h.of("inv"), "held back until written")
		// crash; the sender retries the job span after the restart
		h = newStoredHarness(t, mem, clk, sink, nil)
		h.consume(batch(s[3]))
		require.Equal(t, []string{"pending/0"}, statuses(h.of("inv")))
		h.advance(10 * time.Second)
		require.Len(t, h.of("inv"), 1)
	})
}

// owesJobReason reports whether an incomplete reason is job work owed
// after the caller's result, which makes a pending go out at once.
func owesJobReason(r string) bool {
	return strings.HasPrefix(r, contract.ReasonOpenFollowup+":") || strings.HasPrefix(r, contract.ReasonRunningTurn+":")
}
