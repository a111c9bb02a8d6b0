package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"unicode/utf8"
	"unsafe"

	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// minNameBytes is the smallest max_name_bytes: room for a useful prefix
// and the ellipsis that marks a cut name.
const minNameBytes = 16

// ellipsis ends every name the ledger cut at max_name_bytes.
const ellipsis = "…"

// capName returns s when it fits in limit bytes, else its longest prefix
// that ends at a UTF-8 boundary and, with ellipsis, fits. The result is a
// new string, so the ledger keeps none of the long one's bytes.
func capName(s string, limit int) (string, bool) {
	if len(s) <= limit {
		return s, false
	}
	n := limit - len(ellipsis)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + ellipsis, true
}

// Sizes of what an invocation holds, for the byte estimate.
const (
	sizeInvocation  = int64(unsafe.Sizeof(invocationBlock{}))
	sizeString      = int64(unsafe.Sizeof(""))
	sizeSpanRef     = int64(unsafe.Sizeof(summary.SpanRef{}))
	sizeJobTimes    = int64(unsafe.Sizeof(jobTimes{}))
	sizeResourceKV  = 48 // a resource attribute's map entry and boxed value
	sizeMapOverhead = 64
)

// approxBytes estimates the memory the invocation holds: its struct and
// first block, what its Graph holds (ledgerrule.Graph.ApproxBytes: every
// slice at its capacity, names and reasons, lookup maps at a per-entry
// cost), the spans it records for the status page (timeline.go), and its
// resource attributes as if it held them alone (the
// shard's resourceCache often shares them, so this over-counts what one
// invocation adds). Not counted: what Go's allocator rounds up and map
// buckets beyond a per-entry cost, and the shard's own tables (timer
// heap, invocation map). Measured against the live heap (flood_test.go),
// the heap held is 0.87 of the estimate for ordinary open invocations and
// 0.74 for invocations of many link targets: the estimate errs on the
// safe side, by up to about a third, and grows with every byte a sender
// controls (ids, names, spans, links, resources).
func (inv *invocation) approxBytes() int64 {
	n := sizeInvocation + int64(len(inv.ID)) + inv.Graph.ApproxBytes()
	n += int64(cap(inv.ContinuationRoots))*sizeSpanRef + int64(cap(inv.JobTimes))*sizeJobTimes + inv.timelineBytes()
	n += int64(len(inv.ConversationID)+len(inv.AgentName)+len(inv.Forced)) + mapBytes(inv.Resource)
	if inv.rare != nil {
		n += int64(unsafe.Sizeof(invRare{})) + int64(cap(inv.rare.writtenOff))*int64(unsafe.Sizeof(owedKey{}))
	}
	return n
}

// mapBytes estimates resource attributes kept as raw values.
func mapBytes(m map[string]any) int64 {
	if m == nil {
		return 0
	}
	n := int64(sizeMapOverhead)
	for k, v := range m {
		n += sizeResourceKV + int64(len(k)) + valueBytes(v)
	}
	return n
}

func valueBytes(v any) int64 {
	switch v := v.(type) {
	case string:
		return int64(len(v))
	case []byte:
		return int64(len(v))
	case []any:
		n := int64(len(v)) * 16
		for _, e := range v {
			n += valueBytes(e)
		}
		return n
	case map[string]any:
		return mapBytes(v)
	}
	return 8
}

// limits are the caps applied to each member span as it is routed:
// max_invocation_id_bytes and max_name_bytes.
type limits struct {
	idBytes, nameBytes int
}

// capNames cuts the names the ledger may keep of a span to nameBytes and
// returns how many it cut: the span name (kept in the invocation's name
// table, and in reasons and anomalies), the agent name and session (kept
// from the root), the unattributed reason (kept in a reason), and the
// model, which is kept only in an unpriced_model anomaly (a priced one is
// looked up whole).
func (l limits) capNames(f *spanFacts, cfg *ledgerConfig) int64 {
	var n int64
	for _, s := range []*string{&f.Name, &f.agentName, &f.conversationID, &f.UnattributedReason} {
		if len(*s) > l.nameBytes {
			*s, _ = capName(*s, l.nameBytes)
			n++
		}
	}
	if len(f.model) > l.nameBytes {
		if _, priced := cfg.prices[f.model]; !priced {
			f.model, _ = capName(f.model, l.nameBytes)
			n++
		}
	}
	return n
}
