package instrument

import (
	"github.com/agentledger/agentledger/internal/ledgerrule"
	"slices"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// This file applies contract v0.6 rules 3 and 4 to an arriving span: its
// invocation.unrecorded (spans the sampler dropped, never exported) and
// its invocation.detached (spans started from its context as roots of new
// traces), which detached_from links discharge. Most spans have neither,
// so an invocation holds the detached counts in a map made when first
// needed.

// spanKey names a span by its trace and span ID: a link names its target
// so (v0.6 rule 2).
type spanKey struct {
	trace trace.TraceID
	span  trace.SpanID
}

// detachedCount is what an invocation knows of one span's detached spans:
// the count it declared (countAbsent until it arrived with one) and the
// spans that arrived linking to it with detached_from. name is the
// declaring span's; before it arrives, the first linking span's (for
// malformed_link).
type detachedCount struct {
	name     nameRef
	declared spanCount
	arrived  spanCount
}

// arriveLinked checks the arriving span key against the detached_from
// links that named its span ID before it arrived, whether or not it
// declares invocation.detached: links naming it in another trace
// discharge nothing and make the invocation malformed_link (v0.6 rule 2,
// whichever arrives first). Such links discharged no count (none was
// declared under their key), so their entries are dropped.
func (inv *invocationState) arriveLinked(key spanKey) {
	for k, d := range inv.detached {
		if k.span == key.span && k.trace != key.trace {
			inv.fail(contract.ReasonMalformedLink, inv.nameOf(d.name))
			delete(inv.detached, k)
		}
	}
}

// arriveDeclared applies the arrived span's invocation.unrecorded and
// invocation.detached (rules 3 and 4); maxSpans bounds the detached
// counts kept.
func (inv *invocationState) arriveDeclared(key spanKey, name nameRef, f *spanFacts, maxSpans int) {
	if f.unrecorded > 0 {
		inv.fail(contract.ReasonNotSampled, inv.nameOf(name))
	}
	switch {
	case f.detached == childrenInvalid:
		inv.fail(reasonInvalidCount, inv.nameOf(name))
	case f.detached > 0:
		d, ok := inv.detachedOf(key, maxSpans)
		if !ok {
			return
		}
		d.name, d.declared = name, spanCount(f.detached) // at most maxSpans
		if owed := f.detached - int(d.arrived); owed > 0 {
			inv.open += owed
		}
		inv.detached[key] = d
	}
}

// detachedOf returns the detached count of the span key, new when none is
// kept, and false when the invocation already keeps maxSpans of them (it
// then can never be final: span_limit).
func (inv *invocationState) detachedOf(key spanKey, maxSpans int) (detachedCount, bool) {
	if d, ok := inv.detached[key]; ok {
		return d, true
	}
	if len(inv.detached) >= maxSpans {
		if !slices.Contains(inv.failures, reasonSpanLimit) {
			inv.failures = append(inv.failures, reasonSpanLimit)
		}
		return detachedCount{}, false
	}
	if inv.detached == nil {
		inv.detached = make(map[spanKey]detachedCount)
	}
	return detachedCount{declared: countAbsent}, true
}

// applyDetachedLinks discharges, for each span the arrived span s links to
// with detached_from, one of its detached spans (rule 4): at most one per
// target however many links name it, none when s is a late child, none
// for a target named by its span ID in another trace (malformed_link) or
// for s itself.
func (inv *invocationState) applyDetachedLinks(s sdktrace.ReadOnlySpan, name string, late bool, maxSpans int) {
	links := s.Links()
	self := spanKey{s.SpanContext().TraceID(), s.SpanContext().SpanID()}
	for i, link := range links {
		if kind, _ := linkKind(link.Attributes); kind != ledgerrule.LinkDetachedFrom {
			continue
		}
		key := spanKey{link.SpanContext.TraceID(), link.SpanContext.SpanID()}
		if key == self {
			inv.fail(contract.ReasonMalformedLink, name)
			continue
		}
		if n, ok := inv.nodes.get(key.span); ok && n.trace != key.trace {
			inv.fail(contract.ReasonMalformedLink, name)
			continue
		}
		if repeatsLink(links[:i], key, ledgerrule.LinkDetachedFrom) {
			inv.anomaly(contract.AnomalyDuplicateLink, name)
			continue
		}
		// A late link discharges nothing, but its target is held all the
		// same, so that the target arriving in another trace is told.
		d, ok := inv.detachedOf(key, maxSpans)
		if !ok {
			return
		}
		if d.declared == countAbsent && d.name == 0 {
			if n, ok := inv.nodes.get(self.span); ok {
				d.name = n.name
			}
		}
		if !late {
			if d.declared >= 0 && d.arrived < d.declared {
				inv.open--
			}
			d.arrived++
		}
		inv.detached[key] = d
	}
}

// repeatsLink reports whether links already hold a link of kind to key.
func repeatsLink(links []sdktrace.Link, key spanKey, kind ledgerrule.LinkKind) bool {
	for _, l := range links {
		if l.SpanContext.SpanID() != key.span || l.SpanContext.TraceID() != key.trace {
			continue
		}
		if k, _ := linkKind(l.Attributes); k == kind {
			return true
		}
	}
	return false
}

// missingDetached appends to reasons a missing_detached reason for every
// span whose detached spans have not all arrived.
func (inv *invocationState) missingDetached(reasons []string) []string {
	for _, d := range inv.detached {
		if d.declared > d.arrived {
			reasons = append(reasons, contract.ReasonMissingDetached+":"+inv.nameOf(d.name))
		}
	}
	return reasons
}
