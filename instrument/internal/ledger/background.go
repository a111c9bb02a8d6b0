package ledger

import (
	"github.com/agentledger/agentledger/internal/ledgerrule"
	"go.opentelemetry.io/otel/trace"
)

// backgroundIndex maps the background spans of the invocations a Ledger
// holds to their invocation, to tell a followup link to another
// invocation's job (foreign_followup). The Ledger's mutex guards it.
type backgroundIndex map[trace.SpanID]string

// add records that background span sid belongs to invocation id.
func (b backgroundIndex) add(sid trace.SpanID, id string) { b[sid] = id }

// forget drops the background spans of inv, which the ledger forgets.
func (b backgroundIndex) forget(inv *Invocation) {
	inv.g.HeldBackground(func(sid ledgerrule.SpanID) { delete(b, trace.SpanID(sid)) })
	for sid := range inv.openJobs {
		delete(b, sid)
	}
}

// foreignFollowup reports whether the span (facts f) of invocation id
// carries a followup link to a background span of another invocation.
// Such a link discharges nothing: the target is a member of the other
// invocation, and never arrives in this one's Graph.
func (b backgroundIndex) foreignFollowup(f *Facts, id string) bool {
	for _, l := range f.Links.All() {
		if l.Kind != ledgerrule.LinkFollowup {
			continue
		}
		if owner, ok := b[trace.SpanID(l.Span)]; ok && owner != id {
			return true
		}
	}
	return false
}
