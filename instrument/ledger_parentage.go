package instrument

import (
	"github.com/agentledger/agentledger/internal/ledgerrule"
	"slices"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// This file applies what an arriving span says of others: its parent
// (counts, late children, malformed parentage and cycles, rules 1 and 3),
// its followup links (rule 2), and whether it lies under a remote span
// (rule 4).

// linkRef returns the node of a link's target, and false when the target's
// span ID belongs to a span of another trace: the link names a span that
// is not a member, so it discharges nothing.
func (inv *invocationState) linkRef(target trace.SpanContext) (node, bool) {
	t, ok := inv.nodes.get(target.SpanID())
	if !ok {
		return newNode(target.SpanID(), target.TraceID()), true
	}
	return t, t.trace == target.TraceID()
}

// room reports whether the invocation may hold one more span ID (v0.6
// rule 5: parents and link targets count toward the bound too); when it
// may not, the invocation can never be final (span_limit).
// pending is 1 while the arriving span's own new node is not yet stored.
func (inv *invocationState) room(maxSpans, pending int) bool {
	if inv.nodes.len()+pending < maxSpans {
		return true
	}
	inv.failReason(reasonSpanLimit)
	return false
}

// arriveUnder counts the arrived span (node n, not yet stored) toward its
// parent psc (rule 1 for late children, rule 3 for malformed parentage).
// A parent that has not arrived gets a node that remembers what was
// counted toward it; a known parent's node is updated in place.
func (inv *invocationState) arriveUnder(n *node, sid trace.SpanID, psc trace.SpanContext, tid trace.TraceID, late bool, maxSpans, pending int) {
	pid := psc.SpanID()
	if pid == sid || psc.TraceID() != tid {
		// Such a span is nobody's child.
		inv.fail(contract.ReasonMalformedParentage, inv.nameOf(n.name))
		return
	}
	at := inv.nodes.find(pid)
	if at < 0 {
		if !inv.room(maxSpans, pending) {
			// The parent's ID would be one more than the bound (v0.6
			// rule 5): the span is nobody's child, and the invocation
			// can never be final.
			return
		}
		p := newNode(pid, tid)
		p.refChild = n.name
		n.parent = pid
		if late {
			n.lateEdge = true
			p.lateChildren++
		} else {
			p.arrivedChildren++
		}
		inv.nodes.put(at, p)
		return
	}
	// p stays valid below: nothing adds a node until it is last used.
	p := &inv.nodes.list[at]
	if p.trace != tid {
		// The parent's span ID names a span of another trace (rule 3).
		inv.fail(contract.ReasonMalformedParentage, inv.nameOf(n.name))
		return
	}
	n.parent = pid
	if late {
		n.lateEdge = true
		// Rule 1: a late child is a member but never counted by its
		// parent, whatever the order.
		if !p.arrived {
			p.lateChildren++
		} else if !p.remote {
			inv.anomaly(contract.AnomalyExtraChildren, inv.nameOf(p.name))
		}
		return
	}
	if p.arrived && p.declaredChildren >= 0 {
		if p.arrivedChildren < p.declaredChildren {
			inv.open--
		} else if !p.remote {
			inv.anomaly(contract.AnomalyExtraChildren, inv.nameOf(p.name))
		}
	}
	p.arrivedChildren++
}

// applyLinks discharges the followups the arrived span's links name: at
// most one per target (rule 2), none when the links are malformed (rule
// 3), none for a target of another invocation (foreign_followup, told by
// the ledger's background index before this is called); then its
// detached_from links (v0.6 rule 4), unless late. A followup an
// interrupted span (f) discharges marks its job (v0.7).
func (inv *invocationState) applyLinks(s sdktrace.ReadOnlySpan, f *spanFacts, name string, maxSpans int) {
	links := s.Links()
	if len(links) == 0 {
		return
	}
	lf := checkLinks(s)
	if lf.malformedKind {
		inv.failReason(ledgerrule.LinkMalformedReason(name))
	}
	if lf.malformed {
		inv.fail(contract.ReasonMalformedLink, name)
		return
	}
	if lf.duplicate {
		inv.anomaly(contract.AnomalyDuplicateLink, name)
	}
	for i, link := range links {
		if kind, _ := linkKind(link.Attributes); kind != ledgerrule.LinkFollowup {
			continue
		}
		target := link.SpanContext.SpanID()
		if lf.duplicate && repeatsFollowup(links[:i], target) {
			continue
		}
		t, ok := inv.linkRef(link.SpanContext)
		if !ok {
			// The span ID names a span of another trace (v0.6 rule 2).
			inv.fail(contract.ReasonMalformedLink, name)
			continue
		}
		if inv.nodes.find(target) < 0 && !inv.room(maxSpans, 0) {
			return
		}
		if t.arrived && t.declaredFollowups >= 0 && t.arrivedFollowups < t.declaredFollowups {
			inv.open--
		}
		t.arrivedFollowups++
		if f.interrupted {
			t.job |= jobInterrupted
			inv.noteInterrupted(&t)
		}
		inv.nodes.set(t)
	}
	inv.applyDetachedLinks(s, name, f.late, maxSpans)
}

// noteInterrupted reports followup_interrupted:<job name> once the job's
// background span arrived and an interrupted followup discharged it,
// whichever came first (contract v0.7).
func (inv *invocationState) noteInterrupted(n *node) {
	if n.arrived && n.job == jobBackground|jobInterrupted {
		inv.anomaly(contract.AnomalyFollowupInterrupted, inv.nameOf(n.name))
	}
}

// repeatsFollowup reports whether links already hold a followup link to
// target.
func repeatsFollowup(links []sdktrace.Link, target trace.SpanID) bool {
	for _, l := range links {
		if kind, _ := linkKind(l.Attributes); kind == ledgerrule.LinkFollowup && l.SpanContext.SpanID() == target {
			return true
		}
	}
	return false
}

// maxRemoteWalk bounds the walk up the ancestors of an arriving span.
const maxRemoteWalk = 64

// breakCycle walks up from the arrived span sid, whose parent is parent;
// when the walk comes back to it, every span of the cycle is reported
// (rule 3) and made nobody's child, undoing what it counted toward its
// parent. Cycles longer than
// maxRemoteWalk are caught by checkCycles before the invocation closes.
func (inv *invocationState) breakCycle(sid, parent trace.SpanID) {
	cur := parent
	for i := 0; i < maxRemoteWalk; i++ {
		if cur == sid {
			inv.undoCycle(sid)
			return
		}
		at := inv.nodes.find(cur)
		if at < 0 {
			return
		}
		n := &inv.nodes.list[at]
		if !n.arrived || n.parent == (trace.SpanID{}) {
			return
		}
		cur = n.parent
	}
}

// undoCycle detaches every span of the parent cycle through sid.
func (inv *invocationState) undoCycle(sid trace.SpanID) {
	cur := sid
	for {
		m, _ := inv.nodes.get(cur)
		pid := m.parent
		if pid == (trace.SpanID{}) {
			return // back at the start: every member is detached
		}
		inv.fail(contract.ReasonMalformedParentage, inv.nameOf(m.name))
		if !m.lateEdge {
			p, _ := inv.nodes.get(pid)
			p.arrivedChildren--
			if p.arrived && p.declaredChildren >= 0 && p.arrivedChildren < p.declaredChildren {
				inv.open++ // the member's discharge is undone
			}
			inv.nodes.set(p)
		}
		m.parent, m.lateEdge = trace.SpanID{}, false
		inv.nodes.set(m)
		cur = pid
	}
}

// underRemote reports whether the span sid or an arrived in-process
// ancestor is remote.
func (inv *invocationState) underRemote(sid trace.SpanID) bool {
	if !inv.remoteSeen {
		return false
	}
	for i := 0; i < maxRemoteWalk; i++ {
		n, ok := inv.nodes.get(sid)
		if !ok || !n.arrived {
			return false
		}
		if n.remote {
			return true
		}
		if n.parent == (trace.SpanID{}) {
			return false
		}
		sid = n.parent
	}
	return false
}

// checkCycles fails the invocation for every arrived span whose parent
// chain loops (rule 3): such spans meet each other's counts. It visits
// each node once; the ledger calls it only when the invocation is about
// to close. A cycle forms when its last member arrives, and breakCycle
// then walks it whole unless it is longer than maxRemoteWalk: with no
// more nodes than that, no cycle can be left and nothing is visited.
func (inv *invocationState) checkCycles() {
	if inv.nodes.len() <= maxRemoteWalk {
		return
	}
	const (
		unvisited = iota
		onPath
		done
	)
	state := make(map[trace.SpanID]uint8, inv.nodes.len())
	var path []trace.SpanID
	for _, n := range inv.nodes.list {
		start := n.sid
		if !n.arrived || n.parent == (trace.SpanID{}) || state[start] != unvisited {
			continue
		}
		path = path[:0]
		sid := start
		for {
			state[sid] = onPath
			path = append(path, sid)
			cur, _ := inv.nodes.get(sid)
			next, ok := inv.nodes.get(cur.parent)
			if cur.parent == (trace.SpanID{}) || !ok || !next.arrived || state[cur.parent] == done {
				break
			}
			if state[cur.parent] == onPath {
				i := slices.Index(path, cur.parent)
				for _, member := range path[i:] {
					m, _ := inv.nodes.get(member)
					inv.fail(contract.ReasonMalformedParentage, inv.nameOf(m.name))
				}
				break
			}
			sid = cur.parent
		}
		for _, p := range path {
			state[p] = done
		}
	}
}
