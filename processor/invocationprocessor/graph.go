package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"encoding/binary"
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/ledgerrule"
)

// noIndex marks an absent name, trace or count.
const noIndex = -1

// spanState is what an invocation remembers per span ID while it may still
// matter for finality: whether the span itself arrived, where it hangs in
// the parent relation, and the obligations it declares or that point at it.
// A span ID referenced (as a parent or a followup target) before its span
// arrives has a state with Arrived false.
type spanState struct {
	// ref is, once the span arrived, its parent span ID (parent); before,
	// the names of its first child and of its first followup-linking span
	// (childName, linkedBy). Each is read only on its side of arrival, so
	// they share the bytes and the state fits 48 bytes.
	ref [8]byte
	// Up links the span ID toward the representative of its connected
	// component of the parent relation (union-find); empty when it is the
	// representative. A span whose parent is already in its component
	// closes a cycle.
	Up pcommon.SpanID `json:"up"`
	// Trace is, once the span arrived, its trace (an index into
	// invocation.Traces); before, the trace of its first reference, a child
	// or a followup link (an index into Traces, or below noIndex into
	// invocation.LinkTraces for a trace no span arrived in: linkTraceIndex).
	// Every later reference and the arrival must be in the same trace
	// (v0.6 rule 2): sameTrace compares them.
	Trace int32 `json:"trace"`
	// Name indexes invocation.Names.
	Name int32 `json:"name"`
	// DeclaredChildren and DeclaredFollowups are noIndex when nothing was
	// declared. ArrivedChildren counts children that discharge (same trace,
	// not late, not malformed); LateChildren the late ones.
	DeclaredChildren  int32 `json:"declared_children"`
	ArrivedChildren   int32 `json:"arrived_children"`
	LateChildren      int32 `json:"late_children"`
	DeclaredFollowups int32 `json:"declared_followups"`
	ArrivedFollowups  int32 `json:"arrived_followups"`
	Arrived           bool  `json:"arrived"`
	Remote            bool  `json:"remote"`
	// Counted is set when the span was counted in its parent's
	// ArrivedChildren (undone if it turns out to be on a cycle).
	Counted bool `json:"counted"`
	// Job says what the span ID is as a background job, for
	// followup_interrupted (CONTRACT.md v0.7).
	Job jobFlags `json:"job"`
}

// jobFlags say what a span ID is as a background job.
type jobFlags uint8

const (
	jobBackground  jobFlags = 1 << iota // the span arrived as a background span
	jobInterrupted                      // a span closing it interrupted discharged one of its followups
)

// noteInterrupted reports followup_interrupted:<job name> once the job's
// background span arrived and an interrupted followup discharged it,
// whichever came first (v0.7).
func (inv *invocation) noteInterrupted(st *spanEntry) {
	if st.Arrived && st.Job == jobBackground|jobInterrupted {
		inv.addAnomaly(contract.AnomalyFollowupInterrupted + ":" + inv.name(st.Name))
	}
}

func newSpanState() spanState {
	st := spanState{Trace: noIndex, Name: noIndex, DeclaredChildren: noIndex, DeclaredFollowups: noIndex}
	st.setChildName(noIndex)
	st.setLinkedBy(noIndex)
	return st
}

// parent is the arrived span's parent span ID, empty before it arrives.
func (st *spanState) parent() pcommon.SpanID {
	if !st.Arrived {
		return pcommon.SpanID{}
	}
	return pcommon.SpanID(st.ref)
}

// arrive marks the span arrived with its parent; its childName and
// linkedBy are no longer kept.
func (st *spanState) arrive(parent pcommon.SpanID) {
	st.Arrived = true
	st.ref = parent
}

// childName indexes the name of the first child that arrived before the
// span (noIndex if none, or once the span arrived).
func (st *spanState) childName() int32 {
	if st.Arrived {
		return noIndex
	}
	return int32(binary.LittleEndian.Uint32(st.ref[:4]))
}

func (st *spanState) setChildName(i int32) {
	binary.LittleEndian.PutUint32(st.ref[:4], uint32(i))
}

// linkedBy indexes the name of the first span that linked to the span
// as a followup before it arrived (noIndex if none, or once it arrived).
func (st *spanState) linkedBy() int32 {
	if st.Arrived {
		return noIndex
	}
	return int32(binary.LittleEndian.Uint32(st.ref[4:]))
}

func (st *spanState) setLinkedBy(i int32) {
	binary.LittleEndian.PutUint32(st.ref[4:], uint32(i))
}

// owes reports whether an arrived span still waits for children or
// followups.
func (st *spanState) owes() bool {
	return st.DeclaredChildren > st.ArrivedChildren || st.DeclaredFollowups > st.ArrivedFollowups
}

// spanEntry is a span ID's full state in invocation.Spans.
type spanEntry struct {
	ID pcommon.SpanID `json:"id"`
	spanState
}

// closedSpan is what a closed invocation keeps of an arrived span that owes
// nothing: enough to drop its duplicates, tell a reused span ID, join a
// late child to it (extra_children, cross-trace and cycle checks) and
// name it. It holds no pointers, so the retained state costs the garbage
// collector nothing to mark.
type closedSpan struct {
	ID    pcommon.SpanID `json:"id"`
	Up    pcommon.SpanID `json:"up"`
	Trace int32          `json:"trace"`
	Name  int32          `json:"name"`
	Flags closedFlags    `json:"flags"`
}

// closedFlags are a closedSpan's booleans.
type closedFlags uint8

const (
	closedRemote            closedFlags = 1 << iota // invocation.remote
	closedDeclaredChildren                          // declared a count, all arrived
	closedDeclaredFollowups                         // declared followups, all arrived
	closedBackground                                // a background span (spanState.Job)
)

// smallSpans is how many entries of Spans or Closed are searched linearly
// before a lookup map is built: most invocations have a dozen spans or
// fewer, and comparing 8-byte ids in a slice is cheaper than hashing them.
const smallSpans = 16

// spanAt returns the index in Spans of the span ID, or -1.
func (inv *invocation) spanAt(id pcommon.SpanID) int {
	return indexOf(inv.Spans, inv.index.spans(), id)
}

// closedAt returns the index in Closed of the span ID, or -1.
func (inv *invocation) closedAt(id pcommon.SpanID) int {
	return indexOf(inv.Closed, inv.index.closed(), id)
}

// idEntry is an entry of Spans or Closed: a record keyed by its span ID.
type idEntry[T any] interface {
	*T
	spanID() pcommon.SpanID
}

func (e *spanEntry) spanID() pcommon.SpanID  { return e.ID }
func (c *closedSpan) spanID() pcommon.SpanID { return c.ID }

// indexOf returns the index in entries of the span ID, or -1: through
// index when there is one, linearly while entries is small.
func indexOf[T any, P idEntry[T]](entries []T, index map[pcommon.SpanID]int32, id pcommon.SpanID) int {
	if index != nil {
		if i, ok := index[id]; ok {
			return int(i)
		}
		return -1
	}
	for i := range entries {
		if P(&entries[i]).spanID() == id {
			return i
		}
	}
	return -1
}

// buildIndex returns the lookup map of entries, nil while it is small.
func buildIndex[T any, P idEntry[T]](entries []T) map[pcommon.SpanID]int32 {
	if len(entries) <= smallSpans {
		return nil
	}
	index := make(map[pcommon.SpanID]int32, len(entries))
	for i := range entries {
		index[P(&entries[i]).spanID()] = int32(i)
	}
	return index
}

// removeAt removes entries[i], moving the last entry into its place and
// keeping index (when there is one) in step.
func removeAt[T any, P idEntry[T]](entries []T, index map[pcommon.SpanID]int32, i int) []T {
	last := len(entries) - 1
	if index != nil {
		delete(index, P(&entries[i]).spanID())
		if i != last {
			index[P(&entries[last]).spanID()] = int32(i)
		}
	}
	entries[i] = entries[last]
	return entries[:last]
}

// Room reserved in Spans: firstSpans for a new invocation, and up to
// maxReserve more for children a span declares before they arrive (so a
// single declaration cannot allocate much more than its span).
const (
	firstSpans = 8
	maxReserve = 64
)

// reserveSpans makes room in Spans for n more entries, at most maxReserve.
func (inv *invocation) reserveSpans(n int) {
	n = min(n, maxReserve)
	if n > 0 && len(inv.Spans)+n > cap(inv.Spans) {
		inv.Spans = slices.Grow(inv.Spans, n)
	}
}

// appendSpan adds a span ID's full state to Spans and returns its index.
// Indices in Spans stay valid until an entry is removed (removeSpan, only
// from compact and compactAll).
func (inv *invocation) appendSpan(id pcommon.SpanID, st spanState) int {
	i := len(inv.Spans)
	if inv.Spans == nil {
		inv.Spans = make([]spanEntry, 0, firstSpans)
	}
	inv.Spans = append(inv.Spans, spanEntry{ID: id, spanState: st})
	switch {
	case inv.index.spans() != nil:
		inv.index.spans()[id] = int32(i)
	case len(inv.Spans) > smallSpans:
		inv.reindexSpans()
	}
	return i
}

// reindexSpans rebuilds the lookup map of Spans (none while it is small).
func (inv *invocation) reindexSpans() {
	inv.index.setSpanMaps(buildIndex(inv.Spans), inv.index.closed())
}

// removeSpan removes Spans[i], moving the last entry into its place.
func (inv *invocation) removeSpan(i int) { inv.Spans = removeAt(inv.Spans, inv.index.spans(), i) }

// appendClosed adds a compact record to Closed.
func (inv *invocation) appendClosed(c closedSpan) {
	i := len(inv.Closed)
	inv.Closed = append(inv.Closed, c)
	switch {
	case inv.index.closed() != nil:
		inv.index.closed()[c.ID] = int32(i)
	case len(inv.Closed) > smallSpans:
		inv.reindexClosed()
	}
}

// reindexClosed rebuilds the lookup map of Closed (none while it is small).
func (inv *invocation) reindexClosed() {
	inv.index.setSpanMaps(inv.index.spans(), buildIndex(inv.Closed))
}

// removeClosed removes Closed[i], moving the last entry into its place.
func (inv *invocation) removeClosed(i int) { inv.Closed = removeAt(inv.Closed, inv.index.closed(), i) }

// arrivedTrace returns the trace index of the arrived span with this ID;
// i is its index in Spans (spanAt).
func (inv *invocation) arrivedTrace(id pcommon.SpanID, i int) (int32, bool) {
	if i >= 0 {
		return inv.Spans[i].Trace, inv.Spans[i].Arrived
	}
	if i := inv.closedAt(id); i >= 0 {
		return inv.Closed[i].Trace, true
	}
	return noIndex, false
}

// slot returns the index in Spans of the span ID's full state, adding a
// new state, or moving a closed span back to the full state (its met
// counts read as "declared, none owed").
func (inv *invocation) slot(id pcommon.SpanID) int {
	if i := inv.spanAt(id); i >= 0 {
		return i
	}
	st := newSpanState()
	if j := inv.closedAt(id); j >= 0 {
		c := inv.Closed[j]
		inv.removeClosed(j)
		st.arrive(pcommon.SpanID{}) // a closed span keeps no parent
		st.Up, st.Trace, st.Name = c.Up, c.Trace, c.Name
		st.Remote = c.Flags&closedRemote != 0
		if c.Flags&closedDeclaredChildren != 0 {
			st.DeclaredChildren = 0
		}
		if c.Flags&closedDeclaredFollowups != 0 {
			st.DeclaredFollowups = 0
		}
		if c.Flags&closedBackground != 0 {
			st.Job = jobBackground
		}
	}
	return inv.appendSpan(id, st)
}

// up returns the union-find link of a span ID (empty for a representative
// or an unknown ID).
func (inv *invocation) up(id pcommon.SpanID) pcommon.SpanID {
	if i := inv.spanAt(id); i >= 0 {
		return inv.Spans[i].Up
	}
	if i := inv.closedAt(id); i >= 0 {
		return inv.Closed[i].Up
	}
	return pcommon.SpanID{}
}

func (inv *invocation) setUp(id, up pcommon.SpanID) {
	if i := inv.spanAt(id); i >= 0 {
		inv.Spans[i].Up = up
		return
	}
	if i := inv.closedAt(id); i >= 0 {
		inv.Closed[i].Up = up
		return
	}
	st := newSpanState()
	st.Up = up
	inv.appendSpan(id, st)
}

// find returns the representative of the span ID's component, compressing
// the path it walked.
func (inv *invocation) find(id pcommon.SpanID) pcommon.SpanID {
	root := id
	for limit := len(inv.Spans) + len(inv.Closed); limit >= 0; limit-- {
		u := inv.up(root)
		if u.IsEmpty() {
			break
		}
		root = u
	}
	for cur := id; cur != root; {
		next := inv.up(cur)
		if next.IsEmpty() {
			break
		}
		inv.setUp(cur, root)
		cur = next
	}
	return root
}

// attachToParent applies an arrived span's parent relation: it discharges
// one of the parent's declared children unless the span is late (rule 1)
// or its parentage is malformed (rule 3: itself, another trace, a cycle),
// in which case it is nobody's child.
//
// self is the span's index in Spans; fresh says its ID was new to the
// invocation: with no children it is a component of its own, so it is
// linked to its parent without walking the union-find (find compresses
// the longer paths this leaves when it next walks them).
func (inv *invocation) attachToParent(self int, fresh bool, id, pid pcommon.SpanID, traceIdx, nameIdx int32, late bool, now int64, cfg *ledgerConfig) {
	if pid == id {
		inv.addTaint(contract.ReasonMalformedParentage + ":" + inv.name(nameIdx))
		return
	}
	trace, held := inv.heldTrace(pid)
	if trace != noIndex && !inv.sameTrace(trace, traceIdx) {
		inv.addTaint(contract.ReasonMalformedParentage + ":" + inv.name(nameIdx))
		return
	}
	if !held && !inv.room(cfg) {
		return // v0.6 rule 5: the parent's ID would exceed the bound
	}
	if fresh {
		inv.Spans[self].Up = pid
	} else {
		rx, rp := inv.find(id), inv.find(pid)
		if rx == rp {
			inv.breakCycle(id, pid, nameIdx)
			return
		}
		inv.setUp(rx, rp)
	}

	pi := inv.slot(pid)
	p := &inv.Spans[pi]
	if p.Trace == noIndex {
		p.Trace = traceIdx
	}
	if !p.Arrived && p.childName() < 0 {
		p.setChildName(nameIdx)
	}
	if late {
		p.LateChildren++
		if p.Arrived && !p.Remote {
			inv.addAnomaly(contract.AnomalyExtraChildren + ":" + inv.name(p.Name))
		}
		return
	}
	before := p.ArrivedChildren
	p.ArrivedChildren++
	if p.Arrived && p.DeclaredChildren >= 0 {
		if before < p.DeclaredChildren {
			inv.discharge(now)
		} else if !p.Remote {
			inv.addAnomaly(contract.AnomalyExtraChildren + ":" + inv.name(p.Name))
		}
	}
	inv.Spans[self].Counted = true
}

// heldTrace returns the trace a span ID is known in (its own once arrived,
// or its first reference's; noIndex when none) and whether the invocation
// holds the ID at all.
func (inv *invocation) heldTrace(id pcommon.SpanID) (int32, bool) {
	if i := inv.spanAt(id); i >= 0 {
		return inv.Spans[i].Trace, true
	}
	if i := inv.closedAt(id); i >= 0 {
		return inv.Closed[i].Trace, true
	}
	return noIndex, false
}

// room reports whether the invocation may hold one more span ID (v0.6
// rule 5: arrived, or only named as a parent or a link target). When it
// may not, the span limit is hit: the invocation can no longer be final.
func (inv *invocation) room(cfg *ledgerConfig) bool {
	if !inv.SpanLimitHit && len(inv.Spans)+len(inv.Closed)+len(inv.Detached) < cfg.maxSpans {
		return true
	}
	if !inv.SpanLimitHit {
		inv.SpanLimitHit = true
		inv.addAnomaly(reasonSpanLimit)
		inv.Dirty = true
	}
	return false
}

// linkTraceIndex returns the index by which a span state refers to a trace
// a link names: its index in Traces when a span arrived in it, otherwise
// noIndex-1-k for LinkTraces[k] (added if new).
func (inv *invocation) linkTraceIndex(t pcommon.TraceID) int32 {
	if i := inv.traceIndex(t); i >= 0 {
		return i
	}
	links := inv.index.linkTraces()
	if links == nil {
		if i := slices.Index(inv.LinkTraces, t); i >= 0 {
			return noIndex - 1 - int32(i)
		}
		if len(inv.LinkTraces) >= smallIndex {
			links = make(map[pcommon.TraceID]int32, 2*len(inv.LinkTraces))
			for i, l := range inv.LinkTraces {
				links[l] = int32(i)
			}
			inv.index.lookup().linkTraces = links
		}
	} else if i, ok := links[t]; ok {
		return noIndex - 1 - i
	}
	i := int32(len(inv.LinkTraces))
	inv.LinkTraces = append(inv.LinkTraces, t)
	if links != nil {
		links[t] = i
	}
	return noIndex - 1 - i
}

// traceAt returns the trace ID a span state's Trace refers to (not
// noIndex).
func (inv *invocation) traceAt(i int32) pcommon.TraceID {
	if i >= 0 {
		return inv.Traces[i]
	}
	return inv.LinkTraces[noIndex-1-i]
}

// sameTrace reports whether two Trace values (neither noIndex) name the
// same trace.
func (inv *invocation) sameTrace(a, b int32) bool {
	if a == b {
		return true
	}
	if a >= 0 && b >= 0 {
		return false
	}
	return inv.traceAt(a) == inv.traceAt(b)
}

// breakCycle handles span id whose parent pid is already below it: every
// span on the cycle is malformed and nobody's child, so the counts the
// cycle's edges discharged are opened again. Spans compacted after close
// keep no parent, so a cycle closed by a late span is reported from the
// spans still held in full.
func (inv *invocation) breakCycle(id, pid pcommon.SpanID, nameIdx int32) {
	inv.addTaint(contract.ReasonMalformedParentage + ":" + inv.name(nameIdx))
	cur := pid
	for limit := len(inv.Spans); cur != id && limit >= 0; limit-- {
		mi := inv.spanAt(cur)
		if mi < 0 || !inv.Spans[mi].Arrived {
			return
		}
		m := &inv.Spans[mi]
		inv.addTaint(contract.ReasonMalformedParentage + ":" + inv.name(m.Name))
		if m.Counted {
			m.Counted = false
			if pi := inv.spanAt(m.parent()); pi >= 0 {
				p := &inv.Spans[pi]
				p.ArrivedChildren--
				if p.Arrived && p.DeclaredChildren >= 0 && p.ArrivedChildren < p.DeclaredChildren {
					inv.Open++
				}
			}
		}
		cur = m.parent()
	}
}

// linkTargets are a span's followup and consumed link targets, each named
// by trace ID and span ID (v0.6 rule 2).
type linkTargets struct {
	follow, consumed []spanRef
	repeated         bool
}

// readLinkTargets sorts the span's links (read by factReader) by kind,
// appending to follow and consumed (the caller's stack buffers, so that a
// few links allocate nothing). A followup repeated with the same trace and
// span ID is one target (and a duplicate_link).
func readLinkTargets(links []linkFact, follow, consumed []spanRef) linkTargets {
	lt := linkTargets{follow: follow, consumed: consumed}
	var seen map[spanRef]struct{} // only for spans with many links
	for _, l := range links {
		switch l.kind {
		case ledgerrule.LinkFollowup:
			t := spanRef{TraceID: l.traceID, SpanID: l.spanID}
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
		case ledgerrule.LinkConsumed:
			lt.consumed = append(lt.consumed, spanRef{TraceID: l.traceID, SpanID: l.spanID})
		}
	}
	return lt
}

// malformed reports a followup or consumed link to the span's own span ID,
// or a span ID both followed up and consumed (rule 3; compared by span ID alone,
// the conservative reading).
func (lt *linkTargets) malformed(self pcommon.SpanID) bool {
	for _, f := range lt.follow {
		if f.SpanID == self {
			return true
		}
	}
	for _, c := range lt.consumed {
		if c.SpanID == self {
			return true
		}
	}
	if len(lt.consumed) == 0 {
		return false
	}
	if len(lt.follow) > 16 {
		follow := make([]pcommon.SpanID, len(lt.follow))
		for i, f := range lt.follow {
			follow[i] = f.SpanID
		}
		slices.SortFunc(follow, compareSpanIDs)
		for _, c := range lt.consumed {
			if _, found := slices.BinarySearchFunc(follow, c.SpanID, compareSpanIDs); found {
				return true
			}
		}
		return false
	}
	for _, c := range lt.consumed {
		for _, f := range lt.follow {
			if f.SpanID == c.SpanID {
				return true
			}
		}
	}
	return false
}

func compareSpanIDs(a, b pcommon.SpanID) int {
	for i := range a {
		if a[i] != b[i] {
			return int(a[i]) - int(b[i])
		}
	}
	return 0
}

// applyLinks discharges at most one followup of each background span the
// arrived span f links to (rule 2), none when its links are malformed, and
// one detached span of each span it links to with detached_from (v0.6
// rule 4). A link names its target by trace and span ID (v0.6 rule 2):
// one whose span ID the invocation holds in another trace discharges
// nothing and makes the invocation malformed_link; a target's ID counts
// toward the span bound (v0.6 rule 5). A followup an interrupted span
// discharges marks its job (v0.7).
func (inv *invocation) applyLinks(f *spanFacts, nameIdx int32, now int64, cfg *ledgerConfig) {
	id, links := f.spanID, f.links
	if len(links) == 0 {
		return
	}
	var followBuf, consumedBuf [4]spanRef
	lt := readLinkTargets(links, followBuf[:0], consumedBuf[:0])
	if lt.repeated {
		inv.addAnomaly(contract.AnomalyDuplicateLink + ":" + inv.name(nameIdx))
	}
	if lt.malformed(id) {
		inv.addTaint(contract.ReasonMalformedLink + ":" + inv.name(nameIdx))
		return
	}
	for _, target := range lt.follow {
		trace, held := inv.heldTrace(target.SpanID)
		if trace != noIndex && inv.traceAt(trace) != target.TraceID {
			inv.addTaint(contract.ReasonMalformedLink + ":" + inv.name(nameIdx))
			continue
		}
		if !held && !inv.room(cfg) {
			return
		}
		t := &inv.Spans[inv.slot(target.SpanID)]
		if t.Trace == noIndex {
			t.Trace = inv.linkTraceIndex(target.TraceID)
		}
		before := t.ArrivedFollowups
		t.ArrivedFollowups++
		if !t.Arrived && t.linkedBy() < 0 {
			t.setLinkedBy(nameIdx)
		}
		if t.Arrived && t.DeclaredFollowups >= 0 && before < t.DeclaredFollowups {
			inv.discharge(now)
		}
		if f.has(factInterrupted) {
			t.Job |= jobInterrupted
			inv.noteInterrupted(t)
		}
	}
	inv.applyDetachedLinks(id, nameIdx, links, f.has(factLateChild), now, cfg)
}

// compact moves an arrived span that owes nothing from Spans to Closed.
func (inv *invocation) compact(id pcommon.SpanID) {
	i := inv.spanAt(id)
	if i < 0 || !inv.Spans[i].Arrived || inv.Spans[i].owes() {
		return
	}
	inv.appendClosed(inv.Spans[i].closed())
	inv.removeSpan(i)
}

// closed is the compact record of an arrived span that owes nothing.
func (e *spanEntry) closed() closedSpan {
	c := closedSpan{ID: e.ID, Up: e.Up, Trace: e.Trace, Name: e.Name}
	if e.Remote {
		c.Flags |= closedRemote
	}
	if e.DeclaredChildren >= 0 {
		c.Flags |= closedDeclaredChildren
	}
	if e.DeclaredFollowups >= 0 {
		c.Flags |= closedDeclaredFollowups
	}
	if e.Job&jobBackground != 0 {
		c.Flags |= closedBackground
	}
	return c
}

// compactAll runs at close: every arrived span that owes nothing keeps only
// its closedSpan, and Spans is reallocated to what is left so its memory
// is released (nil when nothing is left; appendSpan makes it again).
// Closed is allocated at its size.
func (inv *invocation) compactAll() {
	// The union-find links are kept as they are: a late span's find
	// compresses the paths it walks, and most closed invocations see none.
	keep := 0
	for i := range inv.Spans {
		if e := &inv.Spans[i]; !e.Arrived || e.owes() {
			keep++
		}
	}
	closed := make([]closedSpan, len(inv.Closed), len(inv.Closed)+len(inv.Spans)-keep)
	copy(closed, inv.Closed)
	var left []spanEntry // nil when nothing owes: most closes
	if keep > 0 {
		left = make([]spanEntry, 0, keep)
	}
	for i := range inv.Spans {
		if e := &inv.Spans[i]; e.Arrived && !e.owes() {
			closed = append(closed, e.closed())
		} else {
			left = append(left, *e)
		}
	}
	inv.Spans, inv.Closed = left, closed
	// The name and trace lookups are rebuilt if a late span needs them.
	if m := inv.index.maps; m != nil {
		m.names, m.traces, m.linkTraces = nil, nil, nil
	}
	inv.index.setSpanMaps(buildIndex(inv.Spans), buildIndex(inv.Closed))
}

// compactTouched compacts, after close, what indexing one late span may
// have left owing nothing: the span, its parent and its link targets.
func (inv *invocation) compactTouched(id, parent pcommon.SpanID, links []linkFact) {
	inv.compact(id)
	if !parent.IsEmpty() {
		inv.compact(parent)
	}
	for _, l := range links {
		inv.compact(l.spanID)
	}
}
