package ledgerrule

import (
	"encoding/binary"
	"encoding/hex"
	"slices"
)

// SpanID and TraceID name spans as OTLP does. Both halves convert their
// own identifier types (pcommon, the OpenTelemetry Go API's trace
// package) to these: all are byte arrays of the same size.
type (
	SpanID  [8]byte
	TraceID [16]byte
)

// IsEmpty reports whether the span ID is all zeros (no span).
func (s SpanID) IsEmpty() bool { return s == SpanID{} }

// String returns the span ID in hex, as OTLP/JSON writes it.
func (s SpanID) String() string { return hex.EncodeToString(s[:]) }

// String returns the trace ID in hex.
func (t TraceID) String() string { return hex.EncodeToString(t[:]) }

// noIndex marks an absent name, trace or count.
const noIndex = -1

// SpanState is what an invocation's Graph remembers per span ID while it
// may still matter for finality: whether the span itself arrived, where it
// hangs in the parent relation, and the obligations it declares or that
// point at it. A span ID referenced (as a parent or a followup target)
// before its span arrives has a state with Arrived false. Its followups,
// which few span IDs have, are kept apart (Graph.Followups), so that a
// SpanEntry takes 48 bytes.
type SpanState struct {
	// ref is, once the span arrived, its parent span ID (parent); before,
	// the names of its first child and of its first followup-linking span
	// (childName, linkedBy). Each is read only on its side of arrival, so
	// they share the bytes.
	ref [8]byte
	// up links the span ID toward the representative of its connected
	// component of the parent relation (union-find); empty when it is the
	// representative. A span whose parent is already in its component
	// closes a cycle.
	up SpanID
	// trace is, once the span arrived, its trace (an index into
	// Graph.Traces); before, the trace of its first reference, a child or
	// a followup link (an index into Traces, or below noIndex into
	// graphRare.linkTraces for a trace no span arrived in: linkTraceIndex).
	// Every later reference and the arrival must be in the same trace
	// (v0.6 rule 2): sameTrace compares them.
	trace int32
	// Name indexes Graph.Names (Graph.Name reads it).
	Name int32
	// DeclaredChildren is -1 when nothing was declared. ArrivedChildren
	// counts children that discharge (same trace, not late, not
	// malformed); lateChildren the late ones.
	DeclaredChildren int32
	ArrivedChildren  int32
	lateChildren     int32
	Arrived          bool
	Remote           bool
	// counted is set when the span was counted in its parent's
	// ArrivedChildren (undone if it turns out to be on a cycle).
	counted bool
	// job says what the span ID is as a background job, for
	// followup_interrupted (CONTRACT.md v0.7).
	job jobFlags
}

// jobFlags say what a span ID is as a background job.
type jobFlags uint8

const (
	jobBackground  jobFlags = 1 << iota // the span arrived as a background span
	jobInterrupted                      // a span closing it interrupted discharged one of its followups
)

func newSpanState() SpanState {
	st := SpanState{trace: noIndex, Name: noIndex, DeclaredChildren: noIndex}
	st.setChildName(noIndex)
	st.setLinkedBy(noIndex)
	return st
}

// parent is the arrived span's parent span ID, empty before it arrives
// (and for a span the Graph compacted and restored: it keeps no parent).
func (st *SpanState) parent() SpanID {
	if !st.Arrived {
		return SpanID{}
	}
	return SpanID(st.ref)
}

// arrive marks the span arrived with its parent; its childName and
// linkedBy are no longer kept.
func (st *SpanState) arrive(parent SpanID) {
	st.Arrived = true
	st.ref = parent
}

// childName indexes the name of the first child that arrived before the
// span (noIndex if none, or once the span arrived).
func (st *SpanState) childName() int32 {
	if st.Arrived {
		return noIndex
	}
	return int32(binary.LittleEndian.Uint32(st.ref[:4]))
}

func (st *SpanState) setChildName(i int32) {
	binary.LittleEndian.PutUint32(st.ref[:4], uint32(i))
}

// linkedBy indexes the name of the first span that linked to the span
// as a followup before it arrived (noIndex if none, or once it arrived).
func (st *SpanState) linkedBy() int32 {
	if st.Arrived {
		return noIndex
	}
	return int32(binary.LittleEndian.Uint32(st.ref[4:]))
}

func (st *SpanState) setLinkedBy(i int32) {
	binary.LittleEndian.PutUint32(st.ref[4:], uint32(i))
}

// owes reports whether an arrived span still waits for children or
// followups.
func (g *Graph) owes(e *SpanEntry) bool {
	if e.DeclaredChildren > e.ArrivedChildren {
		return true
	}
	declared, arrived := g.Followups(e.ID)
	return declared > arrived
}

// MissingChildren is how many declared children have not arrived (0 when
// none was declared).
func (st *SpanState) MissingChildren() int {
	return int(max(0, st.DeclaredChildren-st.ArrivedChildren))
}

// spanFollowups are a span ID's followups: how many its background span
// declared (-1 when it declared none, or has not arrived), and how many
// followup links discharged one (or, before it arrived, named it). A span
// ID without an entry has declared -1 and arrived 0.
type spanFollowups struct {
	id       SpanID
	declared int32
	arrived  int32
}

func (f *spanFollowups) spanID() SpanID { return f.id }

// followTable holds the followups of the span IDs in Spans that have any
// (the background spans and the targets of followup links): nil for most
// graphs. An entry goes when its span ID leaves Spans for closed, which
// keeps only whether followups were declared.
type followTable struct {
	entries []spanFollowups
	index   map[SpanID]int32 // once entries outgrow linear search
}

// Followups returns the span ID's followups: how many its span declared
// (-1 when none), and how many followup links discharged one or, before
// it arrived, named it. A span the graph compacted reads as (-1, 0).
func (g *Graph) Followups(id SpanID) (declared, arrived int32) {
	if t := g.follow; t != nil {
		if i := indexOf(t.entries, t.index, id); i >= 0 {
			return t.entries[i].declared, t.entries[i].arrived
		}
	}
	return noIndex, 0
}

// setFollowups sets the span ID's followups; (-1, 0) removes its entry.
func (g *Graph) setFollowups(id SpanID, declared, arrived int32) {
	t := g.follow
	i := -1
	if t != nil {
		i = indexOf(t.entries, t.index, id)
	}
	switch {
	case declared == noIndex && arrived == 0:
		if i >= 0 {
			g.dropFollowupsAt(i)
		}
	case i >= 0:
		t.entries[i].declared, t.entries[i].arrived = declared, arrived
	default:
		if t == nil {
			t = &followTable{}
			g.follow = t
		}
		t.entries = append(t.entries, spanFollowups{id: id, declared: declared, arrived: arrived})
		switch {
		case t.index != nil:
			t.index[id] = int32(len(t.entries) - 1)
		case len(t.entries) > smallSpans:
			t.index = buildIndex(t.entries)
		}
	}
}

// dropFollowups removes the span ID's followups, as it leaves Spans.
func (g *Graph) dropFollowups(id SpanID) {
	if t := g.follow; t != nil {
		if i := indexOf(t.entries, t.index, id); i >= 0 {
			g.dropFollowupsAt(i)
		}
	}
}

func (g *Graph) dropFollowupsAt(i int) {
	t := g.follow
	t.entries = removeAt(t.entries, t.index, i)
	if len(t.entries) == 0 {
		g.follow = nil
	}
}

// SpanEntry is a span ID's full state in Graph.Spans.
type SpanEntry struct {
	ID SpanID
	SpanState
}

// closedSpan is what a shut Graph keeps of an arrived span that owes
// nothing: enough to drop its duplicates, tell a reused span ID, join a
// late child to it (extra_children, cross-trace and cycle checks) and
// name it. It holds no pointers, so the retained state costs the garbage
// collector nothing to mark.
type closedSpan struct {
	id    SpanID
	up    SpanID
	trace int32
	name  int32
	flags closedFlags
}

// closedFlags are a closedSpan's booleans.
type closedFlags uint8

const (
	closedRemote            closedFlags = 1 << iota // invocation.remote
	closedDeclaredChildren                          // declared a count, all arrived
	closedDeclaredFollowups                         // declared followups, all arrived
	closedBackground                                // a background span (SpanState.job)
)

// smallSpans is how many entries of Spans or closed are searched linearly
// before a lookup map is built: most invocations have a dozen spans or
// fewer, and comparing 8-byte ids in a slice is cheaper than hashing them.
const smallSpans = 16

// lookupMaps look up a Graph's Names, Traces, Spans and closed once they
// grow beyond linear search: nil for most graphs, which so carry one
// pointer instead of five maps.
type lookupMaps struct {
	names      map[string]int32
	traces     map[TraceID]int32
	linkTraces map[TraceID]int32
	spans      map[SpanID]int32
	closed     map[SpanID]int32
}

func (g *Graph) lookup() *lookupMaps {
	if g.maps == nil {
		g.maps = &lookupMaps{}
	}
	return g.maps
}

func (g *Graph) spanMap() map[SpanID]int32 {
	if g.maps == nil {
		return nil
	}
	return g.maps.spans
}

func (g *Graph) closedMap() map[SpanID]int32 {
	if g.maps == nil {
		return nil
	}
	return g.maps.closed
}

// setSpanMaps sets the span lookups, releasing lookupMaps when none is
// left.
func (g *Graph) setSpanMaps(spans, closed map[SpanID]int32) {
	if g.maps == nil && spans == nil && closed == nil {
		return
	}
	m := g.lookup()
	m.spans, m.closed = spans, closed
	if m.names == nil && m.traces == nil && m.linkTraces == nil && spans == nil && closed == nil {
		g.maps = nil
	}
}

// spanAt returns the index in Spans of the span ID, or -1.
func (g *Graph) spanAt(id SpanID) int {
	return indexOf(g.Spans, g.spanMap(), id)
}

// closedAt returns the index in closed of the span ID, or -1.
func (g *Graph) closedAt(id SpanID) int {
	return indexOf(g.closed, g.closedMap(), id)
}

// idEntry is an entry of Spans or closed: a record keyed by its span ID.
type idEntry[T any] interface {
	*T
	spanID() SpanID
}

func (e *SpanEntry) spanID() SpanID  { return e.ID }
func (c *closedSpan) spanID() SpanID { return c.id }

// indexOf returns the index in entries of the span ID, or -1: through
// index when there is one, linearly while entries is small.
func indexOf[T any, P idEntry[T]](entries []T, index map[SpanID]int32, id SpanID) int {
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
func buildIndex[T any, P idEntry[T]](entries []T) map[SpanID]int32 {
	if len(entries) <= smallSpans {
		return nil
	}
	index := make(map[SpanID]int32, len(entries))
	for i := range entries {
		index[P(&entries[i]).spanID()] = int32(i)
	}
	return index
}

// removeAt removes entries[i], moving the last entry into its place and
// keeping index (when there is one) in step.
func removeAt[T any, P idEntry[T]](entries []T, index map[SpanID]int32, i int) []T {
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

// Room reserved in Spans: firstSpans for a new graph, and up to
// maxReserve more for children a span declares before they arrive (so a
// single declaration cannot allocate much more than its span).
const (
	firstSpans = 8
	maxReserve = 64
)

// reserveSpans makes room in Spans for n more entries, at most maxReserve.
func (g *Graph) reserveSpans(n int) {
	n = min(n, maxReserve)
	if n > 0 && len(g.Spans)+n > cap(g.Spans) {
		g.Spans = slices.Grow(g.Spans, n)
	}
}

// Reserve makes room, in a graph no span arrived in yet, for spans span
// IDs and for earlyCalls model calls arriving before the root, each at
// most maxReserve: a half that knows the usual size of its invocations
// (the in-process ledger, whose roots end last) spares the slices their
// growth. It changes nothing the rule reads.
func (g *Graph) Reserve(spans, earlyCalls int) {
	if g.Indexed != 0 {
		return
	}
	if spans > 0 && g.Spans == nil {
		g.Spans = make([]SpanEntry, 0, max(firstSpans, min(spans, maxReserve)))
	}
	if earlyCalls > 0 && !g.RootArrived {
		if r := g.rareOf(); r.early == nil {
			r.early = make([]EarlyCall, 0, min(earlyCalls, maxReserve))
		}
	}
}

// appendSpan adds a span ID's full state to Spans and returns its index.
// Indices in Spans stay valid until an entry is removed (removeSpan, only
// from compact and Shut).
func (g *Graph) appendSpan(id SpanID, st SpanState) int {
	i := len(g.Spans)
	if g.Spans == nil {
		g.Spans = make([]SpanEntry, 0, firstSpans)
	}
	g.Spans = append(g.Spans, SpanEntry{ID: id, SpanState: st})
	switch {
	case g.spanMap() != nil:
		g.spanMap()[id] = int32(i)
	case len(g.Spans) > smallSpans:
		g.setSpanMaps(buildIndex(g.Spans), g.closedMap())
	}
	return i
}

// removeSpan removes Spans[i], moving the last entry into its place.
func (g *Graph) removeSpan(i int) { g.Spans = removeAt(g.Spans, g.spanMap(), i) }

// appendClosed adds a compact record to closed.
func (g *Graph) appendClosed(c closedSpan) {
	i := len(g.closed)
	g.closed = append(g.closed, c)
	switch {
	case g.closedMap() != nil:
		g.closedMap()[c.id] = int32(i)
	case len(g.closed) > smallSpans:
		g.setSpanMaps(g.spanMap(), buildIndex(g.closed))
	}
}

// removeClosed removes closed[i], moving the last entry into its place.
func (g *Graph) removeClosed(i int) { g.closed = removeAt(g.closed, g.closedMap(), i) }

// arrivedTrace returns the trace index of the arrived span with this ID;
// i is its index in Spans (spanAt).
func (g *Graph) arrivedTrace(id SpanID, i int) (int32, bool) {
	if i >= 0 {
		return g.Spans[i].trace, g.Spans[i].Arrived
	}
	if i := g.closedAt(id); i >= 0 {
		return g.closed[i].trace, true
	}
	return noIndex, false
}

// slot returns the index in Spans of the span ID's full state, adding a
// new state, or moving a closed span back to the full state (its met
// counts read as "declared, none owed").
func (g *Graph) slot(id SpanID) int {
	if i := g.spanAt(id); i >= 0 {
		return i
	}
	st := newSpanState()
	if j := g.closedAt(id); j >= 0 {
		c := g.closed[j]
		g.removeClosed(j)
		st.arrive(SpanID{}) // a closed span keeps no parent
		st.up, st.trace, st.Name = c.up, c.trace, c.name
		st.Remote = c.flags&closedRemote != 0
		if c.flags&closedDeclaredChildren != 0 {
			st.DeclaredChildren = 0
		}
		if c.flags&closedDeclaredFollowups != 0 {
			g.setFollowups(id, 0, 0)
		}
		if c.flags&closedBackground != 0 {
			st.job = jobBackground
		}
	}
	return g.appendSpan(id, st)
}

// upOf returns the union-find link of a span ID (empty for a
// representative or an unknown ID).
func (g *Graph) upOf(id SpanID) SpanID {
	if i := g.spanAt(id); i >= 0 {
		return g.Spans[i].up
	}
	if i := g.closedAt(id); i >= 0 {
		return g.closed[i].up
	}
	return SpanID{}
}

func (g *Graph) setUp(id, up SpanID) {
	if i := g.spanAt(id); i >= 0 {
		g.Spans[i].up = up
		return
	}
	if i := g.closedAt(id); i >= 0 {
		g.closed[i].up = up
		return
	}
	st := newSpanState()
	st.up = up
	g.appendSpan(id, st)
}

// find returns the representative of the span ID's component, compressing
// the path it walked.
func (g *Graph) find(id SpanID) SpanID {
	root := id
	for limit := len(g.Spans) + len(g.closed); limit >= 0; limit-- {
		u := g.upOf(root)
		if u.IsEmpty() {
			break
		}
		root = u
	}
	for cur := id; cur != root; {
		next := g.upOf(cur)
		if next.IsEmpty() {
			break
		}
		g.setUp(cur, root)
		cur = next
	}
	return root
}

// heldTrace returns the trace a span ID is known in (its own once arrived,
// or its first reference's; noIndex when none) and whether the graph
// holds the ID at all.
func (g *Graph) heldTrace(id SpanID) (int32, bool) {
	if i := g.spanAt(id); i >= 0 {
		return g.Spans[i].trace, true
	}
	if i := g.closedAt(id); i >= 0 {
		return g.closed[i].trace, true
	}
	return noIndex, false
}

// smallIndex is how many names or traces are searched linearly before a
// lookup map is built: most invocations have a few of each.
const smallIndex = 8

// nameIndex interns a span name.
func (g *Graph) nameIndex(name string) int32 {
	var names map[string]int32
	if g.maps != nil {
		names = g.maps.names
	}
	if names == nil {
		if i := slices.Index(g.Names, name); i >= 0 {
			return int32(i)
		}
		if len(g.Names) >= smallIndex {
			names = make(map[string]int32, 2*len(g.Names))
			for i, n := range g.Names {
				names[n] = int32(i)
			}
			g.lookup().names = names
		}
	} else if i, ok := names[name]; ok {
		return i
	}
	i := int32(len(g.Names))
	if g.Names == nil {
		g.Names = make([]string, 0, 4)
	}
	g.Names = append(g.Names, name)
	if names != nil {
		names[name] = i
	}
	return i
}

// Name returns an interned name, "" for an index that names none.
func (g *Graph) Name(i int32) string {
	if i < 0 || int(i) >= len(g.Names) {
		return ""
	}
	return g.Names[i]
}

// traceIndex returns the trace's index, or -1 when the graph has no span
// in it.
func (g *Graph) traceIndex(t TraceID) int32 {
	if g.maps == nil || g.maps.traces == nil {
		return int32(slices.Index(g.Traces, t))
	}
	if i, ok := g.maps.traces[t]; ok {
		return i
	}
	return -1
}

// addTrace registers a trace and returns its index.
func (g *Graph) addTrace(t TraceID) int32 {
	if i := g.traceIndex(t); i >= 0 {
		return i
	}
	var traces map[TraceID]int32
	if g.maps != nil {
		traces = g.maps.traces
	}
	if traces == nil && len(g.Traces) >= smallIndex {
		traces = make(map[TraceID]int32, 2*len(g.Traces))
		for i, t := range g.Traces {
			traces[t] = int32(i)
		}
		g.lookup().traces = traces
	}
	i := int32(len(g.Traces))
	if g.Traces == nil {
		g.Traces = make([]TraceID, 0, 2)
	}
	g.Traces = append(g.Traces, t)
	if traces != nil {
		traces[t] = i
	}
	return i
}

// linkTraceIndex returns the index by which a span state refers to a trace
// a link names: its index in Traces when a span arrived in it, otherwise
// noIndex-1-k for LinkTraces[k] (added if new).
func (g *Graph) linkTraceIndex(t TraceID) int32 {
	if i := g.traceIndex(t); i >= 0 {
		return i
	}
	var links map[TraceID]int32
	if g.maps != nil {
		links = g.maps.linkTraces
	}
	r := g.rareOf()
	if links == nil {
		if i := slices.Index(r.linkTraces, t); i >= 0 {
			return noIndex - 1 - int32(i)
		}
		if len(r.linkTraces) >= smallIndex {
			links = make(map[TraceID]int32, 2*len(r.linkTraces))
			for i, l := range r.linkTraces {
				links[l] = int32(i)
			}
			g.lookup().linkTraces = links
		}
	} else if i, ok := links[t]; ok {
		return noIndex - 1 - i
	}
	i := int32(len(r.linkTraces))
	r.linkTraces = append(r.linkTraces, t)
	if links != nil {
		links[t] = i
	}
	return noIndex - 1 - i
}

// traceAt returns the trace ID a span state's trace refers to (not
// noIndex).
func (g *Graph) traceAt(i int32) TraceID {
	if i >= 0 {
		return g.Traces[i]
	}
	return g.rare.linkTraces[noIndex-1-i]
}

// sameTrace reports whether two trace values (neither noIndex) name the
// same trace.
func (g *Graph) sameTrace(a, b int32) bool {
	if a == b {
		return true
	}
	if a >= 0 && b >= 0 {
		return false
	}
	return g.traceAt(a) == g.traceAt(b)
}
