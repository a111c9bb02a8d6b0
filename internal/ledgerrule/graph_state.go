package ledgerrule

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A Graph's state in bytes, for a half that stores invocations (the
// collector's journal keeps a closed invocation as this record instead of
// its spans). AppendState writes every field, DecodeState reads them back
// into a zero Graph: the decoded Graph answers every method as the
// original would, its lookup maps rebuilt as Shut builds them. The format
// has no version of its own; the caller frames and versions it.

// ErrState is wrapped by every DecodeState error.
var ErrState = errors.New("unreadable graph state")

// Graph flags in the stored state.
const (
	stateRootArrived = 1 << iota
	stateHasRemote
	stateSpanLimitHit
	stateIsShut
	stateDirty
	stateRare
	stateWakes // v0.12: pending wake spans follow the rare part
)

// SpanState flags in the stored state.
const (
	spanStateArrived = 1 << iota
	spanStateRemote
	spanStateCounted
)

// AppendState appends the graph's state to b.
func (g *Graph) AppendState(b []byte) []byte {
	var flags byte
	for i, set := range []bool{g.RootArrived, g.HasRemote, g.SpanLimitHit, g.IsShut, g.Dirty, g.rare != nil, len(g.pendingWakes()) > 0} {
		if set {
			flags |= 1 << i
		}
	}
	b = append(b, flags)
	b = binary.AppendVarint(b, int64(g.Open))
	for _, l := range [][]string{g.Invalid(), g.Taints(), g.Anomalies(), g.Names} {
		b = appendStrings(b, l)
	}
	for _, v := range []int64{g.LastArrival, g.LastDischarge, g.SettleFrom,
		g.Usage.Input, g.Usage.Output, g.Usage.CacheRead, g.Usage.CacheCreation, g.Usage.Reasoning,
		g.AfterInput, g.AfterOutput, g.Indexed, g.Duplicates, g.ModelCalls, g.BackgroundJobs, g.Continuations} {
		b = binary.AppendVarint(b, v)
	}
	for _, v := range []uint64{g.RootStart, g.RootEnd, g.MinStart, g.LatestEnd} {
		b = binary.AppendUvarint(b, v)
	}
	b = appendTraces(b, g.Traces)
	b = binary.AppendUvarint(b, uint64(len(g.Spans)))
	for i := range g.Spans {
		e := &g.Spans[i]
		b = append(b, e.ID[:]...)
		b = append(b, e.ref[:]...)
		b = append(b, e.up[:]...)
		declared, arrived := g.Followups(e.ID)
		for _, v := range []int32{e.trace, e.Name, e.DeclaredChildren, e.ArrivedChildren, e.lateChildren, declared, arrived} {
			b = binary.AppendVarint(b, int64(v))
		}
		var sf byte
		if e.Arrived {
			sf |= spanStateArrived
		}
		if e.Remote {
			sf |= spanStateRemote
		}
		if e.counted {
			sf |= spanStateCounted
		}
		b = append(b, sf, byte(e.job))
	}
	// Closed spans: the union-find link names, when it can, the closed
	// span it points at by index (most point at the root), so a span
	// takes about 12 bytes.
	b = binary.AppendUvarint(b, uint64(len(g.closed)))
	at := closedIndex(g.closed)
	for i := range g.closed {
		c := &g.closed[i]
		b = append(b, c.id[:]...)
		switch j, ok := at(c.up); {
		case c.up.IsEmpty():
			b = append(b, 0)
		case ok:
			b = binary.AppendUvarint(b, uint64(j)+2)
		default:
			b = append(b, 1)
			b = append(b, c.up[:]...)
		}
		b = binary.AppendVarint(b, int64(c.trace))
		b = binary.AppendVarint(b, int64(c.name))
		b = append(b, byte(c.flags))
	}
	if r := g.rare; r != nil {
		b = appendTraces(b, r.linkTraces)
		b = binary.AppendUvarint(b, uint64(len(r.detached)))
		for _, d := range r.detached {
			b = append(b, d.ID[:]...)
			b = append(b, d.Trace[:]...)
			for _, v := range []int32{d.Name, d.Declared, d.Arrived} {
				b = binary.AppendVarint(b, int64(v))
			}
		}
		b = binary.AppendUvarint(b, uint64(len(r.early)))
		for _, e := range r.early {
			b = binary.AppendUvarint(b, e.Start)
			b = binary.AppendVarint(b, e.Input)
			b = binary.AppendVarint(b, e.Output)
		}
	}
	if wakes := g.pendingWakes(); len(wakes) > 0 {
		b = binary.AppendUvarint(b, uint64(len(wakes)))
		for _, w := range wakes {
			b = append(b, w.Wake[:]...)
			b = append(b, w.Parent[:]...)
			b = binary.AppendVarint(b, int64(w.Name))
		}
	}
	return b
}

// closedIndex returns a lookup of closed spans' indexes by span ID.
func closedIndex(closed []closedSpan) func(SpanID) (int, bool) {
	if len(closed) <= smallSpans {
		return func(id SpanID) (int, bool) {
			for i := range closed {
				if closed[i].id == id {
					return i, true
				}
			}
			return 0, false
		}
	}
	m := buildIndex(closed)
	return func(id SpanID) (int, bool) {
		i, ok := m[id]
		return int(i), ok
	}
}

func appendStrings(b []byte, l []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(l)))
	for _, s := range l {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b
}

func appendTraces(b []byte, l []TraceID) []byte {
	b = binary.AppendUvarint(b, uint64(len(l)))
	for _, t := range l {
		b = append(b, t[:]...)
	}
	return b
}

// stateReader reads a stored state; the first error sticks.
type stateReader struct {
	b   []byte
	err error
}

func (r *stateReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrState, what)
	}
}

func (r *stateReader) fixed(n int) []byte {
	if r.err != nil || len(r.b) < n {
		r.fail("truncated")
		return make([]byte, n)
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *stateReader) byte1() byte { return r.fixed(1)[0] }

func (r *stateReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad uvarint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *stateReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *stateReader) int32() int32 {
	v := r.varint()
	if int64(int32(v)) != v {
		r.fail("int32 out of range")
		return 0
	}
	return int32(v)
}

// count reads an element count whose elements take at least size bytes
// each, so a damaged count cannot allocate beyond the input.
func (r *stateReader) count(size int) int {
	n := r.uvarint()
	if r.err == nil && n > uint64(len(r.b)/size) {
		r.fail("count beyond the input")
		return 0
	}
	return int(n)
}

func (r *stateReader) strings() []string {
	n := r.count(1)
	if n == 0 {
		return nil
	}
	l := make([]string, 0, n)
	for range n {
		l = append(l, string(r.fixed(r.count(1))))
	}
	return l
}

func (r *stateReader) traces() []TraceID {
	n := r.count(16)
	if n == 0 {
		return nil
	}
	l := make([]TraceID, n)
	for i := range l {
		copy(l[i][:], r.fixed(16))
	}
	return l
}

// DecodeState reads a state AppendState wrote into g, which must be a zero
// Graph, and returns the bytes after it.
func (g *Graph) DecodeState(b []byte) ([]byte, error) {
	r := stateReader{b: b}
	flags := r.byte1()
	if flags&^(1<<7-1) != 0 || (flags&stateWakes != 0 && flags&stateRare == 0) {
		r.fail("bad graph flags")
	}
	g.RootArrived, g.HasRemote, g.SpanLimitHit = flags&stateRootArrived != 0, flags&stateHasRemote != 0, flags&stateSpanLimitHit != 0
	g.IsShut, g.Dirty = flags&stateIsShut != 0, flags&stateDirty != 0
	g.Open = int(r.varint())
	if invalid, taints, anomalies := r.strings(), r.strings(), r.strings(); len(invalid)+len(taints)+len(anomalies) > 0 {
		g.notes = &graphNotes{invalid: invalid, taints: taints, anomalies: anomalies}
	}
	g.Names = r.strings()
	for _, p := range []*int64{&g.LastArrival, &g.LastDischarge, &g.SettleFrom,
		&g.Usage.Input, &g.Usage.Output, &g.Usage.CacheRead, &g.Usage.CacheCreation, &g.Usage.Reasoning,
		&g.AfterInput, &g.AfterOutput, &g.Indexed, &g.Duplicates, &g.ModelCalls, &g.BackgroundJobs, &g.Continuations} {
		*p = r.varint()
	}
	for _, p := range []*uint64{&g.RootStart, &g.RootEnd, &g.MinStart, &g.LatestEnd} {
		*p = r.uvarint()
	}
	g.Traces = r.traces()
	if n := r.count(33); n > 0 {
		g.Spans = make([]SpanEntry, n)
		var follow []spanFollowups
		for i := range g.Spans {
			e := &g.Spans[i]
			copy(e.ID[:], r.fixed(8))
			copy(e.ref[:], r.fixed(8))
			copy(e.up[:], r.fixed(8))
			f := spanFollowups{id: e.ID}
			for _, p := range []*int32{&e.trace, &e.Name, &e.DeclaredChildren, &e.ArrivedChildren, &e.lateChildren, &f.declared, &f.arrived} {
				*p = r.int32()
			}
			if f.declared != noIndex || f.arrived != 0 {
				follow = append(follow, f)
			}
			sf := r.byte1()
			if sf&^(spanStateArrived|spanStateRemote|spanStateCounted) != 0 {
				r.fail("bad span flags")
			}
			e.Arrived, e.Remote, e.counted = sf&spanStateArrived != 0, sf&spanStateRemote != 0, sf&spanStateCounted != 0
			e.job = jobFlags(r.byte1())
		}
		// A span ID has one entry (its followups are kept by it).
		if !distinctIDs(g.Spans) {
			r.fail("a span ID twice")
		}
		for _, f := range follow {
			g.setFollowups(f.id, f.declared, f.arrived)
		}
	}
	if n := r.count(12); n > 0 {
		g.closed = make([]closedSpan, n)
		ups := make([]uint64, n)
		for i := range g.closed {
			c := &g.closed[i]
			copy(c.id[:], r.fixed(8))
			switch ups[i] = r.uvarint(); ups[i] {
			case 0:
			case 1:
				copy(c.up[:], r.fixed(8))
			default:
				if ups[i]-2 >= uint64(n) {
					r.fail("union-find link beyond the closed spans")
				}
			}
			c.trace, c.name = r.int32(), r.int32()
			c.flags = closedFlags(r.byte1())
		}
		for i, u := range ups {
			if u >= 2 && r.err == nil {
				g.closed[i].up = g.closed[u-2].id
			}
		}
	}
	if flags&stateRare != 0 {
		rare := &graphRare{linkTraces: r.traces()}
		if n := r.count(27); n > 0 {
			rare.detached = make([]DetachedCount, n)
			for i := range rare.detached {
				d := &rare.detached[i]
				copy(d.ID[:], r.fixed(8))
				copy(d.Trace[:], r.fixed(16))
				d.Name, d.Declared, d.Arrived = r.int32(), r.int32(), r.int32()
			}
		}
		if n := r.count(3); n > 0 {
			rare.early = make([]EarlyCall, n)
			for i := range rare.early {
				e := &rare.early[i]
				e.Start, e.Input, e.Output = r.uvarint(), r.varint(), r.varint()
			}
		}
		if flags&stateWakes != 0 {
			n := r.count(17)
			if n == 0 {
				r.fail("empty wake list")
			}
			for range n {
				var w pendingWake
				copy(w.Wake[:], r.fixed(8))
				copy(w.Parent[:], r.fixed(8))
				w.Name = r.int32()
				rare.wakes = append(rare.wakes, w)
			}
		}
		g.rare = rare
	}
	if r.err != nil {
		*g = Graph{}
		return nil, r.err
	}
	if err := g.checkIndexes(); err != nil {
		*g = Graph{}
		return nil, err
	}
	g.setSpanMaps(buildIndex(g.Spans), buildIndex(g.closed))
	return r.b, nil
}

// distinctIDs reports whether no span ID has two entries.
func distinctIDs(spans []SpanEntry) bool {
	if len(spans) <= smallSpans {
		for i := range spans {
			for j := range i {
				if spans[i].ID == spans[j].ID {
					return false
				}
			}
		}
		return true
	}
	return len(buildIndex(spans)) == len(spans)
}

// checkIndexes refuses a state whose name and trace indexes point
// outside its lists, so that no method of the decoded Graph can index out
// of range.
func (g *Graph) checkIndexes() error {
	names := int32(len(g.Names))
	traces := int32(len(g.Traces))
	var links int32
	if g.rare != nil {
		links = int32(len(g.rare.linkTraces))
	}
	name := func(i int32) bool { return i >= noIndex && i < names }
	trace := func(i int32) bool {
		return i == noIndex || (i >= 0 && i < traces) || (i < noIndex && noIndex-1-i < links)
	}
	for i := range g.Spans {
		e := &g.Spans[i]
		if !name(e.Name) || !trace(e.trace) || (!e.Arrived && (!name(e.childName()) || !name(e.linkedBy()))) {
			return fmt.Errorf("%w: span index out of range", ErrState)
		}
	}
	for i := range g.closed {
		if c := &g.closed[i]; !name(c.name) || !trace(c.trace) {
			return fmt.Errorf("%w: closed span index out of range", ErrState)
		}
	}
	for _, d := range g.detachedList() {
		if !name(d.Name) {
			return fmt.Errorf("%w: detached name out of range", ErrState)
		}
	}
	for _, w := range g.pendingWakes() {
		if !name(w.Name) {
			return fmt.Errorf("%w: wake name out of range", ErrState)
		}
	}
	return nil
}
