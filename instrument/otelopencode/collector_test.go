package otelopencode

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/internal/testbin"
)

// collectorOpenTimeout, collectorRemoteSettle and collectorPendingDelay
// are the open_timeout, remote_settle and pending_delay of the collector
// these tests start: short, so that an invocation that can never be final
// closes (incomplete) within the test (remote_settle and pending_delay
// must stay below open_timeout).
const (
	collectorOpenTimeout  = "3s"
	collectorRemoteSettle = "500ms"
	collectorPendingDelay = "1s"
)

// collectorPipeline is a pipeline whose spans also go, batched, to a real
// collector (the distribution binary with collector-config/local.yaml,
// open_timeout collectorOpenTimeout); flush exports them, summaries reads
// the summaries the collector wrote.
type collectorPipeline struct {
	*pipeline
	addrs testbin.CollectorAddrs
}

func startCollectorPipeline(t *testing.T, ctx context.Context) *collectorPipeline {
	t.Helper()
	addrs := testbin.StartLocalCollector(t, "AGENTLEDGER_OPEN_TIMEOUT="+collectorOpenTimeout,
		"AGENTLEDGER_REMOTE_SETTLE="+collectorRemoteSettle, "AGENTLEDGER_PENDING_DELAY="+collectorPendingDelay,
		"AGENTLEDGER_DEBUG_VERBOSITY=basic").Addrs
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(addrs.OTLPGRPC), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	sp := instrument.NewSpanProcessor(sdktrace.NewBatchSpanProcessor(exp))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &collectorPipeline{
		pipeline: &pipeline{tp: tp, rec: rec, sp: sp, tracker: instrument.NewTracker(instrument.WithTracerProvider(tp))},
		addrs:    addrs,
	}
}

// summaries exports every span ended so far and waits until the collector
// has written a closing summary (final or incomplete) for each of ids; it
// returns every summary written so far, by invocation, in order.
func (c *collectorPipeline) summaries(t *testing.T, ctx context.Context, ids ...string) map[string][]testbin.Summary {
	t.Helper()
	if err := c.tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	var byID map[string][]testbin.Summary
	err := testbin.Poll(ctx, 100*time.Millisecond, func() (bool, string, error) {
		sums, err := testbin.ReadSummaries(c.addrs.TracesFile)
		if err != nil {
			return false, err.Error(), nil
		}
		closed := testbin.Closed(sums)
		for _, id := range ids {
			if _, ok := closed[id]; !ok {
				return false, "no closing summary for " + id, nil
			}
		}
		byID = map[string][]testbin.Summary{}
		for _, s := range sums {
			byID[s.InvocationID] = append(byID[s.InvocationID], s)
		}
		return true, "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return byID
}

// The collector's half of TestJobBoundDropsOldestFailClosed: a job the
// Client dropped beyond WithMaxJobs leaves its followup open on the wire
// too, so the real collector never summarizes its invocation final (it
// closes incomplete with open_followup at its open_timeout), while a job
// that settles in the same run is final there with the ledger's totals.
func TestCollectorDroppedJobNeverFinal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cp := startCollectorPipeline(t, ctx)
	c, err := New("http://127.0.0.1:1", &http.Client{}, WithTracerProvider(cp.tp), WithLedger(cp.sp.Ledger()), WithMaxJobs(1))
	if err != nil {
		t.Fatal(err)
	}
	s := &script{t: t, m: c.m, ms: 1_000_000}
	dropped := launchIn(s, cp.pipeline, "ses_A", "ses_C1")
	settled := launchIn(s, cp.pipeline, "ses_B", "ses_C2") // drops ses_C1's job
	if n := c.Stats().EvictedJobs; n != 1 {
		t.Fatalf("EvictedJobs = %d, want 1", n)
	}
	// The tracked job settles with a continuation.
	s.user("ses_C2", "msg_03")
	s.call("ses_C2", "msg_04", "msg_03", 30, 3, 0)
	s.idle("ses_C2")
	s.notification("ses_B", "msg_05", "ses_C2")
	s.call("ses_B", "msg_06", "msg_05", 20, 2, 0)
	s.idle("ses_B")
	// The dropped one goes on, and its notification wakes a turn.
	s.user("ses_C1", "msg_03")
	s.call("ses_C1", "msg_04", "msg_03", 30, 3, 0)
	s.idle("ses_C1")
	s.notification("ses_A", "msg_05", "ses_C1")
	s.call("ses_A", "msg_06", "msg_05", 20, 2, 0)
	s.idle("ses_A")

	local, err := c.Wait(ctx, settled.ID())
	if err != nil || local.Status != contract.StatusFinal {
		t.Fatalf("ledger, settled job's invocation: %v %+v", err, local)
	}
	if sum, _ := cp.sp.Ledger().Summary(dropped.ID()); sum.Status != contract.StatusPending {
		t.Errorf("ledger, dropped job's invocation: %+v, want pending", sum)
	}
	sums := cp.summaries(t, ctx, dropped.ID(), settled.ID())
	want := contract.ReasonOpenFollowup + ":background subagent"
	for _, r := range sums[dropped.ID()] {
		if r.Status == contract.StatusFinal {
			t.Errorf("collector summarized the dropped job's invocation final (revision %d): %+v", r.Revision, r)
		}
	}
	if r := testbin.Closed(sums[dropped.ID()])[dropped.ID()]; r.Status != contract.StatusIncomplete ||
		!slices.Contains(r.IncompleteReasons, want) {
		t.Errorf("collector, dropped job's invocation: %s %v, want incomplete with %s", r.Status, r.IncompleteReasons, want)
	}
	r := testbin.Closed(sums[settled.ID()])[settled.ID()]
	u := local.Usage
	got := fmt.Sprint(r.Status, r.InputTokens, r.OutputTokens, r.ModelCalls, r.BackgroundJobs, r.Continuations)
	if exp := fmt.Sprint(contract.StatusFinal, u.InputTokens, u.OutputTokens, u.ModelCalls, u.BackgroundJobs, u.Continuations); got != exp {
		t.Errorf("collector, settled job's invocation: %s, want the ledger's %s", got, exp)
	}
}
