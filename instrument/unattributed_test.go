package instrument

import (
	"context"
	"testing"

	"github.com/agentledger/agentledger/contract"
)

// TestUnattributedTurn pins contract rule 7: a turn nobody can own is an
// invocation of its own whose usage is summed, that closes incomplete with
// unattributed_wakeup:<reason> and never final, and whose session owes work
// while it runs.
func TestUnattributedTurn(t *testing.T) {
	p := newPipeline(t)
	l := p.sp.Ledger()
	ctx, inv := p.tracker.StartUnattributed(context.Background(), "coder", "s1", "unknown_task")
	if inv.ID() == "" || InvocationIDFromContext(ctx) != inv.ID() {
		t.Fatalf("invocation id %q, context %q", inv.ID(), InvocationIDFromContext(ctx))
	}
	if st := l.Session("s1"); !st.OwesWork || st.UnattributedTurns != 1 {
		t.Errorf("session while the unattributed turn runs = %+v, want owing work", st)
	}
	p.chat(ctx, 10, 2)
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusPending)
	inv.End()

	s, err := l.Wait(context.Background(), inv.ID())
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, s, contract.StatusIncomplete, contract.ReasonUnattributedWakeup+":unknown_task")
	if s.Usage.InputTokens != 10 || s.Usage.OutputTokens != 2 || s.Usage.ModelCalls != 1 || s.SessionID != "s1" || s.Agent != "coder" {
		t.Errorf("summary = %+v", s)
	}
	if st := l.Session("s1"); st.OwesWork {
		t.Errorf("session owes work after the turn ended: %+v", st)
	}
	root := p.span(t, "invoke_agent coder")
	if strAttr(root, contract.AttrUnattributed) != "unknown_task" || strAttr(root, contract.AttrRole) != contract.RoleRoot ||
		strAttr(root, contract.AttrInvocationID) != inv.ID() || root.Parent.IsValid() {
		t.Errorf("root span = %+v", root)
	}
}

// TestUnattributedTurnEmptyReason: an empty reason still marks the turn.
func TestUnattributedTurnEmptyReason(t *testing.T) {
	p := newPipeline(t)
	_, inv := p.tracker.StartUnattributed(context.Background(), "coder", "s1", "")
	inv.End()
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusIncomplete, contract.ReasonUnattributedWakeup+":unknown")
}

// TestUnattributedTurnIsNotAChildOfTheCallersTurn: a turn nobody owns that
// starts inside another invocation's context is not that invocation's
// member, and does not hold its count.
func TestUnattributedTurnIsNotAChildOfTheCallersTurn(t *testing.T) {
	p := newPipeline(t)
	ctx, outer := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	_, turn := p.tracker.StartUnattributed(ctx, "coder", "s1", "detached")
	outer.End()
	wantStatus(t, p.summary(t, outer.ID()), contract.StatusFinal)
	if turn.ID() == outer.ID() {
		t.Fatal("unattributed turn reuses the caller's invocation id")
	}
	turn.End()
	wantStatus(t, p.summary(t, turn.ID()), contract.StatusIncomplete, contract.ReasonUnattributedWakeup+":detached")
}
