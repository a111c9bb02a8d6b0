package ledgerrule

import "github.com/agentledger/agentledger/contract"

// DetachedCount is the obligation of a span that declared
// invocation.detached (CONTRACT.md v0.6 rule 4): how many spans of the
// invocation that started new traces from its context will link to it
// with detached_from, and how many did. Such spans are rare, so the
// counts live in a short list on the Graph (graphRare) (nil for almost all) rather
// than in every span's state.
type DetachedCount struct {
	ID SpanID
	// Trace is the declaring span's trace, or before it arrives the trace
	// of the first link to it; a link or declaration in another trace is
	// malformed_link.
	Trace TraceID
	// Name is the declaring span's name; before it arrives, the name of
	// the first span linking to it (for malformed_link).
	Name     int32
	Declared int32 // -1 before the span arrives
	Arrived  int32
}

// detachedAt returns the index in Detached of a span ID, or -1.
func (g *Graph) detachedAt(id SpanID) int {
	for i, d := range g.detachedList() {
		if d.ID == id {
			return i
		}
	}
	return -1
}

// detachedSlot returns the index of a span ID's entry, adding one.
func (g *Graph) detachedSlot(id SpanID, trace TraceID) int {
	if i := g.detachedAt(id); i >= 0 {
		return i
	}
	r := g.rareOf()
	r.detached = append(r.detached, DetachedCount{ID: id, Trace: trace, Name: noIndex, Declared: noIndex})
	return len(r.detached) - 1
}

// declareDetached records an arrived span's invocation.detached.
func (g *Graph) declareDetached(s *Span, nameIdx int32, cfg *GraphConfig) {
	n, ok := count(s.Detached)
	if !ok {
		g.AddInvalid(ReasonInvalidCount + ":" + s.Name)
		return
	}
	if n == 0 && g.detachedAt(s.ID) < 0 {
		return
	}
	if g.detachedAt(s.ID) < 0 && !g.room(cfg) {
		return
	}
	// arriveDetached made an entry's trace the span's own.
	d := &g.rare.detached[g.detachedSlot(s.ID, s.Trace)]
	d.Name, d.Declared = nameIdx, n
	if n > d.Arrived {
		g.Open += int(n - d.Arrived)
	}
}

// arriveDetached checks an arriving span against the detached_from links
// that named its span ID before it arrived, whether or not it declares
// invocation.detached: links naming it in another trace discharge nothing
// and make the invocation malformed_link (v0.6 rule 2, whichever arrives
// first).
func (g *Graph) arriveDetached(s *Span) {
	i := g.detachedAt(s.ID)
	if i < 0 {
		return
	}
	if d := &g.rare.detached[i]; d.Trace != s.Trace {
		g.AddTaint(contract.ReasonMalformedLink + ":" + g.Name(d.Name))
		d.Trace, d.Arrived = s.Trace, 0
	}
}

// applyDetachedLinks discharges one detached span of each span the arrived
// span links to with detached_from, matched by trace and span ID. A late
// span (started after the span it links to ended, so not counted in its
// invocation.detached) discharges nothing.
func (g *Graph) applyDetachedLinks(a *arrival, links []Link) {
	id, nameIdx, late := a.s.ID, a.name, a.s.LateChild
	for i, l := range links {
		if l.Kind != LinkDetachedFrom {
			continue
		}
		repeated := false
		for _, prev := range links[:i] {
			if prev.Kind == LinkDetachedFrom && prev.Span == l.Span && prev.Trace == l.Trace {
				repeated = true
			}
		}
		if repeated {
			g.AddAnomaly(contract.AnomalyDuplicateLink + ":" + g.Name(nameIdx))
			continue
		}
		if l.Span == id {
			g.AddTaint(contract.ReasonMalformedLink + ":" + g.Name(nameIdx))
			continue
		}
		if trace, arrived := g.arrivedTrace(l.Span, g.spanAt(l.Span)); arrived && g.traceAt(trace) != l.Trace {
			// The span ID is an arrived member's in another trace (v0.6
			// rule 2), whether or not it declared invocation.detached.
			g.AddTaint(contract.ReasonMalformedLink + ":" + g.Name(nameIdx))
			continue
		}
		if g.detachedAt(l.Span) < 0 && !g.room(a.cfg) {
			return
		}
		d := &g.rare.detached[g.detachedSlot(l.Span, l.Trace)]
		if d.Trace != l.Trace {
			g.AddTaint(contract.ReasonMalformedLink + ":" + g.Name(nameIdx))
			continue
		}
		if d.Name == noIndex {
			d.Name = nameIdx
		}
		if late {
			continue
		}
		before := d.Arrived
		d.Arrived++
		if d.Declared >= 0 && before < d.Declared {
			g.discharge(a.now)
		}
	}
}
