package refmodel

import (
	"time"

	"github.com/agentledger/agentledger/contract"
)

// judge applies the graph conditions to the collected members.
func (inv *invocation) judge(now time.Time) {
	if len(inv.named) > inv.cfg.MaxSpans {
		inv.flag(KindSpanLimit, "") // v0.6 rule 5
	}
	rootSeen := false
	for _, m := range inv.members {
		if m.role == contract.RoleRoot {
			rootSeen = true
		}
	}
	if !rootSeen {
		inv.flag(contract.ReasonRootMissing, "")
	}
	inv.parentage()
	inv.linkShapes()
	for _, m := range inv.members {
		inv.obligations(m)
	}
	inv.settle(now)
	inv.interruptedJobs()
}

// interruptedJobs names every background member whose followup a member
// with invocation.followup.reason = interrupted discharges: a well-formed
// followup link naming it by trace and span ID (v0.7). A target that is
// not a member, or not a background span, names no job.
func (inv *invocation) interruptedJobs() {
	for _, m := range inv.members {
		if !m.interrupted || m.badLinks {
			continue
		}
		for _, l := range m.links {
			if l.kind != contract.LinkFollowup {
				continue
			}
			if job, ok := inv.byID[l.span]; ok && job.span.TraceID == l.trace && job.role == contract.RoleBackground {
				inv.anomaly(contract.AnomalyFollowupInterrupted, job.span.Name)
			}
		}
	}
}

// parentage links each member to its parent (same trace, not itself, not
// on a cycle: v0.2 rule 3) and builds the descendant lists.
func (inv *invocation) parentage() {
	for _, m := range inv.members {
		p := m.span.ParentSpanID
		switch parent, ok := inv.byID[p]; {
		case p == SpanID{}:
		case p == m.span.SpanID:
			m.badParent = true
		case !ok:
			// The parent has not arrived, or is not of this invocation.
		case parent.span.TraceID != m.span.TraceID:
			m.badParent = true
		default:
			m.parent = parent
		}
	}
	// A member is on a cycle when walking up from it returns to it.
	for _, m := range inv.members {
		seen := map[*member]bool{}
		for p := m.parent; p != nil && !seen[p]; p = p.parent {
			if p == m {
				m.badParent = true
				break
			}
			seen[p] = true
		}
	}
	for _, m := range inv.members {
		if m.badParent {
			inv.flag(contract.ReasonMalformedParentage, m.span.Name)
			m.parent = nil
		}
	}
	for _, m := range inv.members {
		if m.parent != nil {
			m.parent.descendant = append(m.parent.descendant, m)
		}
	}
}

// linkShapes marks members whose followup, consumed or detached_from links
// are malformed (v0.2 rule 3, v0.6 rule 2): such a member discharges
// nothing.
func (inv *invocation) linkShapes() {
	for _, m := range inv.members {
		kinds := map[SpanID]map[string]bool{}
		for _, l := range m.links {
			switch l.kind {
			case contract.LinkFollowup, contract.LinkConsumed, contract.LinkDetachedFrom:
			default:
				continue
			}
			if l.span == m.span.SpanID {
				m.badLinks = true // a link to itself, in any trace
			}
			if target, ok := inv.byID[l.span]; ok && target.span.TraceID != l.trace && l.kind != contract.LinkConsumed {
				// The span ID names a member of another trace. A consumed
				// link names a span of another invocation and discharges
				// nothing here, so its trace is not checked (v0.6 rule 2).
				m.badLinks = true
			}
			if kinds[l.span] == nil {
				kinds[l.span] = map[string]bool{}
			}
			kinds[l.span][l.kind] = true
		}
		for _, k := range kinds {
			if k[contract.LinkFollowup] && k[contract.LinkConsumed] {
				m.badLinks = true
			}
		}
		if m.badLinks {
			inv.flag(contract.ReasonMalformedLink, m.span.Name)
		}
	}
}

// linkers counts the members (one each, however many links) that carry a
// well-formed link of kind to target; late ones too unless lateCounts is
// false.
func (inv *invocation) linkers(target *member, kind string, lateCounts bool) int64 {
	var n int64
	for _, m := range inv.members {
		if m.badLinks || (m.late && !lateCounts) {
			continue
		}
		for _, l := range m.links {
			if l.kind == kind && l.span == target.span.SpanID && l.trace == target.span.TraceID {
				n++
				break
			}
		}
	}
	return n
}

// obligations checks one member's counts: children (condition 2),
// followups (condition 3), detached (v0.6 rule 4), unrecorded (v0.6
// rule 3).
func (inv *invocation) obligations(m *member) {
	name := m.span.Name
	if c := m.children; c.present {
		if !c.valid {
			inv.flag(KindInvalidCount, name)
		} else {
			var n int64
			for _, child := range m.descendant {
				if !child.late {
					n++
				}
			}
			if n < c.n {
				inv.flag(contract.ReasonMissingChildren, name)
			}
		}
	}
	if m.role == contract.RoleBackground {
		switch c := m.followups; {
		case !c.present || !c.valid:
			inv.flag(KindInvalidCount, name)
		case inv.linkers(m, contract.LinkFollowup, true) < c.n:
			inv.flag(contract.ReasonOpenFollowup, name)
		}
	}
	if c := m.detached; c.present {
		switch {
		case !c.valid:
			inv.flag(KindInvalidCount, name)
		case inv.linkers(m, contract.LinkDetachedFrom, false) < c.n:
			inv.flag(contract.ReasonMissingDetached, name)
		}
	}
	if p := m.span.ParentSpanID; m.role == contract.RoleWake && p != (SpanID{}) && p != m.span.SpanID {
		// v0.12: a wake span's turn is owed until the turn's span, its
		// parent, is a member.
		if _, arrived := inv.byID[p]; !arrived {
			inv.flag(contract.ReasonRunningTurn, name)
		}
	}
	if m.role == contract.RoleUnrecorded {
		// v0.14 (SDK settings): an unrecorded-span declaration stands for
		// a span that was never exported, whatever its count says.
		inv.flag(contract.ReasonNotSampled, name)
	}
	if c := m.unrecorded; c.present {
		switch {
		case !c.valid:
			inv.flag(KindInvalidCount, name)
		case c.n > 0:
			inv.flag(contract.ReasonNotSampled, name)
		}
	}
}

// settle checks condition 4: every remote member's subtree has been quiet
// for remote_settle.
func (inv *invocation) settle(now time.Time) {
	for _, m := range inv.members {
		if !m.remote {
			continue
		}
		latest := m.at
		stack := []*member{m}
		seen := map[*member]bool{m: true}
		for len(stack) > 0 {
			x := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if x.at.After(latest) {
				latest = x.at
			}
			for _, c := range x.descendant {
				if !seen[c] {
					seen[c] = true
					stack = append(stack, c)
				}
			}
		}
		if now.Sub(latest) < inv.cfg.RemoteSettle {
			inv.flag(contract.ReasonRemoteSettling, m.span.Name)
		}
	}
}
