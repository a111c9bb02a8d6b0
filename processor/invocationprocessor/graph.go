package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"encoding/binary"
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
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
	// Trace indexes invocation.Traces: the arrived span's trace or, before
	// it arrives, the trace of its first child.
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

// closedSpan is what a closed invocation keeps of an arrived span that owes
// nothing: enough to drop its duplicates, tell a reused span ID, join a
// late child to it (extra_children, cross-trace and cycle checks) and
// name it.
type closedSpan struct {
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
)

// arrivedTrace returns the trace index of the arrived span with this ID.
func (inv *invocation) arrivedTrace(id pcommon.SpanID) (int32, bool) {
	if st, ok := inv.Spans[id]; ok {
		return st.Trace, st.Arrived
	}
	if c, ok := inv.Closed[id]; ok {
		return c.Trace, true
	}
	return noIndex, false
}

// take returns the span ID's state for updating, moving a closed span back
// to the full state (its met counts read as "declared, none owed"); the
// caller stores it in Spans.
func (inv *invocation) take(id pcommon.SpanID) spanState {
	if st, ok := inv.Spans[id]; ok {
		return st
	}
	st := newSpanState()
	if c, ok := inv.Closed[id]; ok {
		delete(inv.Closed, id)
		st.arrive(pcommon.SpanID{}) // a closed span keeps no parent
		st.Up, st.Trace, st.Name = c.Up, c.Trace, c.Name
		st.Remote = c.Flags&closedRemote != 0
		if c.Flags&closedDeclaredChildren != 0 {
			st.DeclaredChildren = 0
		}
		if c.Flags&closedDeclaredFollowups != 0 {
			st.DeclaredFollowups = 0
		}
	}
	return st
}

// storeSpan stores the span ID's full state. Spans is nil after a close
// that left nothing owing, until a late span needs it again.
func (inv *invocation) storeSpan(id pcommon.SpanID, st spanState) {
	if inv.Spans == nil {
		inv.Spans = make(map[pcommon.SpanID]spanState, 1)
	}
	inv.Spans[id] = st
}

// up returns the union-find link of a span ID (empty for a representative
// or an unknown ID).
func (inv *invocation) up(id pcommon.SpanID) pcommon.SpanID {
	if st, ok := inv.Spans[id]; ok {
		return st.Up
	}
	if c, ok := inv.Closed[id]; ok {
		return c.Up
	}
	return pcommon.SpanID{}
}

func (inv *invocation) setUp(id, up pcommon.SpanID) {
	if st, ok := inv.Spans[id]; ok {
		st.Up = up
		inv.Spans[id] = st
		return
	}
	if c, ok := inv.Closed[id]; ok {
		c.Up = up
		inv.Closed[id] = c
		return
	}
	st := newSpanState()
	st.Up = up
	inv.storeSpan(id, st)
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
func (inv *invocation) attachToParent(id, pid pcommon.SpanID, traceIdx, nameIdx int32, late bool, now int64) {
	if pid == id {
		inv.addTaint(contract.ReasonMalformedParentage + ":" + inv.name(nameIdx))
		return
	}
	if trace, known := inv.knownTrace(pid); known && trace != traceIdx {
		inv.addTaint(contract.ReasonMalformedParentage + ":" + inv.name(nameIdx))
		return
	}
	rx, rp := inv.find(id), inv.find(pid)
	if rx == rp {
		inv.breakCycle(id, pid, nameIdx)
		return
	}
	inv.setUp(rx, rp)

	p := inv.take(pid)
	if p.Trace < 0 {
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
		inv.storeSpan(pid, p)
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
	inv.storeSpan(pid, p)
	x := inv.Spans[id]
	x.Counted = true
	inv.Spans[id] = x
}

// knownTrace returns the trace a span ID is known in: its own once
// arrived, or its first child's.
func (inv *invocation) knownTrace(id pcommon.SpanID) (int32, bool) {
	if st, ok := inv.Spans[id]; ok {
		return st.Trace, st.Trace >= 0
	}
	if c, ok := inv.Closed[id]; ok {
		return c.Trace, true
	}
	return noIndex, false
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
		m, ok := inv.Spans[cur]
		if !ok || !m.Arrived {
			return
		}
		inv.addTaint(contract.ReasonMalformedParentage + ":" + inv.name(m.Name))
		if m.Counted {
			m.Counted = false
			inv.Spans[cur] = m
			if p, ok := inv.Spans[m.parent()]; ok {
				p.ArrivedChildren--
				if p.Arrived && p.DeclaredChildren >= 0 && p.ArrivedChildren < p.DeclaredChildren {
					inv.Open++
				}
				inv.Spans[m.parent()] = p
			}
		}
		cur = m.parent()
	}
}

// linkTargets are a span's followup and consumed link targets.
type linkTargets struct {
	follow, consumed []pcommon.SpanID
	repeated         bool
}

// readLinkTargets reads the link targets, appending to follow and
// consumed (the caller's stack buffers, so that a few links allocate
// nothing).
func readLinkTargets(links ptrace.SpanLinkSlice, follow, consumed []pcommon.SpanID) linkTargets {
	lt := linkTargets{follow: follow, consumed: consumed}
	var seen map[pcommon.SpanID]struct{} // only for spans with many links
	for i := 0; i < links.Len(); i++ {
		l := links.At(i)
		v, ok := l.Attributes().Get(contract.AttrLink)
		if !ok || v.Type() != pcommon.ValueTypeStr {
			continue
		}
		switch v.Str() {
		case contract.LinkFollowup:
			t := l.SpanID()
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
				seen = make(map[pcommon.SpanID]struct{}, links.Len())
				for _, f := range lt.follow {
					seen[f] = struct{}{}
				}
			} else if seen != nil {
				seen[t] = struct{}{}
			}
		case contract.LinkConsumed:
			lt.consumed = append(lt.consumed, l.SpanID())
		}
	}
	return lt
}

// malformed reports a followup link to the span itself, or a target both
// followed up and consumed (rule 3).
func (lt *linkTargets) malformed(self pcommon.SpanID) bool {
	if slices.Contains(lt.follow, self) {
		return true
	}
	if len(lt.consumed) == 0 {
		return false
	}
	follow := lt.follow
	if len(follow) > 16 {
		follow = slices.Clone(follow)
		slices.SortFunc(follow, compareSpanIDs)
		for _, c := range lt.consumed {
			if _, found := slices.BinarySearchFunc(follow, c, compareSpanIDs); found {
				return true
			}
		}
		return false
	}
	for _, c := range lt.consumed {
		if slices.Contains(follow, c) {
			return true
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
// arrived span links to (rule 2), none when its links are malformed.
func (inv *invocation) applyLinks(id pcommon.SpanID, nameIdx int32, links ptrace.SpanLinkSlice, now int64) {
	if links.Len() == 0 {
		return
	}
	var followBuf, consumedBuf [4]pcommon.SpanID
	lt := readLinkTargets(links, followBuf[:0], consumedBuf[:0])
	if lt.repeated {
		inv.addAnomaly(contract.AnomalyDuplicateLink + ":" + inv.name(nameIdx))
	}
	if lt.malformed(id) {
		inv.addTaint(contract.ReasonMalformedLink + ":" + inv.name(nameIdx))
		return
	}
	for _, target := range lt.follow {
		t := inv.take(target)
		before := t.ArrivedFollowups
		t.ArrivedFollowups++
		if !t.Arrived && t.linkedBy() < 0 {
			t.setLinkedBy(nameIdx)
		}
		if t.Arrived && t.DeclaredFollowups >= 0 && before < t.DeclaredFollowups {
			inv.discharge(now)
		}
		inv.storeSpan(target, t)
	}
}

// compact moves an arrived span that owes nothing from Spans to Closed.
func (inv *invocation) compact(id pcommon.SpanID) {
	st, ok := inv.Spans[id]
	if !ok || !st.Arrived || st.owes() {
		return
	}
	c := closedSpan{Up: st.Up, Trace: st.Trace, Name: st.Name}
	if st.Remote {
		c.Flags |= closedRemote
	}
	if st.DeclaredChildren >= 0 {
		c.Flags |= closedDeclaredChildren
	}
	if st.DeclaredFollowups >= 0 {
		c.Flags |= closedDeclaredFollowups
	}
	if inv.Closed == nil {
		inv.Closed = make(map[pcommon.SpanID]closedSpan)
	}
	inv.Closed[id] = c
	delete(inv.Spans, id)
}

// compactAll runs at close: every arrived span that owes nothing keeps only
// its closedSpan, and Spans is reallocated to what is left so its memory
// is released (nil when nothing is left; storeSpan makes it again).
func (inv *invocation) compactAll() {
	if inv.Closed == nil {
		inv.Closed = make(map[pcommon.SpanID]closedSpan, len(inv.Spans))
	}
	keep := 0
	for id, st := range inv.Spans {
		if st.Arrived && !st.owes() {
			inv.find(id) // compress, so a closed span's Up is one hop
		} else {
			keep++
		}
	}
	var left map[pcommon.SpanID]spanState // nil when nothing owes: most closes
	for id, st := range inv.Spans {
		if st.Arrived && !st.owes() {
			inv.compact(id)
			continue
		}
		if left == nil {
			left = make(map[pcommon.SpanID]spanState, keep)
		}
		left[id] = st
	}
	inv.Spans = left
	// The name and trace lookups are rebuilt if a late span needs them.
	inv.index.names, inv.index.traces = nil, nil
}

// compactTouched compacts, after close, what indexing one late span may
// have left owing nothing: the span, its parent and its link targets.
func (inv *invocation) compactTouched(id, parent pcommon.SpanID, links ptrace.SpanLinkSlice) {
	inv.compact(id)
	if !parent.IsEmpty() {
		inv.compact(parent)
	}
	for i := 0; i < links.Len(); i++ {
		inv.compact(links.At(i).SpanID())
	}
}
