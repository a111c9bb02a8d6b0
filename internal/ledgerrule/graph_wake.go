package ledgerrule

import "github.com/agentledger/agentledger/contract"

// A wake span (invocation.role = wake, CONTRACT.md v0.12) announces a turn
// the runtime started by itself: it is exported when the turn starts, a
// zero-length child of the turn's span. Until that parent span arrives the
// turn is running: the invocation owes it (running_turn), as an
// obligation like a declared child, so that nothing about the turn's
// usage can be final before the turn itself has arrived. Wakes are rare,
// so the pending ones live in graphRare.

// pendingWake is an arrived wake span whose parent, the turn's span, has
// not arrived.
type pendingWake struct {
	Wake, Parent SpanID
	// Name indexes the wake span's name.
	Name int32
}

// pendingWakes returns the wakes whose turn has not arrived (nil for
// most graphs).
func (g *Graph) pendingWakes() []pendingWake {
	if g.rare == nil {
		return nil
	}
	return g.rare.wakes
}

// arriveWake records a wake span's turn as owed when its parent has not
// arrived; a wake without a parent announces nothing the rule can wait
// for.
func (g *Graph) arriveWake(s *Span, nameIdx int32) {
	if s.Parent.IsEmpty() || s.Parent == s.ID {
		return
	}
	if _, arrived := g.arrivedTrace(s.Parent, g.spanAt(s.Parent)); arrived {
		return
	}
	r := g.rareOf()
	r.wakes = append(r.wakes, pendingWake{Wake: s.ID, Parent: s.Parent, Name: nameIdx})
	g.Open++
}

// turnArrived discharges the wakes whose turn is the arriving span id.
func (g *Graph) turnArrived(id SpanID, now int64) {
	r := g.rare
	if r == nil || len(r.wakes) == 0 {
		return
	}
	kept := r.wakes[:0]
	for _, w := range r.wakes {
		if w.Parent == id {
			g.discharge(now)
			continue
		}
		kept = append(kept, w)
	}
	clear(r.wakes[len(kept):])
	r.wakes = kept
	if len(kept) == 0 {
		r.wakes = nil
	}
}

// runningTurnReasons lists running_turn:<wake name> for each pending wake.
func (g *Graph) runningTurnReasons(out []string) []string {
	for _, w := range g.pendingWakes() {
		out = append(out, contract.ReasonRunningTurn+":"+g.Name(w.Name))
	}
	return out
}
