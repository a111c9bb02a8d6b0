package ledgerrule

// OwesJobWork reports whether the invocation owes work that a background
// job makes it owe after its caller had the result: followups of an ended
// job (open_followup) or a turn a wake span announced (running_turn).
// Those are exactly the items of Owes of these two kinds; the other kinds
// (declared children, detached spans, remote subtrees) are also what spans
// that merely arrive out of order look like until they arrive. It builds
// no list: the processor asks it of open invocations on every batch that
// touches them, to emit their pending summary at once (CONTRACT.md, the
// summary span, "Pending").
func (g *Graph) OwesJobWork() bool {
	if len(g.pendingWakes()) > 0 {
		return true
	}
	if g.BackgroundJobs == 0 {
		return false // only a background span declares followups
	}
	t := g.follow
	if t == nil {
		return false
	}
	for _, f := range t.entries {
		if f.declared > f.arrived {
			if i := g.spanAt(f.id); i >= 0 && g.Spans[i].Arrived {
				return true
			}
		}
	}
	return false
}
