package ledgerrule

import (
	"math"
	"slices"
	"sort"
	"unsafe"

	"github.com/agentledger/agentledger/contract"
)

// Obligations reduces the graph at now to the terms of the finality rule;
// extraOpen counts obligations only the caller sees (the in-process
// ledger's spans seen to start and not yet ended). cfg nil reads as not
// settled when the graph has a remote span.
func (g *Graph) Obligations(now int64, extraOpen int, cfg *GraphConfig) Obligations {
	return Obligations{
		RootArrived: g.RootArrived,
		Open:        g.Open + extraOpen,
		Unprovable:  len(g.Invalid()) > 0 || g.SpanLimitHit,
		Settling:    !g.Settled(now, cfg),
		Tainted:     len(g.Taints()) > 0,
	}
}

// Settled reports condition 4: every remote span's subtree had its latest
// arrival at least Settle ago.
func (g *Graph) Settled(now int64, cfg *GraphConfig) bool {
	return !g.HasRemote || (cfg != nil && now-g.SettleFrom >= cfg.Settle)
}

// SettleDue is when condition 4 will hold if nothing else arrives in a
// remote subtree; without a remote span, Settle after the latest arrival
// (when a half that batches revisions next looks).
func (g *Graph) SettleDue(cfg *GraphConfig) int64 {
	from := g.LastArrival
	if g.HasRemote {
		from = g.SettleFrom
	}
	if cfg.Settle > 0 && from > math.MaxInt64-cfg.Settle {
		return math.MaxInt64
	}
	return from + cfg.Settle
}

// Resettle restarts condition 4 at now for every remote subtree: after a
// restart nothing could be seen arriving while the half was down.
func (g *Graph) Resettle(now int64) {
	if g.HasRemote {
		g.SettleFrom = max(g.SettleFrom, now)
	}
}

// Reasons lists why the invocation is not final, each "kind:detail",
// deterministic in order: root_missing, then open obligations and settling
// remote spans sorted, then unprovable counts and taints sorted, then
// span_limit. extra are obligations only the caller sees, sorted in with
// the open ones.
func (g *Graph) Reasons(now int64, cfg *GraphConfig, extra ...string) []string {
	var out []string
	if !g.RootArrived {
		out = append(out, contract.ReasonRootMissing)
	}
	settling := !g.Settled(now, cfg)
	obl := append([]string(nil), extra...)
	for _, st := range g.Spans {
		if !st.Arrived {
			continue
		}
		if st.DeclaredChildren > st.ArrivedChildren {
			obl = append(obl, contract.ReasonMissingChildren+":"+g.Name(st.Name))
		}
		if declared, arrived := g.Followups(st.ID); declared > arrived {
			obl = append(obl, contract.ReasonOpenFollowup+":"+g.Name(st.Name))
		}
		if st.Remote && settling {
			obl = append(obl, contract.ReasonRemoteSettling+":"+g.Name(st.Name))
		}
	}
	if settling {
		for _, c := range g.closed {
			if c.flags&closedRemote != 0 {
				obl = append(obl, contract.ReasonRemoteSettling+":"+g.Name(c.name))
			}
		}
	}
	for _, d := range g.detachedList() {
		if d.Declared > d.Arrived {
			obl = append(obl, contract.ReasonMissingDetached+":"+g.Name(d.Name))
		}
	}
	obl = g.runningTurnReasons(obl)
	sort.Strings(obl)
	out = append(out, slices.Compact(obl)...)
	problems := append(slices.Clone(g.Invalid()), g.Taints()...)
	sort.Strings(problems)
	out = append(out, slices.Compact(problems)...) // reasons_cut may be in both
	if g.SpanLimitHit {
		out = append(out, ReasonSpanLimit)
	}
	return out
}

// AnomaliesFor lists the sticky anomalies and, for a final summary,
// foreign followups: followup links whose target is not a member of this
// invocation (it belongs to another one, so the link discharged nothing).
// Before final a missing target may simply not have arrived yet, so it is
// not reported.
func (g *Graph) AnomaliesFor(final bool) []string {
	out := slices.Clone(g.Anomalies())
	for _, st := range g.Spans {
		if !final {
			break
		}
		if _, arrived := g.Followups(st.ID); !st.Arrived && arrived > 0 {
			a := contract.AnomalyForeignFollowup + ":" + g.Name(st.linkedBy())
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	sort.Strings(out)
	return out
}

// compact moves an arrived span that owes nothing from Spans to closed.
func (g *Graph) compact(id SpanID) {
	i := g.spanAt(id)
	if i < 0 || !g.Spans[i].Arrived || g.owes(&g.Spans[i]) {
		return
	}
	g.appendClosed(g.closedForm(&g.Spans[i]))
	g.removeSpan(i)
	g.dropFollowups(id)
}

// closedForm is the compact record of an arrived span that owes nothing.
func (g *Graph) closedForm(e *SpanEntry) closedSpan {
	c := closedSpan{id: e.ID, up: e.up, trace: e.trace, name: e.Name}
	if e.Remote {
		c.flags |= closedRemote
	}
	if e.DeclaredChildren >= 0 {
		c.flags |= closedDeclaredChildren
	}
	if declared, _ := g.Followups(e.ID); declared >= 0 {
		c.flags |= closedDeclaredFollowups
	}
	if e.job&jobBackground != 0 {
		c.flags |= closedBackground
	}
	return c
}

// Shut runs at the first close: every arrived span that owes nothing
// keeps only its compact record, and Spans is reallocated to what is left
// so its memory is released (nil when nothing is left). Spans arriving
// later are late spans; each leaves the graph Dirty.
func (g *Graph) Shut() {
	g.IsShut = true
	// The union-find links are kept as they are: a late span's find
	// compresses the paths it walks, and most closed invocations see none.
	keep := 0
	for i := range g.Spans {
		if e := &g.Spans[i]; !e.Arrived || g.owes(e) {
			keep++
		}
	}
	closed := make([]closedSpan, len(g.closed), len(g.closed)+len(g.Spans)-keep)
	copy(closed, g.closed)
	var left []SpanEntry // nil when nothing owes: most closes
	if keep > 0 {
		left = make([]SpanEntry, 0, keep)
	}
	for i := range g.Spans {
		if e := &g.Spans[i]; e.Arrived && !g.owes(e) {
			closed = append(closed, g.closedForm(e))
			g.dropFollowups(e.ID)
		} else {
			left = append(left, *e)
		}
	}
	g.Spans, g.closed = left, closed
	// The name and trace lookups are rebuilt if a late span needs them.
	if m := g.maps; m != nil {
		m.names, m.traces, m.linkTraces = nil, nil, nil
	}
	g.setSpanMaps(buildIndex(g.Spans), buildIndex(g.closed))
}

// compactTouched compacts, after the close, what indexing one late span
// may have left owing nothing: the span, its parent and its link targets.
func (g *Graph) compactTouched(id, parent SpanID, links []Link) {
	g.compact(id)
	if !parent.IsEmpty() {
		g.compact(parent)
	}
	for _, l := range links {
		g.compact(l.Span)
	}
}

// HeldBackground calls fn for every arrived background span the graph
// holds (in full or compacted).
func (g *Graph) HeldBackground(fn func(SpanID)) {
	for i := range g.Spans {
		if g.Spans[i].job&jobBackground != 0 {
			fn(g.Spans[i].ID)
		}
	}
	for i := range g.closed {
		if g.closed[i].flags&closedBackground != 0 {
			fn(g.closed[i].id)
		}
	}
}

// Sizes for ApproxBytes.
const (
	sizeString   = int64(unsafe.Sizeof(""))
	sizeMapEntry = 48 // a Go map's cost per entry beyond key and value, rounded up
)

// ApproxBytes estimates the memory the graph holds beyond its own struct:
// every slice at its capacity, the strings it keeps, its lookup maps at a
// per-entry cost. Not counted: what Go's allocator rounds up and map
// buckets beyond sizeMapEntry. It grows with every byte a sender
// controls (names, spans, links), so a half can bound its state in bytes.
func (g *Graph) ApproxBytes() int64 {
	n := int64(cap(g.Spans))*int64(unsafe.Sizeof(SpanEntry{})) +
		int64(cap(g.closed))*int64(unsafe.Sizeof(closedSpan{})) +
		int64(cap(g.Traces))*int64(unsafe.Sizeof(TraceID{}))
	n += stringsBytes(g.Names)
	if g.notes != nil {
		n += int64(unsafe.Sizeof(graphNotes{})) + stringsBytes(g.notes.invalid) + stringsBytes(g.notes.taints) + stringsBytes(g.notes.anomalies)
	}
	if r := g.rare; r != nil {
		n += int64(unsafe.Sizeof(graphRare{})) +
			int64(cap(r.linkTraces))*int64(unsafe.Sizeof(TraceID{})) +
			int64(cap(r.detached))*int64(unsafe.Sizeof(DetachedCount{})) +
			int64(cap(r.early))*int64(unsafe.Sizeof(EarlyCall{}))
	}
	if t := g.follow; t != nil {
		n += int64(unsafe.Sizeof(followTable{})) + int64(cap(t.entries))*int64(unsafe.Sizeof(spanFollowups{})) +
			int64(len(t.index))*(8+4+sizeMapEntry)
	}
	if m := g.maps; m != nil {
		n += int64(unsafe.Sizeof(lookupMaps{}))
		n += int64(len(m.names)) * (sizeString + 4 + sizeMapEntry)
		n += int64(len(m.traces)+len(m.linkTraces)) * (int64(unsafe.Sizeof(TraceID{})) + 4 + sizeMapEntry)
		n += int64(len(m.spans)+len(m.closed)) * (8 + 4 + sizeMapEntry)
	}
	return n
}

// stringsBytes is a string slice's headers at its capacity and its
// strings' bytes.
func stringsBytes(l []string) int64 {
	n := int64(cap(l)) * sizeString
	for _, s := range l {
		n += int64(len(s))
	}
	return n
}

// CompactedSpans is how many arrived span IDs a shut graph keeps only
// in compact form.
func (g *Graph) CompactedSpans() int { return len(g.closed) }
