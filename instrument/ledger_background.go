package instrument

import (
	"github.com/agentledger/agentledger/internal/ledgerrule"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// backgroundIndex maps the background spans of the invocations a Ledger
// holds to their invocation, to tell a followup link to another
// invocation's job (foreign_followup). The Ledger's mutex guards it.
type backgroundIndex map[trace.SpanID]string

// add records that background span sid belongs to invocation id.
func (b backgroundIndex) add(sid trace.SpanID, id string) { b[sid] = id }

// forget drops the background spans of inv, which the ledger forgets.
func (b backgroundIndex) forget(inv *invocationState) {
	for i := range inv.nodes.list {
		if n := &inv.nodes.list[i]; n.job&jobBackground != 0 {
			delete(b, n.sid)
		}
	}
	for sid := range inv.openJobs {
		delete(b, sid)
	}
}

// foreignFollowup reports whether span s of invocation id carries a
// followup link to a background span of another invocation. Such a link
// discharges nothing: the target's node is in the other invocation, and
// this one never indexes it as a member.
func (b backgroundIndex) foreignFollowup(s sdktrace.ReadOnlySpan, id string) bool {
	for _, link := range s.Links() {
		if kind, _ := linkKind(link.Attributes); kind != ledgerrule.LinkFollowup {
			continue
		}
		if owner, ok := b[link.SpanContext.SpanID()]; ok && owner != id {
			return true
		}
	}
	return false
}
