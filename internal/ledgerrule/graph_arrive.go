package ledgerrule

import (
	"math"

	"github.com/agentledger/agentledger/contract"
)

// Graph is one invocation as the finality rule sees it: the span IDs it
// holds and what they declare and discharge, the usage summed, and what
// makes it unprovable or tainted. It is the one implementation of
// CONTRACT.md's rule: membership by span ID, counts (rule 1, children),
// followups (rule 2), malformed parentage and links, cycles, span ID
// reuse (rule 3), remote settle (condition 4, per remote subtree),
// detached and unrecorded spans (v0.6 rules 3 and 4), the span bound
// (v0.6 rule 5), usage (rule 5) and what a span arriving after the close
// changes (rule 4). The in-process ledger and the collector processor
// each hold one per invocation and feed it Spans; neither keeps a second
// copy of any of this.
//
// A Graph is not safe for concurrent use. Its exported fields are for
// reading; only its methods change them.
type Graph struct {
	// Open counts unmet obligations: the root (until it arrives), declared
	// children, followups and detached spans not yet arrived. A new Graph
	// must start with Open 1 (NewGraph, or Init).
	Open int
	// notes holds the unprovable counts, taints and anomalies (Invalid,
	// Taints, Anomalies read them): nil until the first, as for most
	// invocations, so that a Graph carries one pointer instead of three
	// slices.
	notes *graphNotes

	RootArrived  bool
	HasRemote    bool
	SpanLimitHit bool
	// IsShut is set by Shut, at the first close: a span arriving later is
	// a late_span and makes the invocation Dirty (a revision is owed).
	IsShut bool
	Dirty  bool

	// LastArrival is when the latest span was indexed, LastDischarge when
	// an obligation was last discharged; SettleFrom the latest arrival in
	// a remote span's subtree (condition 4). Times are the caller's clock,
	// in nanoseconds.
	LastArrival, LastDischarge, SettleFrom int64

	RootStart, RootEnd  uint64
	MinStart, LatestEnd uint64

	// Spans holds the full state of every span ID while the invocation is
	// open; once shut, only of span IDs that still owe or are owed
	// something (and of referenced spans that never arrived). closed
	// holds the rest after Shut: what duplicates and revisions need. Both
	// are unordered, pointer-free slices with one entry per span ID,
	// searched linearly while small and through maps once large.
	Spans  []SpanEntry
	closed []closedSpan
	// Names interns span names; SpanState.Name refers to them.
	Names []string
	// Traces lists the invocation's trace IDs in arrival order.
	Traces []TraceID
	// rare holds what few invocations need (nil for most, so that a
	// retained Graph stays small).
	rare *graphRare
	// follow holds the followups of the span IDs in Spans that have any
	// (Followups reads them): nil for most.
	follow *followTable

	Usage                   Usage
	AfterInput, AfterOutput int64
	Indexed, Duplicates     int64
	ModelCalls              int64
	BackgroundJobs          int64
	Continuations           int64

	maps *lookupMaps
}

// graphNotes are a Graph's lists of reasons and anomalies.
type graphNotes struct {
	// invalid lists counts that cannot be proven (invalid_count): the
	// invocation is never final.
	invalid []string
	// taints lists what makes the invocation never final although its
	// counts may be met (v0.2 rules 3, 5, 7, v0.5, v0.6): it closes
	// incomplete as soon as conditions 1-4 otherwise hold.
	taints []string
	// anomalies are the sticky anomalies (foreign followups of a final
	// summary are added by AnomaliesFor).
	anomalies []string
}

// notesOf returns g.notes, allocating it on first use.
func (g *Graph) notesOf() *graphNotes {
	if g.notes == nil {
		g.notes = &graphNotes{}
	}
	return g.notes
}

// Invalid lists the counts that cannot be proven (invalid_count): the
// invocation is never final. The caller must not change the list.
func (g *Graph) Invalid() []string {
	if g.notes == nil {
		return nil
	}
	return g.notes.invalid
}

// Taints lists what makes the invocation never final although its counts
// may be met (v0.2 rules 3, 5, 7, v0.5, v0.6): it closes incomplete as
// soon as conditions 1-4 otherwise hold. The caller must not change the
// list.
func (g *Graph) Taints() []string {
	if g.notes == nil {
		return nil
	}
	return g.notes.taints
}

// Anomalies are the sticky anomalies (AnomaliesFor adds a final summary's
// foreign followups). The caller must not change the list.
func (g *Graph) Anomalies() []string {
	if g.notes == nil {
		return nil
	}
	return g.notes.anomalies
}

// graphRare is the part of a Graph few invocations need.
type graphRare struct {
	// linkTraces lists the traces followup links named for targets that
	// had not arrived, when no span of the invocation arrived in them;
	// not traces of the invocation.
	linkTraces []TraceID
	// detached holds the invocation.detached obligations: nil unless a
	// span declared one or linked with detached_from.
	detached []DetachedCount
	// early holds the model calls that arrived before the root.
	early []EarlyCall
	// wakes holds the wake spans whose turn has not arrived
	// (graph_wake.go).
	wakes []pendingWake
}

// rareOf returns g.rare, allocating it on first use.
func (g *Graph) rareOf() *graphRare {
	if g.rare == nil {
		g.rare = &graphRare{}
	}
	return g.rare
}

// detachedList returns the invocation.detached obligations (nil for most).
func (g *Graph) detachedList() []DetachedCount {
	if g.rare == nil {
		return nil
	}
	return g.rare.detached
}

// Init readies a zero Graph for an invocation first seen at now.
func (g *Graph) Init(now int64) {
	g.Open = 1
	g.LastArrival, g.LastDischarge = now, now
}

// HeldIDs is how many span IDs the graph holds, toward the span bound.
func (g *Graph) HeldIDs() int { return len(g.Spans) + len(g.closed) + len(g.detachedList()) }

// AddAnomaly records an anomaly once; past MaxAnomalies the list is cut
// and says so, but a required one is always kept (graph_cut.go).
func (g *Graph) AddAnomaly(a string) { n := g.notesOf(); n.anomalies = addAnomaly(n.anomalies, a) }

// AddInvalid records a count that cannot be proven; past MaxAnomalies
// the reasons say they were cut (graph_cut.go).
func (g *Graph) AddInvalid(r string) { n := g.notesOf(); n.invalid = addReason(n.invalid, r) }

// AddTaint records a reason the invocation can never be final. The list is
// bounded like the anomalies, but never emptied; past the bound it says
// it was cut (graph_cut.go).
func (g *Graph) AddTaint(r string) { n := g.notesOf(); n.taints = addReason(n.taints, r) }

func (g *Graph) discharge(now int64) {
	g.Open--
	g.LastDischarge = now
}

// room reports whether the graph may hold one more span ID (v0.6 rule 5:
// arrived, or only named as a parent or a link target). When it may not,
// the span limit is hit: the invocation can no longer be final.
func (g *Graph) room(cfg *GraphConfig) bool {
	if !g.SpanLimitHit && g.HeldIDs() < cfg.MaxSpans {
		return true
	}
	if !g.SpanLimitHit {
		g.SpanLimitHit = true
		g.AddAnomaly(ReasonSpanLimit)
		g.Dirty = true
	}
	return false
}

// count returns a declared count's value when it is provable.
func count(c Count) (int32, bool) {
	if c.State != CountValid || c.N > math.MaxInt32 {
		return 0, false
	}
	return int32(c.N), true
}

// Arrive indexes one span of the invocation at now, in O(1) amortised
// time (plus its links and, under a remote span, its ancestors), updating
// the open obligation count as ../shared/LEDGER.md describes and applying every rule
// of CONTRACT.md a span's arrival touches.
func (g *Graph) Arrive(s *Span, now int64, cfg *GraphConfig) Result {
	id, name := s.ID, s.Name
	traceIdx := g.traceIndex(s.Trace)
	// self is the span ID's state in Spans, looked up once: -1 when the ID
	// is new to the graph (or closed, and so a duplicate).
	self := g.spanAt(id)
	if prior, ok := g.arrivedTrace(id, self); ok {
		g.Duplicates++
		if prior != traceIdx {
			// Rule 3: the later of two spans sharing an ID is not indexed.
			g.AddTaint(contract.ReasonSpanIDReused + ":" + name)
			g.Dirty = g.Dirty || g.IsShut
			return Result{Outcome: Reused}
		}
		return Result{Outcome: Duplicate}
	}
	// Every span ID held counts toward the bound (v0.6 rule 5): one held
	// already, as a parent or link target, takes no more room.
	if g.SpanLimitHit || (self < 0 && !g.room(cfg)) {
		return Result{Outcome: SpanLimit}
	}
	if g.IsShut {
		g.AddAnomaly(contract.AnomalyLateSpan + ":" + name)
		g.Dirty = true
	}

	var res Result
	g.Indexed++
	g.LastArrival = now
	traceIdx = g.addTrace(s.Trace)
	if g.MinStart == 0 || s.Start < g.MinStart {
		g.MinStart = s.Start
	}
	if s.End > g.LatestEnd {
		g.LatestEnd = s.End
	}

	// A span ID nothing referred to before has no children yet: it cannot
	// close a cycle.
	fresh := self < 0
	if fresh {
		if g.Spans == nil {
			// The first span (often the root) sizes Spans for the
			// children it declares, so reserveSpans need not grow it.
			if n, ok := count(s.Children); ok {
				g.Spans = make([]SpanEntry, 0, max(firstSpans, 1+min(int(n), maxReserve)))
			}
		}
		self = g.appendSpan(id, newSpanState())
	}
	st := &g.Spans[self]
	if st.trace != noIndex && !g.sameTrace(st.trace, traceIdx) {
		// Children named this span as parent, or followup links named it,
		// from another trace before it arrived (v0.6 rule 2): none of them
		// is its child or discharges it.
		if st.ArrivedChildren > 0 || st.lateChildren > 0 {
			g.AddTaint(contract.ReasonMalformedParentage + ":" + g.Name(st.childName()))
			st.ArrivedChildren, st.lateChildren = 0, 0
		}
		if declared, arrived := g.Followups(id); arrived > 0 {
			g.AddTaint(contract.ReasonMalformedLink + ":" + g.Name(st.linkedBy()))
			g.setFollowups(id, declared, 0)
			st.job &^= jobInterrupted
		}
	}
	st.arrive(s.Parent)
	g.turnArrived(id, now)
	st.Name = g.nameIndex(name)
	res.NameIndex = st.Name
	st.trace = traceIdx
	// A remote flag of the wrong type is taken as remote: waiting for
	// settle is the conservative reading.
	if s.Remote {
		st.Remote = true
		g.HasRemote = true
	}
	late := s.LateChild
	if st.lateChildren > 0 && !st.Remote {
		g.AddAnomaly(contract.AnomalyExtraChildren + ":" + name)
	}

	if s.Role == RoleRoot {
		if g.RootArrived {
			g.AddAnomaly(AnomalyExtraRoot + ":" + name)
		} else {
			g.arriveRoot(s, now)
			res.Root = true
		}
	}
	g.taintsOf(s)

	expected := 0 // children declared and not arrived: room to reserve
	if s.Children.Declared() {
		if n, ok := count(s.Children); ok {
			st.DeclaredChildren = n
			if n > st.ArrivedChildren {
				g.Open += int(n - st.ArrivedChildren)
				expected = int(n - st.ArrivedChildren)
			} else if st.ArrivedChildren > n && !st.Remote {
				g.AddAnomaly(contract.AnomalyExtraChildren + ":" + name)
			}
		} else {
			g.AddInvalid(ReasonInvalidCount + ":" + name)
		}
	}

	switch s.Role {
	case RoleBackground:
		g.BackgroundJobs++
		if n, valid := count(s.Followups); valid {
			_, arrived := g.Followups(id)
			g.setFollowups(id, n, arrived)
			if n > arrived {
				g.Open += int(n - arrived)
			}
		} else {
			g.AddInvalid(ReasonInvalidCount + ":" + name)
		}
		if late && s.Parent.IsEmpty() {
			// Rule 6: a job started when nothing of its invocation was open.
			g.AddAnomaly(contract.AnomalyOrphanJob + ":" + name)
		}
		st.job |= jobBackground
		g.noteInterrupted(&st.SpanState)
	case RoleContinuation:
		g.Continuations++
	}
	// st is not used below: reserving, attaching and linking may grow
	// Spans.
	nameIdx := st.Name
	if len(g.detachedList()) > 0 {
		g.arriveDetached(s)
	}
	if s.Detached.Declared() {
		g.declareDetached(s, nameIdx, cfg)
	}
	g.reserveSpans(expected)
	a := arrival{s: s, self: self, fresh: fresh, trace: traceIdx, name: nameIdx, now: now, cfg: cfg}
	if !s.Parent.IsEmpty() {
		g.attachToParent(&a)
	}
	g.applyLinks(&a)
	if s.Role == RoleWake {
		g.arriveWake(s, nameIdx)
	}
	if g.HasRemote && g.underRemote(id) {
		g.SettleFrom = now
	}

	if s.ModelCall {
		res.Call = g.addModelCall(s)
	}
	if g.IsShut {
		g.compactTouched(id, s.Parent, s.Links.All())
	}
	return res
}

// taintsOf applies what a span's own facts forbid (malformed input,
// unattributed turns, unrecorded spans, abandoned followups) and the
// usage cross-check anomaly.
func (g *Graph) taintsOf(s *Span) {
	name := s.Name
	if s.Unattributed {
		g.AddTaint(contract.ReasonUnattributedWakeup + ":" + s.UnattributedReason)
	}
	if s.Malformed != 0 {
		// CONTRACT.md v0.6 rule 1: malformed, never absent.
		for k := Key(0); k < numKeys; k++ {
			if s.Malformed&(1<<k) != 0 {
				g.AddTaint(MalformedReason(k.String(), name))
			}
		}
	}
	if s.LinkMalformed {
		g.AddTaint(LinkMalformedReason(name))
	}
	g.sdkLimitTaints(s)
	g.declarationTaint(s)
	if s.Unrecorded.Declared() {
		if n, ok := count(s.Unrecorded); !ok {
			g.AddInvalid(ReasonInvalidCount + ":" + name)
		} else if n > 0 {
			// v0.6 rule 3: a span of the invocation was never exported.
			g.AddTaint(contract.ReasonNotSampled + ":" + name)
		}
	}
	if s.Abandoned {
		// The followup it closes is discharged, but whether the
		// notification still starts a continuation is unknown (v0.5).
		g.AddTaint(contract.ReasonAbandonedFollowup + ":" + name)
	}
	if s.UsageMismatch {
		// v0.8: the runtime's own usage report of the turn differs from
		// the wire's count; the count stays the usage.
		g.AddAnomaly(contract.AnomalyUsageMismatch + ":" + name)
	}
}

// arriveRoot applies the invocation's first root: condition 1, and the
// after-result split of the model calls that arrived before it.
func (g *Graph) arriveRoot(s *Span, now int64) {
	g.RootArrived = true
	g.discharge(now)
	g.RootStart, g.RootEnd = s.Start, s.End
	if g.rare == nil {
		return
	}
	for _, e := range g.rare.early {
		if e.Start > g.RootEnd {
			g.AfterInput += e.Input
			g.AfterOutput += e.Output
		}
	}
	g.rare.early = nil
	if r := g.rare; r.linkTraces == nil && r.detached == nil && r.wakes == nil {
		// Most graphs kept only early calls: a closed invocation then
		// keeps one object less for the garbage collector to reach.
		g.rare = nil
	}
}

// Taint records that a span of the invocation named name was not
// recorded though it ran inside it, or another reason learned outside the
// invocation's spans; a shut graph owes a revision.
func (g *Graph) Taint(reason string) {
	before := len(g.Taints())
	g.AddTaint(reason)
	if len(g.Taints()) != before && g.IsShut {
		g.Dirty = true
	}
}

// noteInterrupted reports followup_interrupted:<job name> once the job's
// background span arrived and an interrupted followup discharged it,
// whichever came first (v0.7).
func (g *Graph) noteInterrupted(st *SpanState) {
	if st.Arrived && st.job == jobBackground|jobInterrupted {
		g.AddAnomaly(contract.AnomalyFollowupInterrupted + ":" + g.Name(st.Name))
	}
}

// maxRemoteWalk bounds the walk up the ancestors of an arriving span; a
// longer chain reads as under a remote span, the conservative reading.
const maxRemoteWalk = 64

// underRemote reports whether the arrived span id or an arrived ancestor
// is remote (condition 4: its arrival is then the latest in that remote
// span's subtree). Spans arriving later cannot move an earlier arrival
// into a subtree whose latest arrival it would be: a remote ancestor that
// arrives later has its own, later arrival. A chain longer than
// maxRemoteWalk, or one through a span the graph compacted (it keeps no
// parent), reads as remote.
func (g *Graph) underRemote(id SpanID) bool {
	for range maxRemoteWalk {
		i := g.spanAt(id)
		if i < 0 {
			if j := g.closedAt(id); j >= 0 {
				// A compacted span keeps no parent: conservative.
				return true
			}
			return false // an ancestor that has not arrived
		}
		st := &g.Spans[i]
		if !st.Arrived {
			return false
		}
		if st.Remote {
			return true
		}
		p := st.parent()
		if p.IsEmpty() {
			return g.IsShut // a restored closed span keeps no parent either
		}
		id = p
	}
	return true
}
