package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/ledgerrule"
)

// detachedCount is the obligation of a span that declared
// invocation.detached (CONTRACT.md v0.6 rule 4): how many spans of the
// invocation that started new traces from its context will link to it
// with detached_from, and how many did. Such spans are rare, so the
// counts live in a short list on the invocation (nil for almost all)
// rather than in every span's state.
type detachedCount struct {
	ID pcommon.SpanID
	// Trace is the declaring span's trace, or before it arrives the trace
	// of the first link to it; a link or declaration in another trace is
	// malformed_link.
	Trace pcommon.TraceID
	// Name is the declaring span's name; before it arrives, the name of
	// the first span linking to it (for malformed_link).
	Name     int32
	Declared int32 // noIndex before the span arrives
	Arrived  int32
}

// detachedAt returns the index in Detached of a span ID, or -1.
func (inv *invocation) detachedAt(id pcommon.SpanID) int {
	for i := range inv.Detached {
		if inv.Detached[i].ID == id {
			return i
		}
	}
	return -1
}

// detachedSlot returns the index of a span ID's entry, adding one.
func (inv *invocation) detachedSlot(id pcommon.SpanID, trace pcommon.TraceID) int {
	if i := inv.detachedAt(id); i >= 0 {
		return i
	}
	inv.Detached = append(inv.Detached, detachedCount{ID: id, Trace: trace, Name: noIndex, Declared: noIndex})
	return len(inv.Detached) - 1
}

// declareDetached records an arrived span's invocation.detached.
func (inv *invocation) declareDetached(f *spanFacts, nameIdx int32, cfg *ledgerConfig) {
	n, ok := count(f.detached)
	if !ok {
		inv.addInvalid(reasonInvalidCount + ":" + f.name)
		return
	}
	if n == 0 && inv.detachedAt(f.spanID) < 0 {
		return
	}
	if inv.detachedAt(f.spanID) < 0 && !inv.room(cfg) {
		return
	}
	// arriveDetached made an entry's trace the span's own.
	d := &inv.Detached[inv.detachedSlot(f.spanID, f.traceID)]
	d.Name, d.Declared = nameIdx, n
	if n > d.Arrived {
		inv.Open += int(n - d.Arrived)
	}
}

// arriveDetached checks an arriving span against the detached_from links
// that named its span ID before it arrived, whether or not it declares
// invocation.detached: links naming it in another trace discharge nothing
// and make the invocation malformed_link (v0.6 rule 2, whichever arrives
// first).
func (inv *invocation) arriveDetached(f *spanFacts) {
	i := inv.detachedAt(f.spanID)
	if i < 0 {
		return
	}
	if d := &inv.Detached[i]; d.Trace != f.traceID {
		inv.addTaint(contract.ReasonMalformedLink + ":" + inv.name(d.Name))
		d.Trace, d.Arrived = f.traceID, 0
	}
}

// applyDetachedLinks discharges one detached span of each span the arrived
// span links to with detached_from, matched by trace and span ID. A late
// span (started after the span it links to ended, so not counted in its
// invocation.detached) discharges nothing.
func (inv *invocation) applyDetachedLinks(id pcommon.SpanID, nameIdx int32, links []linkFact, late bool, now int64, cfg *ledgerConfig) {
	for i, l := range links {
		if l.kind != ledgerrule.LinkDetachedFrom {
			continue
		}
		repeated := false
		for _, prev := range links[:i] {
			if prev.kind == ledgerrule.LinkDetachedFrom && prev.spanID == l.spanID && prev.traceID == l.traceID {
				repeated = true
			}
		}
		if repeated {
			inv.addAnomaly(contract.AnomalyDuplicateLink + ":" + inv.name(nameIdx))
			continue
		}
		if l.spanID == id {
			inv.addTaint(contract.ReasonMalformedLink + ":" + inv.name(nameIdx))
			continue
		}
		if trace, arrived := inv.arrivedTrace(l.spanID, inv.spanAt(l.spanID)); arrived && inv.traceAt(trace) != l.traceID {
			// The span ID is an arrived member's in another trace (v0.6
			// rule 2), whether or not it declared invocation.detached.
			inv.addTaint(contract.ReasonMalformedLink + ":" + inv.name(nameIdx))
			continue
		}
		if inv.detachedAt(l.spanID) < 0 && !inv.room(cfg) {
			return
		}
		d := &inv.Detached[inv.detachedSlot(l.spanID, l.traceID)]
		if d.Trace != l.traceID {
			inv.addTaint(contract.ReasonMalformedLink + ":" + inv.name(nameIdx))
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
			inv.discharge(now)
		}
	}
}

// detachedReasons appends missing_detached for each declared count not
// yet met.
func (inv *invocation) detachedReasons(out []string) []string {
	for _, d := range inv.Detached {
		if d.Declared > d.Arrived {
			out = append(out, contract.ReasonMissingDetached+":"+inv.name(d.Name))
		}
	}
	return out
}
