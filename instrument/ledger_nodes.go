package instrument

import "go.opentelemetry.io/otel/trace"

// node is the ledger's record of one span ID of an invocation: the span
// itself once it arrived, and what was counted toward it before. It holds
// no pointer (names are indexes into the invocation's names), so the
// garbage collector does not scan the nodes of the invocations a ledger
// retains.
type node struct {
	sid trace.SpanID
	// trace is the span's trace, or that of the first reference to it.
	trace trace.TraceID
	// parent is the span's parent in the same trace; zero when it has
	// none or its parentage is malformed.
	parent trace.SpanID
	name   nameRef
	// refChild names the first child that referenced this span as its
	// parent before it arrived: when the span then arrives in another
	// trace, that child's parentage was malformed.
	refChild nameRef
	arrived  bool
	remote   bool
	// job says what the span ID is as a background job, for
	// followup_interrupted (contract v0.7).
	job jobFlags
	// lateEdge: the span is a late child; its parent does not count it.
	lateEdge          bool
	declaredChildren  spanCount // countAbsent: not declared
	arrivedChildren   spanCount
	lateChildren      spanCount // late children that arrived before this span
	declaredFollowups spanCount // countAbsent: not declared
	arrivedFollowups  spanCount
}

// jobFlags say what a node is as a background job.
type jobFlags uint8

const (
	jobBackground  jobFlags = 1 << iota // the span arrived as a background span
	jobInterrupted                      // a span closing it interrupted discharged one of its followups
)

// spanCount is a count of spans in a node. It is 32 bits wide, so that a
// node takes 64 bytes: a count never exceeds the ledger's per-invocation
// span bound (children and followups beyond it are not indexed, declared
// ones beyond it are invalid), which newLedger keeps below 2^31.
type spanCount int32

// newNode returns the node of span sid of trace tid before anything is
// known of it.
func newNode(sid trace.SpanID, tid trace.TraceID) node {
	return node{sid: sid, trace: tid, declaredChildren: countAbsent, declaredFollowups: countAbsent}
}

// nodeIndexFrom is the size from which a nodeSet keeps a map index; below
// it a linear scan of a few cache lines is cheaper than hashing.
const nodeIndexFrom = 16

// nodeSet holds an invocation's nodes by span ID, in one slice: no
// allocation per node, and no pointer per node for the garbage collector
// beyond its names. Nodes are read and written by value.
type nodeSet struct {
	list  []node
	index map[trace.SpanID]int32
}

func (ns *nodeSet) len() int { return len(ns.list) }

func (ns *nodeSet) find(sid trace.SpanID) int {
	if ns.index != nil {
		if i, ok := ns.index[sid]; ok {
			return int(i)
		}
		return -1
	}
	for i := range ns.list {
		if ns.list[i].sid == sid {
			return i
		}
	}
	return -1
}

// get returns the node of sid, and whether there is one.
func (ns *nodeSet) get(sid trace.SpanID) (node, bool) {
	if i := ns.find(sid); i >= 0 {
		return ns.list[i], true
	}
	return node{}, false
}

// set stores n under n.sid.
func (ns *nodeSet) set(n node) { ns.put(ns.find(n.sid), n) }

// put stores n at i, an index find gave for n.sid (indexes never move),
// or adds it when i is -1.
func (ns *nodeSet) put(i int, n node) {
	if i >= 0 {
		ns.list[i] = n
		return
	}
	if ns.list == nil {
		ns.list = make([]node, 0, nodeIndexFrom)
	}
	ns.list = append(ns.list, n)
	switch {
	case ns.index != nil:
		ns.index[n.sid] = int32(len(ns.list) - 1)
	case len(ns.list) > nodeIndexFrom:
		ns.index = make(map[trace.SpanID]int32, 2*len(ns.list))
		for i := range ns.list {
			ns.index[ns.list[i].sid] = int32(i)
		}
	}
}
