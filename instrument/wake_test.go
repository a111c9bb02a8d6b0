package instrument

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/contract"
)

// TestWakeSpans: a continuation and an unattributed turn each export a
// wake span when they start, before they end: a zero-length child of the
// turn's span with role wake, the turn's invocation and session, linked
// to the jobs it continues without a followup link kind; ConsumeFollowup
// in a turn that woke already exports no second one.
func TestWakeSpans(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	_, job := p.tracker.StartBackground(ctx, "shell")
	inv.End()
	job.EndWithFollowup(nil)

	cctx, cont, err := p.tracker.StartContinuation(context.Background(), "coder", "s1", job.Carrier())
	if err != nil {
		t.Fatal(err)
	}
	if err := p.tracker.ConsumeFollowup(cctx, job.Carrier()); err != nil {
		t.Fatal(err)
	}
	// Exported while the continuation runs.
	w := p.span(t, contract.SpanNameWakePrefix+" coder")
	if strAttr(w, contract.AttrRole) != contract.RoleWake || strAttr(w, contract.AttrInvocationID) != inv.ID() ||
		strAttr(w, contract.AttrConversationID) != "s1" || w.Parent.SpanID() != cont.Span().SpanContext().SpanID() ||
		!w.StartTime.Equal(w.EndTime) {
		t.Errorf("continuation's wake span = %+v", w)
	}
	if len(w.Links) != 1 || w.Links[0].SpanContext.SpanID() != job.Span().SpanContext().SpanID() ||
		strAttr2(w.Links[0].Attributes, contract.AttrLink) != "" {
		t.Errorf("wake links = %+v, want one plain link to the job", w.Links)
	}
	cont.End()
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusFinal)
	wakes := 0
	for _, s := range p.exp.GetSpans() {
		if strAttr(s, contract.AttrRole) == contract.RoleWake {
			wakes++
		}
	}
	if wakes != 1 {
		t.Errorf("%d wake spans, want 1", wakes)
	}

	_, un := p.tracker.StartUnattributed(context.Background(), "coder", "s2", "unknown_task")
	var uw tracetest.SpanStub
	for _, s := range p.exp.GetSpans() {
		if strAttr(s, contract.AttrRole) == contract.RoleWake && s.Parent.SpanID() == un.Span().SpanContext().SpanID() {
			uw = s
		}
	}
	if uw.Parent.SpanID() != un.Span().SpanContext().SpanID() || strAttr(uw, contract.AttrInvocationID) != un.ID() ||
		strAttr(uw, contract.AttrConversationID) != "s2" {
		t.Errorf("unattributed turn's wake span = %+v", uw)
	}
	un.End()
}
