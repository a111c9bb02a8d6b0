package ledgerrule

import (
	"slices"

	"github.com/agentledger/agentledger/contract"
)

// spanRef names a span by trace and span ID.
type spanRef struct {
	trace TraceID
	span  SpanID
}

// linkTargets are a span's followup and consumed link targets, each named
// by trace ID and span ID (v0.6 rule 2).
type linkTargets struct {
	follow, consumed []spanRef
	repeated         bool
}

// readLinkTargets sorts the span's links by kind, appending to follow and
// consumed (the caller's stack buffers, so that a few links allocate
// nothing). A followup repeated with the same trace and span ID is one
// target (and a duplicate_link).
func readLinkTargets(links []Link, follow, consumed []spanRef) linkTargets {
	lt := linkTargets{follow: follow, consumed: consumed}
	var seen map[spanRef]struct{} // only for spans with many links
	for _, l := range links {
		switch l.Kind {
		case LinkFollowup:
			t := spanRef{trace: l.Trace, span: l.Span}
			dup := false
			if seen != nil {
				_, dup = seen[t]
			} else {
				dup = slices.Contains(lt.follow, t)
			}
			if dup {
				lt.repeated = true
				continue
			}
			lt.follow = append(lt.follow, t)
			if seen == nil && len(lt.follow) > 16 {
				seen = make(map[spanRef]struct{}, len(links))
				for _, f := range lt.follow {
					seen[f] = struct{}{}
				}
			} else if seen != nil {
				seen[t] = struct{}{}
			}
		case LinkConsumed:
			lt.consumed = append(lt.consumed, spanRef{trace: l.Trace, span: l.Span})
		}
	}
	return lt
}

// malformed reports a followup or consumed link to the span's own span ID,
// or a span ID both followed up and consumed (rule 3; compared by span ID
// alone, the conservative reading).
func (lt *linkTargets) malformed(self SpanID) bool {
	for _, f := range lt.follow {
		if f.span == self {
			return true
		}
	}
	for _, c := range lt.consumed {
		if c.span == self {
			return true
		}
	}
	if len(lt.consumed) == 0 {
		return false
	}
	if len(lt.follow) > 16 {
		follow := make([]SpanID, len(lt.follow))
		for i, f := range lt.follow {
			follow[i] = f.span
		}
		slices.SortFunc(follow, compareSpanIDs)
		for _, c := range lt.consumed {
			if _, found := slices.BinarySearchFunc(follow, c.span, compareSpanIDs); found {
				return true
			}
		}
		return false
	}
	for _, c := range lt.consumed {
		for _, f := range lt.follow {
			if f.span == c.span {
				return true
			}
		}
	}
	return false
}

func compareSpanIDs(a, b SpanID) int {
	for i := range a {
		if a[i] != b[i] {
			return int(a[i]) - int(b[i])
		}
	}
	return 0
}

// applyLinks discharges at most one followup of each background span the
// arrived span s links to (rule 2), none when its links are malformed, and
// one detached span of each span it links to with detached_from (v0.6
// rule 4). A link names its target by trace and span ID (v0.6 rule 2):
// one whose span ID the graph holds in another trace discharges nothing
// and makes the invocation malformed_link; a target's ID counts toward
// the span bound (v0.6 rule 5). A followup an interrupted span discharges
// marks its job (v0.7).
func (g *Graph) applyLinks(a *arrival) {
	s, nameIdx := a.s, a.name
	id, links := s.ID, s.Links.All()
	if len(links) == 0 {
		return
	}
	var followBuf, consumedBuf [4]spanRef
	lt := readLinkTargets(links, followBuf[:0], consumedBuf[:0])
	if lt.repeated {
		g.AddAnomaly(contract.AnomalyDuplicateLink + ":" + g.Name(nameIdx))
	}
	if lt.malformed(id) {
		g.AddTaint(contract.ReasonMalformedLink + ":" + g.Name(nameIdx))
		return
	}
	for _, target := range lt.follow {
		trace, held := g.heldTrace(target.span)
		if trace != noIndex && g.traceAt(trace) != target.trace {
			g.AddTaint(contract.ReasonMalformedLink + ":" + g.Name(nameIdx))
			continue
		}
		if !held && !g.room(a.cfg) {
			return
		}
		t := &g.Spans[g.slot(target.span)]
		if t.trace == noIndex {
			t.trace = g.linkTraceIndex(target.trace)
		}
		declared, before := g.Followups(target.span)
		g.setFollowups(target.span, declared, before+1)
		if !t.Arrived && t.linkedBy() < 0 {
			t.setLinkedBy(nameIdx)
		}
		if t.Arrived && declared >= 0 && before < declared {
			g.discharge(a.now)
		}
		if s.Interrupted {
			t.job |= jobInterrupted
			g.noteInterrupted(&t.SpanState)
		}
	}
	g.applyDetachedLinks(a, links)
}
