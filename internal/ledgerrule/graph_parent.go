package ledgerrule

import "github.com/agentledger/agentledger/contract"

// attachToParent applies an arrived span's parent relation: it discharges
// one of the parent's declared children unless the span is late (rule 1)
// or its parentage is malformed (rule 3: itself, another trace, a cycle),
// in which case it is nobody's child.
//
// A span whose ID was new to the graph (a.fresh) has no children: it is a
// component of its own, so it is linked to its parent without walking the
// union-find (find compresses the longer paths this leaves when it next
// walks them).
func (g *Graph) attachToParent(a *arrival) {
	self, id, pid, traceIdx, nameIdx, late := a.self, a.s.ID, a.s.Parent, a.trace, a.name, a.s.LateChild
	if pid == id {
		g.AddTaint(contract.ReasonMalformedParentage + ":" + g.Name(nameIdx))
		return
	}
	trace, held := g.heldTrace(pid)
	if trace != noIndex && !g.sameTrace(trace, traceIdx) {
		g.AddTaint(contract.ReasonMalformedParentage + ":" + g.Name(nameIdx))
		return
	}
	if !held && !g.room(a.cfg) {
		return // v0.6 rule 5: the parent's ID would exceed the bound
	}
	if a.fresh {
		g.Spans[self].up = pid
	} else {
		rx, rp := g.find(id), g.find(pid)
		if rx == rp {
			g.breakCycle(id, pid, nameIdx)
			return
		}
		g.setUp(rx, rp)
	}

	pi := g.slot(pid)
	p := &g.Spans[pi]
	if p.trace == noIndex {
		p.trace = traceIdx
	}
	if !p.Arrived && p.childName() < 0 {
		p.setChildName(nameIdx)
	}
	if late {
		p.lateChildren++
		if p.Arrived && !p.Remote {
			g.AddAnomaly(contract.AnomalyExtraChildren + ":" + g.Name(p.Name))
		}
		return
	}
	before := p.ArrivedChildren
	p.ArrivedChildren++
	if p.Arrived && p.DeclaredChildren >= 0 {
		if before < p.DeclaredChildren {
			g.discharge(a.now)
		} else if !p.Remote {
			g.AddAnomaly(contract.AnomalyExtraChildren + ":" + g.Name(p.Name))
		}
	}
	g.Spans[self].counted = true
}

// breakCycle handles span id whose parent pid is already below it: every
// span on the cycle is malformed and nobody's child, so the counts the
// cycle's edges discharged are opened again. Spans compacted after the
// close keep no parent, so a cycle closed by a late span is reported from
// the spans still held in full.
func (g *Graph) breakCycle(id, pid SpanID, nameIdx int32) {
	g.AddTaint(contract.ReasonMalformedParentage + ":" + g.Name(nameIdx))
	cur := pid
	for limit := len(g.Spans); cur != id && limit >= 0; limit-- {
		mi := g.spanAt(cur)
		if mi < 0 || !g.Spans[mi].Arrived {
			return
		}
		m := &g.Spans[mi]
		g.AddTaint(contract.ReasonMalformedParentage + ":" + g.Name(m.Name))
		if m.counted {
			m.counted = false
			if pi := g.spanAt(m.parent()); pi >= 0 {
				p := &g.Spans[pi]
				p.ArrivedChildren--
				if p.Arrived && p.DeclaredChildren >= 0 && p.ArrivedChildren < p.DeclaredChildren {
					g.Open++
				}
			}
		}
		cur = m.parent()
	}
}
