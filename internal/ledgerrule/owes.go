package ledgerrule

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/agentledger/agentledger/contract"
)

// Owed is one piece of work an invocation is still owed: a span it waits
// for that will come only if the work it stands for runs to its end. It
// is the one definition of "owes work" (CONTRACT.md v0.12, "Owed means
// everything owed"): both halves answer owes_work from Graph.Owes, and
// list each item with what it waits for.
type Owed struct {
	// Kind is the reason kind: contract.ReasonMissingChildren,
	// ReasonOpenFollowup, ReasonMissingDetached, ReasonRemoteSettling or
	// ReasonRunningTurn.
	Kind string
	// Span is the name of the span that waits: the parent, the job, the
	// span that declared detached spans, the remote span, the wake span.
	Span string
	// SpanID is that span's ID.
	SpanID SpanID
	// Missing is how many spans it still waits for (1 for a running
	// turn, 0 for a remote subtree, which declares no count).
	Missing int
	// Until is, for a remote subtree, when it settles if nothing else
	// arrives in it (the caller's clock, nanoseconds); 0 otherwise.
	Until int64
}

// Reason is the item as an incomplete reason: "kind:span name".
func (o Owed) Reason() string { return o.Kind + ":" + o.Span }

// Waits says what the item waits for, in words a host can show.
func (o Owed) Waits() string {
	switch o.Kind {
	case contract.ReasonMissingChildren:
		return fmt.Sprintf("%d child span(s) declared in invocation.children (a job still running, a turn still exporting)", o.Missing)
	case contract.ReasonOpenFollowup:
		return fmt.Sprintf("%d followup(s) of the ended job: a continuation or followup_closed span linking to it", o.Missing)
	case contract.ReasonMissingDetached:
		return fmt.Sprintf("%d span(s) started in new traces (invocation.detached) linking to it with detached_from", o.Missing)
	case contract.ReasonRemoteSettling:
		return "spans handed to another process: nothing may arrive in its subtree for remote_settle"
	case contract.ReasonRunningTurn:
		return "the turn the wake span announced: its parent span, exported when the turn ends"
	}
	return o.Kind
}

// Owes lists everything the invocation is owed at now, sorted by kind,
// span name and span ID: declared children not arrived, followups of
// ended jobs (also those a revision re-opened after the invocation
// closed), detached spans not arrived, remote subtrees not settled, and
// turns announced by a wake span that have not arrived. Each stays until
// its span arrives, a followup_closed span closes it (an interrupted job
// among them), or the half's timeout closes the invocation: only a
// timeout writes owed work off, and that is the half's decision, not the
// graph's. A missing root is not listed: until the caller's turn ended no
// result was seen, so the host cannot have released the session on it;
// a self-started turn whose root is missing owes running_turn from its
// wake. The list is empty exactly when nothing is owed.
func (g *Graph) Owes(now int64, cfg *GraphConfig) []Owed {
	var out []Owed
	for i := range g.Spans {
		st := &g.Spans[i]
		if !st.Arrived {
			continue
		}
		if n := st.MissingChildren(); n > 0 {
			out = append(out, Owed{Kind: contract.ReasonMissingChildren, Span: g.Name(st.Name), SpanID: st.ID, Missing: n})
		}
		if declared, arrived := g.Followups(st.ID); declared > arrived {
			n := int(declared - arrived)
			out = append(out, Owed{Kind: contract.ReasonOpenFollowup, Span: g.Name(st.Name), SpanID: st.ID, Missing: n})
		}
	}
	for _, d := range g.detachedList() {
		if d.Declared > d.Arrived {
			out = append(out, Owed{Kind: contract.ReasonMissingDetached, Span: g.Name(d.Name), SpanID: d.ID, Missing: int(d.Declared - d.Arrived)})
		}
	}
	if !g.Settled(now, cfg) {
		until := int64(0)
		if cfg != nil {
			until = g.SettleDue(cfg)
		}
		remote := func(name int32, id SpanID) {
			out = append(out, Owed{Kind: contract.ReasonRemoteSettling, Span: g.Name(name), SpanID: id, Until: until})
		}
		for i := range g.Spans {
			if st := &g.Spans[i]; st.Arrived && st.Remote {
				remote(st.Name, st.ID)
			}
		}
		for i := range g.closed {
			if c := &g.closed[i]; c.flags&closedRemote != 0 {
				remote(c.name, c.id)
			}
		}
	}
	for _, w := range g.pendingWakes() {
		out = append(out, Owed{Kind: contract.ReasonRunningTurn, Span: g.Name(w.Name), SpanID: w.Wake, Missing: 1})
	}
	slices.SortFunc(out, func(a, b Owed) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Span, b.Span), slices.Compare(a.SpanID[:], b.SpanID[:]))
	})
	return out
}

// OwesWork reports whether Owes would list anything, without building the
// list.
func (g *Graph) OwesWork(now int64, cfg *GraphConfig) bool {
	if len(g.pendingWakes()) > 0 || !g.Settled(now, cfg) {
		return true
	}
	for _, d := range g.detachedList() {
		if d.Declared > d.Arrived {
			return true
		}
	}
	for i := range g.Spans {
		if st := &g.Spans[i]; st.Arrived && g.owes(st) {
			return true
		}
	}
	return false
}
