package ledger

import (
	"slices"
	"sync"
)

// summaryRecord is a bounded first-in-first-out record of the latest
// summaries of invocations the ledger forgot after the retention, so that
// a Wait arriving late still has an answer. The Ledger's mutex guards it.
type summaryRecord struct {
	max   int
	byID  map[string]Summary
	order []string // ids by insertion, oldest first; a ring of len max
	next  int      // where the next id goes once order is full
}

func newSummaryRecord(max int) *summaryRecord {
	return &summaryRecord{max: max, byID: make(map[string]Summary)}
}

// add records s under its invocation id; it reports whether an older
// record was dropped to make room.
func (r *summaryRecord) add(s Summary) (dropped bool) {
	if r.max <= 0 {
		return false
	}
	if _, ok := r.byID[s.InvocationID]; ok {
		r.byID[s.InvocationID] = s
		return false
	}
	if len(r.order) < r.max {
		r.order = append(r.order, s.InvocationID)
	} else {
		delete(r.byID, r.order[r.next])
		r.order[r.next] = s.InvocationID
		r.next = (r.next + 1) % r.max
		dropped = true
	}
	r.byID[s.InvocationID] = s
	return dropped
}

// get returns a copy of the record of id.
func (r *summaryRecord) get(id string) (Summary, bool) {
	s, ok := r.byID[id]
	s.Reasons = slices.Clone(s.Reasons)
	s.Anomalies = slices.Clone(s.Anomalies)
	return s, ok
}

// maxNotSampled bounds notSampledRoots.
const maxNotSampled = 4096

// notSampledRoots holds the ids of the latest invocations whose root span
// a Tracker started without sampling it: nothing of them reaches a ledger
// or the collector. It is process-wide because a span the sampler drops
// reaches no SpanProcessor, so a Tracker cannot tell its ledger; every
// Ledger.Wait consults it. Ids are random, so ledgers do not mix them up.
var notSampledRoots = struct {
	mu  sync.Mutex
	ids map[string]struct{}
	// ring holds the ids, oldest first once full, to drop in order.
	ring []string
	next int
}{ids: make(map[string]struct{})}

// MarkNotSampled records that invocation id's root was not sampled.
func MarkNotSampled(id string) {
	n := &notSampledRoots
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.ids[id]; ok {
		return
	}
	if len(n.ring) < maxNotSampled {
		n.ring = append(n.ring, id)
	} else {
		delete(n.ids, n.ring[n.next])
		n.ring[n.next] = id
		n.next = (n.next + 1) % maxNotSampled
	}
	n.ids[id] = struct{}{}
}

// notSampled reports whether invocation id's root was not sampled.
func notSampled(id string) bool {
	n := &notSampledRoots
	n.mu.Lock()
	defer n.mu.Unlock()
	_, ok := n.ids[id]
	return ok
}

// RootNotSampled reports whether a Tracker of this process started
// invocation id with a root that was not sampled: nothing of it is
// recorded, here or in the collector.
func RootNotSampled(id string) bool { return notSampled(id) }
