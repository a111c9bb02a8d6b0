package instrument

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/agentledger/contract"
)

func owedReasonsOf(st SessionState) []string {
	var out []string
	for _, o := range st.Owed {
		out = append(out, o.Reason)
	}
	return out
}

// TestSessionOwesThroughEvictionAndRetention: with WithMaxOpenInvocations
// (2) an invocation whose job still runs is evicted, its retention and
// open timeout pass, and the session owes work all along: while the job
// runs, and after it ends while its followup is expected; the job's end
// keeps its session (issue 33, observation 5).
func TestSessionOwesThroughEvictionAndRetention(t *testing.T) {
	p := newPipelineWith(t, []SpanProcessorOption{WithMaxOpenInvocations(2), WithRetention(time.Minute), WithOpenTimeout(10 * time.Minute)})
	l := p.sp.Ledger()
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	_, job := p.tracker.StartBackground(ctx, "shell")
	inv.End()
	// Two more open invocations of other sessions evict it.
	for _, s := range []string{"s2", "s3"} {
		_, other := p.tracker.StartInvocation(context.Background(), "coder", s)
		defer other.End()
	}
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s, _ := l.Wait(wctx, inv.ID()); s.Status != StatusIncomplete || !slices.Contains(s.Reasons, contract.ReasonEvicted) {
		t.Fatalf("not evicted: %+v", s)
	}
	if st := l.Session("s1"); !st.OwesWork || len(st.OpenJobs) != 1 {
		t.Fatalf("after the eviction, while the job runs: %+v", st)
	}
	// Retention and the open timeout pass many times over.
	for range 30 {
		p.clock.Advance(time.Minute)
		if st := l.Session("s1"); !st.OwesWork {
			t.Fatalf("at %s the session owes nothing while its job runs: %+v", p.clock.Now(), st)
		}
	}
	job.EndWithFollowup(nil)
	st := l.Session("s1")
	if !st.OwesWork || len(st.ExpectedFollowups) != 1 || !slices.Contains(owedReasonsOf(st), contract.ReasonOpenFollowup+":background shell") {
		t.Fatalf("after the job ended, its followup expected: %+v", st)
	}
	for range 30 {
		p.clock.Advance(time.Minute)
		if st := l.Session("s1"); !st.OwesWork {
			t.Fatalf("at %s the session owes nothing while the followup is expected: %+v", p.clock.Now(), st)
		}
	}
	cctx, cont, err := p.tracker.StartContinuation(context.Background(), "coder", "s1", job.Carrier())
	if err != nil {
		t.Fatal(err)
	}
	_ = cctx
	cont.End()
	if st := l.Session("s1"); st.OwesWork {
		t.Errorf("after the continuation: %+v", st)
	}
}

// TestSessionOwingForgottenIsNamed: when the bound of kept invocations
// forgets one that holds work, its session keeps owing with
// owing_forgotten:<id>, and the job's end recreates the invocation in its
// session.
func TestSessionOwingForgottenIsNamed(t *testing.T) {
	p := newPipelineWith(t, []SpanProcessorOption{WithMaxOpenInvocations(1), WithRetention(time.Minute)})
	l := p.sp.Ledger()
	var jobs []*Job
	var ids []string
	for _, s := range []string{"a", "b", "c"} {
		ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", s)
		_, job := p.tracker.StartBackground(ctx, "shell")
		inv.End()
		jobs, ids = append(jobs, job), append(ids, inv.ID())
	}
	p.clock.Advance(2 * time.Minute)
	forgotten := 0
	for i, s := range []string{"a", "b", "c"} {
		st := l.Session(s)
		if !st.OwesWork {
			t.Errorf("session %s owes nothing while its job runs: %+v", s, st)
		}
		if slices.ContainsFunc(st.Owed, func(o Owed) bool { return strings.HasPrefix(o.Reason, "owing_forgotten:"+ids[i]) }) {
			forgotten++
		}
	}
	if forgotten == 0 {
		t.Fatal("no invocation forgotten beyond the bound of 1 kept")
	}
	for i, j := range jobs {
		j.EndWithFollowup(nil)
		st := l.Session([]string{"a", "b", "c"}[i])
		if !st.OwesWork || len(st.ExpectedFollowups) != 1 || st.ExpectedFollowups[0].InvocationID != ids[i] {
			t.Errorf("after job %d ended: %+v", i, st)
		}
	}
}

// TestSessionWakeOwesTheTurn: in process, a continuation owes its turn
// from its start, and Owed names the running turn its wake announced.
func TestSessionWakeOwesTheTurn(t *testing.T) {
	p := newPipeline(t)
	l := p.sp.Ledger()
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	_, job := p.tracker.StartBackground(ctx, "shell")
	inv.End()
	job.EndWithFollowup(nil)
	_, cont, err := p.tracker.StartContinuation(context.Background(), "coder", "s1", job.Carrier())
	if err != nil {
		t.Fatal(err)
	}
	st := l.Session("s1")
	if !st.OwesWork || st.RunningContinuations != 1 || !slices.Contains(owedReasonsOf(st), contract.ReasonRunningTurn+":wake_agent coder") {
		t.Errorf("while the continuation runs: %+v", st)
	}
	cont.End()
	if st := l.Session("s1"); st.OwesWork || len(st.Owed) != 0 {
		t.Errorf("after it: %+v", st)
	}
}
