package ledgerrule

import "github.com/agentledger/agentledger/contract"

// LinkKind is a span link's invocation.link, as far as the rule tells
// kinds apart.
type LinkKind uint8

// The link kinds.
const (
	LinkNone         LinkKind = iota // absent, malformed, or a value the rule does not know
	LinkFollowup                     // discharges one followup of its target
	LinkConsumed                     // a turn of another invocation read the target's notification
	LinkLaunchedBy                   // a job parented elsewhere names the span that launched it
	LinkDetachedFrom                 // discharges one of its target's invocation.detached
)

// LinkReader reads one link's invocation.link. The zero value is ready;
// a half calls Attr for each value of the key contract.AttrLink in the
// link's attributes (repeats included), then Kind.
type LinkReader struct {
	seen, bad bool
	v         Value
}

// Attr reads one invocation.link value.
func (r *LinkReader) Attr(v Value) {
	if r.seen {
		if !r.v.same(v) {
			r.bad = true
		}
		return
	}
	r.seen, r.v = true, v
	if v.kind != KindString {
		r.bad = true
	}
}

// Kind returns the link's kind, and whether its invocation.link is
// malformed (the wrong type, or repeated with different values): a
// malformed link discharges nothing, and its span's invocation is never
// final (malformed_attribute:invocation.link on <span name>).
func (r *LinkReader) Kind() (LinkKind, bool) {
	if !r.seen {
		return LinkNone, false
	}
	if r.bad {
		return LinkNone, true
	}
	switch r.v.str {
	case contract.LinkFollowup:
		return LinkFollowup, false
	case contract.LinkConsumed:
		return LinkConsumed, false
	case contract.LinkLaunchedBy:
		return LinkLaunchedBy, false
	case contract.LinkDetachedFrom:
		return LinkDetachedFrom, false
	}
	return LinkNone, false
}

// LinkMalformedReason is the reason of a span whose links carry a
// malformed invocation.link.
func LinkMalformedReason(spanName string) string {
	return MalformedReason(contract.AttrLink, spanName)
}
