package instrument

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// Tests of contract rule 6 and issue 9 item 7 through a real SDK
// pipeline: a job launched from a span that has ended is declared, and the
// ledger is never final while a span of the invocation it saw start is
// still open.

func spanByID(t *testing.T, p *pipeline, sid trace.SpanID) tracetest.SpanStub {
	t.Helper()
	for _, s := range p.exp.GetSpans() {
		if s.SpanContext.SpanID() == sid {
			return s
		}
	}
	t.Fatalf("span %s not exported", sid)
	return tracetest.SpanStub{}
}

func linkKinds(s tracetest.SpanStub) map[trace.SpanID]string {
	out := map[trace.SpanID]string{}
	for _, l := range s.Links {
		out[l.SpanContext.SpanID()] = strAttr2(l.Attributes, contract.AttrLink)
	}
	return out
}

// TestJobFromEndedToolIsParentedOnOpenRoot: the sequence (a tool
// span ends, then starts a background job) leaves the invocation pending
// while the job runs, and the job is declared by the open root with a
// launched_by link to the tool.
func TestJobFromEndedToolIsParentedOnOpenRoot(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	tctx, tool := p.tool(ctx)
	tool.End()
	_, job := p.tracker.StartBackground(tctx, "shell")
	inv.End()

	if s := p.summary(t, inv.ID()); s.Status != contract.StatusPending {
		t.Fatalf("%s while the job runs (reasons %v); session %+v", s.Status, s.Reasons, p.sp.Ledger().Session("s1"))
	}
	job.EndWithoutFollowup(nil)
	s := p.summary(t, inv.ID())
	wantStatus(t, s, contract.StatusFinal)
	if len(s.Anomalies) != 0 {
		t.Errorf("anomalies %v", s.Anomalies)
	}
	js := spanByID(t, p, job.Span().SpanContext().SpanID())
	if js.Parent.SpanID() != inv.Span().SpanContext().SpanID() {
		t.Errorf("job parent %s, want the root %s", js.Parent.SpanID(), inv.Span().SpanContext().SpanID())
	}
	if k := linkKinds(js)[tool.SpanContext().SpanID()]; k != contract.LinkLaunchedBy {
		t.Errorf("job links %v, want launched_by to the tool", js.Links)
	}
	if _, late := attrOf(js, contract.AttrLateChild); late {
		t.Error("a declared job is marked late_child")
	}
	if got := intAttr(t, p.span(t, "invoke_agent coder"), contract.AttrChildren); got != 2 {
		t.Errorf("root invocation.children = %d, want 2 (tool and job)", got)
	}
}

// TestJobParentedOnNearestOpenAncestor: with a subagent span still open
// between the root and the ended tool, the job is declared by the
// subagent span; with the subagent ended too, by the root.
func TestJobParentedOnNearestOpenAncestor(t *testing.T) {
	for _, subagentOpen := range []bool{true, false} {
		p := newPipeline(t)
		ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
		sctx, sub := p.tp.Tracer("agent").Start(ctx, "invoke_agent helper")
		tctx, tool := p.tool(sctx)
		tool.End()
		if !subagentOpen {
			sub.End()
		}
		_, job := p.tracker.StartBackground(tctx, "shell")
		want := inv.Span().SpanContext().SpanID()
		if subagentOpen {
			want = sub.SpanContext().SpanID()
			sub.End()
		}
		inv.End()
		wantStatus(t, p.summary(t, inv.ID()), contract.StatusPending)
		job.EndWithoutFollowup(nil)
		wantStatus(t, p.summary(t, inv.ID()), contract.StatusFinal)
		if got := spanByID(t, p, job.Span().SpanContext().SpanID()).Parent.SpanID(); got != want {
			t.Errorf("subagent open %v: job parent %s, want %s", subagentOpen, got, want)
		}
	}
}

// TestJobFromEndedContinuationTool: in a continuation's turn the job is
// declared by the continuation.
func TestJobFromEndedContinuationTool(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	_, first := p.tracker.StartBackground(ctx, "shell")
	inv.End()
	first.EndWithFollowup(nil)
	cctx, cont, err := p.tracker.StartContinuation(context.Background(), "coder", "s1", first.Carrier())
	if err != nil {
		t.Fatal(err)
	}
	tctx, tool := p.tool(cctx)
	tool.End()
	_, second := p.tracker.StartBackground(tctx, "shell")
	cont.End()
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusPending)
	// The tool, the job and the continuation's wake span.
	if got := spanByID(t, p, cont.Span().SpanContext().SpanID()); intAttr(t, got, contract.AttrChildren) != 3 {
		t.Errorf("continuation invocation.children = %d, want 3", intAttr(t, got, contract.AttrChildren))
	}
	second.EndWithoutFollowup(nil)
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusFinal)
	if got := spanByID(t, p, second.Span().SpanContext().SpanID()).Parent.SpanID(); got != cont.Span().SpanContext().SpanID() {
		t.Errorf("job parent %s, want the continuation", got)
	}
}

// TestOrphanJob: with no span of the invocation open, the job starts its
// own trace marked late_child with a launched_by link; the ledger waits
// for it and reports orphan_job.
func TestOrphanJob(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	tctx, tool := p.tool(ctx)
	tool.End()
	inv.End()
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusFinal)

	ctx2, inv2 := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	t2ctx, tool2 := p.tool(ctx2)
	tool2.End()
	inv2.End()
	_, job := p.tracker.StartBackground(t2ctx, "shell")
	_ = tctx
	s := p.summary(t, inv2.ID())
	if s.Status != contract.StatusFinal {
		t.Fatalf("status %s", s.Status)
	}
	job.EndWithoutFollowup(nil)
	js := spanByID(t, p, job.Span().SpanContext().SpanID())
	if js.Parent.IsValid() || js.SpanContext.TraceID() == inv2.Span().SpanContext().TraceID() {
		t.Errorf("orphan job parent %v trace %s, want a new trace", js.Parent, js.SpanContext.TraceID())
	}
	if v, ok := attrOf(js, contract.AttrLateChild); !ok || !v.AsBool() {
		t.Error("orphan job not marked late_child")
	}
	if k := linkKinds(js)[tool2.SpanContext().SpanID()]; k != contract.LinkLaunchedBy {
		t.Errorf("orphan job links %v", js.Links)
	}
	if strAttr(js, contract.AttrInvocationID) != inv2.ID() {
		t.Errorf("orphan job invocation %q", strAttr(js, contract.AttrInvocationID))
	}
}

// TestOrphanJobBlocksFinal: the orphan job of an invocation whose root is
// the last span to end: the ledger waits for the job.
func TestOrphanJobBlocksFinal(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	tctx, tool := p.tool(ctx)
	tool.End()
	inv.End()
	_, job := p.tracker.StartBackground(tctx, "shell") // the invocation closed already: a late span
	job.EndWithoutFollowup(nil)
	s := p.summary(t, inv.ID())
	if s.Status != contract.StatusFinal || s.Revision != 2 || !contains(s.Anomalies, "orphan_job:background shell") ||
		!contains(s.Anomalies, "late_span:background shell") {
		t.Errorf("summary %+v", s)
	}

	// Pending: the root waits for a child when the tool launches the job.
	p2 := newPipeline(t)
	ctx, inv2 := p2.tracker.StartInvocation(context.Background(), "coder", "s1")
	tctx, tool = p2.tool(ctx)
	_, slow := p2.tp.Tracer("x").Start(ctx, "slow")
	tool.End()
	inv2.End()
	_, job2 := p2.tracker.StartBackground(tctx, "shell")
	slow.End()
	s = p2.summary(t, inv2.ID())
	if s.Status != contract.StatusPending || !contains(s.Anomalies, "orphan_job:background shell") {
		t.Fatalf("while the orphan job runs: %+v", s)
	}
	if st := p2.sp.Ledger().Session("s1"); !st.OwesWork || len(st.OpenJobs) != 1 {
		t.Errorf("session %+v", st)
	}
	job2.EndWithoutFollowup(nil)
	wantStatus(t, p2.summary(t, inv2.ID()), contract.StatusFinal)
}

// TestNeverFinalWhileContinuationRuns: a continuation that nothing owes
// (its job promised no notification) still holds the invocation open.
func TestNeverFinalWhileContinuationRuns(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	_, job := p.tracker.StartBackground(ctx, "shell")
	job.EndWithoutFollowup(nil)
	cctx, cont, err := p.tracker.StartContinuation(context.Background(), "coder", "s1", job.Carrier())
	if err != nil {
		t.Fatal(err)
	}
	inv.End()
	if s := p.summary(t, inv.ID()); s.Status != contract.StatusPending {
		t.Fatalf("%s while a continuation runs", s.Status)
	}
	p.chat(cctx, 5, 1)
	cont.End()
	s := p.summary(t, inv.ID())
	wantStatus(t, s, contract.StatusFinal)
	if s.Usage.InputTokens != 5 {
		t.Errorf("usage %+v", s.Usage)
	}
}

// TestNeverFinalWhileLateChildRuns: a span started under an ended parent
// is counted by nobody; the ledger still waits for it.
func TestNeverFinalWhileLateChildRuns(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	tctx, tool := p.tool(ctx)
	tool.End()
	_, late := p.tp.Tracer("x").Start(tctx, "late work")
	inv.End()
	if s := p.summary(t, inv.ID()); s.Status != contract.StatusPending || !contains(s.Reasons, "open_span:late work") {
		t.Fatalf("%s %v while a late child runs", s.Status, s.Reasons)
	}
	late.End()
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusFinal)
}
