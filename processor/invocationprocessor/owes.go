package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"slices"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
	"github.com/agentledger/agentledger/internal/ledgerrule"
)

// What an invocation owes is ledgerrule.Graph.Owes (CONTRACT.md v0.12,
// "Owed means everything owed"), less what an open_timeout close wrote
// off: only a timeout writes owed work off. Eviction and shutdown close
// an invocation too, but the work it owed still runs, so its view keeps
// owing it; so does a closed invocation that a job or a wake arriving
// after its close made owe again, until that work arrives or retention,
// extended by open_timeout from the latest arrival, ends.

// owedKey names one owed item for the write-off.
type owedKey struct {
	kind string
	span ledgerrule.SpanID
}

// writeOff records what the invocation owes as it closes on its
// open_timeout: those items are no longer owed, whatever comes later of
// them; work arriving after the close is owed anew. The record is kept in
// memory only: after a restart the items read as owed again until the
// invocation is forgotten, which errs toward owing.
func (inv *invocation) writeOff(now int64, cfg *ledgerConfig) {
	for _, o := range inv.Owes(now, &cfg.graph) {
		r := inv.rareOf()
		r.writtenOff = append(r.writtenOff, owedKey{kind: o.Kind, span: o.SpanID})
	}
}

// owed lists what the invocation owes at now.
func (inv *invocation) owed(now int64, cfg *ledgerConfig) []ledgerrule.Owed {
	items := inv.Owes(now, &cfg.graph)
	off := inv.writtenOff()
	if len(off) == 0 {
		return items
	}
	return slices.DeleteFunc(items, func(o ledgerrule.Owed) bool {
		return slices.Contains(off, owedKey{kind: o.Kind, span: o.SpanID})
	})
}

// owesAfterClose reports whether a closed invocation owes work at now.
func (inv *invocation) owesAfterClose(now int64, cfg *ledgerConfig) bool {
	return inv.OwesWork(now, &cfg.graph) && len(inv.owed(now, cfg)) > 0
}

// owingRetentionEnd is how long a closed invocation that still owes work
// is kept beyond its retention: open_timeout after its latest arrival, the
// bound an open invocation has.
func (inv *invocation) owingRetentionEnd(cfg *ledgerConfig) int64 {
	return satAdd(inv.LastArrival, cfg.openTimeout)
}

// owedView is the status view of owed items, at most maxWaitEntries (the
// view then owes work still); it returns how many it left out.
func owedView(items []ledgerrule.Owed) ([]statusapi.Owed, int) {
	if len(items) == 0 {
		return nil, 0
	}
	out := make([]statusapi.Owed, 0, min(len(items), maxWaitEntries))
	for _, o := range items[:min(len(items), maxWaitEntries)] {
		v := statusapi.Owed{Reason: o.Reason(), Waits: o.Waits(), SpanID: o.SpanID.String(), Missing: o.Missing}
		if o.Until != 0 {
			until := unixTime(o.Until)
			v.Until = &until
		}
		out = append(out, v)
	}
	return out, len(items) - len(out)
}
