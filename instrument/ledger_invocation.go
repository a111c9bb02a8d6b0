package instrument

import (
	"math"
	"slices"
	"sort"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// Reason kinds of the in-process ledger besides the contract's.
const (
	// reasonInvalidCount: an invocation.children or invocation.followups
	// that cannot be proven (CONTRACT.md, v0.1 clarifications).
	reasonInvalidCount = "invalid_count"
	// reasonSpanLimit: the invocation reached WithMaxSpansPerInvocation;
	// spans beyond it are not indexed, so its totals cannot be proven.
	reasonSpanLimit = "span_limit"
	// reasonOpenSpan: a span the ledger saw start and no count declares
	// (a job, a continuation, a late child, a span of a new trace) has not
	// ended.
	reasonOpenSpan = "open_span"
	// anomalyExtraRoot: a second root span (another span ID) of one
	// invocation; a member like any other (CONTRACT.md, v0.1).
	anomalyExtraRoot = "extra_root"
)

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
	refChild   nameRef
	arrived    bool
	remote     bool
	background bool
	// lateEdge: the span is a late child; its parent does not count it.
	lateEdge          bool
	declaredChildren  int // countAbsent: not declared
	arrivedChildren   int
	lateChildren      int // late children that arrived before this span
	declaredFollowups int // countAbsent: not declared
	arrivedFollowups  int
}

// nameRef is a span name held by an invocation: an index into its names,
// 0 for none.
type nameRef int32

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

type modelCall struct {
	start   time.Time
	in, out int64
}

// invocationState is one invocation's running usage and obligations. The
// Ledger's mutex guards it.
type invocationState struct {
	id, session, agent string
	// created is when the ledger first saw a span of it: its open
	// timeout counts from there.
	created time.Time
	// nodes holds one node per span ID seen; at most the ledger's
	// maxSpans. names holds their names (names[0] is ""), one per
	// arrival.
	nodes nodeSet
	names []string
	// open counts unmet obligations: the root (until it arrives), owed
	// children and owed followups.
	open        int
	rootArrived bool
	// remoteSeen: a remote span arrived (else no span is under one).
	remoteSeen bool
	// forgotten: the retention dropped it; a SpanProcessor's record may
	// still point at it.
	forgotten   bool
	rootEnd     time.Time
	latestEnd   time.Time
	settleUntil time.Time
	usage       Usage
	// preRoot holds the model calls that arrived before the root, to
	// split off their after-result part once the root's end is known.
	preRoot []modelCall
	// status is that of the latest summary; pending until the first
	// close. emitted is the latest final or incomplete summary, revision
	// its number, forced the reason that closed it early ("" when its
	// conditions held), dirty whether a span arrived since (a revision is
	// owed).
	status     string
	emitted    Summary
	revision   int
	forced     string
	dirty      bool
	anomalies  []string
	anomalySet map[string]struct{}
	// failures are the "kind:detail" reasons that forbid final (contract
	// v0.2: unattributed turns, malformed input, missing usage, counts
	// that cannot be proven): with all obligations met the invocation
	// closes incomplete with them.
	failures []string
	// unattributedRunning is set while the root of an unattributed turn
	// runs (started, not yet ended).
	unattributedRunning bool

	// openJobs are the background spans started and not yet ended.
	openJobs map[trace.SpanID]JobInfo
	// runningConts and unended are the spans seen to start, not yet
	// ended, that no count declares: continuations, and by name the
	// others (jobs launched with no open span, late children, spans of a
	// new trace, followup_closed). The invocation is not final while any
	// runs (contract rule 6). These maps are made when first needed.
	runningConts map[trace.SpanID]struct{}
	unended      map[trace.SpanID]string

	// done is closed at the first close; made by the first Wait.
	done        chan struct{}
	closedAt    time.Time
	settleTimer Timer
	// prev and next link it in the ledger's open or closed list;
	// sessionPrev and sessionNext among its session's invocations.
	prev, next               *invocationState
	sessionPrev, sessionNext *invocationState
	inSession                bool
}

func newInvocationState(id string, now time.Time) *invocationState {
	return &invocationState{
		id:      id,
		created: now,
		open:    1,
		status:  contract.StatusPending,
	}
}

// nameRef returns a reference to name.
func (inv *invocationState) nameRef(name string) nameRef {
	if inv.names == nil {
		inv.names = make([]string, 1, nodeIndexFrom+1)
	}
	inv.names = append(inv.names, name)
	return nameRef(len(inv.names) - 1)
}

// nameOf returns the name ref stands for.
func (inv *invocationState) nameOf(ref nameRef) string { return inv.names[ref] }

// maxAnomalies bounds the distinct anomaly entries and the distinct
// reasons that forbid final kept per invocation (as in the collector), so
// a stream of oddly named spans cannot grow one invocation without limit.
// Beyond it an invocation that cannot be final stays so.
const maxAnomalies = 64

// fail records a reason that forbids final, once.
func (inv *invocationState) fail(kind, detail string) {
	r := kind + ":" + detail
	if !slices.Contains(inv.failures, r) && len(inv.failures) < maxAnomalies {
		inv.failures = append(inv.failures, r)
	}
}

func (inv *invocationState) anomaly(kind, detail string) {
	a := kind + ":" + detail
	if _, ok := inv.anomalySet[a]; ok || len(inv.anomalies) >= maxAnomalies {
		return
	}
	if inv.anomalySet == nil {
		inv.anomalySet = make(map[string]struct{})
	}
	inv.anomalySet[a] = struct{}{}
	inv.anomalies = append(inv.anomalies, a)
}

// obligationsMet reports conditions 1-3 of the contract, and that no span
// no count declares still runs.
func (inv *invocationState) obligationsMet() bool {
	return inv.rootArrived && inv.open == 0 && !inv.running()
}

// summary returns inv's summary with the given status, revision and
// reasons.
func (inv *invocationState) summary(status string, revision int, reasons []string) Summary {
	s := Summary{
		InvocationID: inv.id,
		SessionID:    inv.session,
		Agent:        inv.agent,
		Status:       status,
		Reasons:      reasons,
		Revision:     revision,
		Usage:        inv.usage,
		Anomalies:    slices.Clone(inv.anomalies),
	}
	if inv.rootArrived && inv.latestEnd.After(inv.rootEnd) {
		s.TimeToFinal = inv.latestEnd.Sub(inv.rootEnd)
	}
	return s
}

// running reports whether a span no count declares is still open.
func (inv *invocationState) running() bool {
	return len(inv.runningConts) > 0 || len(inv.unended) > 0 || inv.unattributedRunning
}

// parentRef returns the node of the parent pid of an arrived span named
// child in trace tid and its index in inv.nodes (-1 when new), and false
// when the parent lies in another trace (rule 3: the child is nobody's
// child).
func (inv *invocationState) parentRef(pid trace.SpanID, tid trace.TraceID, child nameRef) (node, int, bool) {
	i := inv.nodes.find(pid)
	if i < 0 {
		p := newNode(pid, tid)
		p.refChild = child
		return p, i, true
	}
	p := inv.nodes.list[i]
	if p.trace != tid {
		inv.fail(contract.ReasonMalformedParentage, inv.nameOf(child))
		return p, i, false
	}
	return p, i, true
}

// linkRef returns the node of a link's target, and false when the target's
// span ID belongs to a span of another trace: the link names a span that
// is not a member, so it discharges nothing.
func (inv *invocationState) linkRef(target trace.SpanContext) (node, bool) {
	t, ok := inv.nodes.get(target.SpanID())
	if !ok {
		return newNode(target.SpanID(), target.TraceID()), true
	}
	return t, t.trace == target.TraceID()
}

// arriveResult says what arrive did with a span.
type arriveResult uint8

const (
	arriveIndexed arriveResult = iota
	// arriveDuplicate: the same span again; nothing changed.
	arriveDuplicate
	// arriveSpanLimit: the invocation holds maxSpans span IDs; the span
	// was not indexed and the invocation can never be final.
	arriveSpanLimit
	// arriveNotIndexed: the span reuses the span ID of another trace's
	// span; it was not indexed and the invocation can never be final.
	arriveNotIndexed
)

// arrive applies one ended span's facts; maxSpans bounds the nodes.
func (inv *invocationState) arrive(s sdktrace.ReadOnlySpan, f *spanFacts, maxSpans int) arriveResult {
	sc := s.SpanContext()
	sid, tid := sc.SpanID(), sc.TraceID()
	name := s.Name()
	at := inv.nodes.find(sid)
	var n node
	seen := at >= 0
	if seen {
		n = inv.nodes.list[at]
	}
	switch {
	case seen && n.arrived && n.trace == tid:
		return arriveDuplicate // the same span again: it discharges nothing
	case seen && n.arrived && n.trace != tid:
		// Two spans share a span ID (rule 3): the later is not indexed,
		// its usage not summed, and the invocation is never final.
		inv.fail(contract.ReasonSpanIDReused, name)
		return arriveNotIndexed
	case seen && n.trace != tid:
		// What was counted toward this span ID named a span of another
		// trace: it counts for nothing here.
		if n.refChild != 0 {
			inv.fail(contract.ReasonMalformedParentage, inv.nameOf(n.refChild))
		}
		n = newNode(sid, tid)
	case !seen && inv.nodes.len() >= maxSpans:
		if !slices.Contains(inv.failures, reasonSpanLimit) {
			inv.failures = append(inv.failures, reasonSpanLimit)
		}
		return arriveSpanLimit
	case !seen:
		n = newNode(sid, tid)
	}
	n.arrived = true
	n.name = inv.nameRef(name)
	n.remote = f.remote
	inv.remoteSeen = inv.remoteSeen || f.remote
	n.background = f.role == contract.RoleBackground
	inv.usage.Spans++
	if end := s.EndTime(); end.After(inv.latestEnd) {
		inv.latestEnd = end
	}

	switch f.role {
	case contract.RoleRoot:
		if f.unattributed != "" {
			inv.fail(contract.ReasonUnattributedWakeup, f.unattributed)
		}
		if inv.rootArrived {
			inv.anomaly(anomalyExtraRoot, name)
		} else {
			inv.unattributedRunning = false
			inv.rootArrived = true
			inv.rootEnd = s.EndTime()
			inv.open--
			for _, c := range inv.preRoot {
				if c.start.After(inv.rootEnd) {
					inv.usage.AfterResultInputTokens += c.in
					inv.usage.AfterResultOutputTokens += c.out
				}
			}
			inv.preRoot = nil
		}
	case contract.RoleContinuation:
		inv.usage.Continuations++
		delete(inv.runningConts, sid)
	case contract.RoleBackground:
		inv.usage.BackgroundJobs++
		delete(inv.openJobs, sid)
		if f.followups == childrenInvalid {
			inv.fail(reasonInvalidCount, name)
		} else if f.followups >= 0 {
			n.declaredFollowups = f.followups
			if owed := f.followups - n.arrivedFollowups; owed > 0 {
				inv.open += owed
			}
		}
	}
	if len(inv.unended) > 0 {
		delete(inv.unended, sid)
	}

	switch {
	case f.children == childrenInvalid:
		inv.fail(reasonInvalidCount, name)
	case f.children >= 0:
		n.declaredChildren = f.children
		if owed := f.children - n.arrivedChildren; owed > 0 {
			inv.open += owed
		} else if owed < 0 && !f.remote {
			inv.anomaly(contract.AnomalyExtraChildren, name)
		}
	}
	if n.lateChildren > 0 && !f.remote {
		inv.anomaly(contract.AnomalyExtraChildren, name)
	}

	psc := s.Parent()
	if psc.IsValid() {
		inv.arriveUnder(&n, sid, psc, tid, f.late)
	} else if f.late && f.role == contract.RoleBackground {
		// Rule 6: a job started when no span of its invocation was open;
		// no count declares it.
		inv.anomaly(contract.AnomalyOrphanJob, name)
	}
	inv.nodes.put(at, n)
	if n.parent != (trace.SpanID{}) {
		inv.breakCycle(sid)
	}
	inv.applyLinks(s, name)
	if f.op != "" {
		inv.addUsage(s, f)
	}
	return arriveIndexed
}

// arriveUnder counts the arrived span (node n, not yet stored) toward its
// parent psc (rule 1 for late children, rule 3 for malformed parentage).
func (inv *invocationState) arriveUnder(n *node, sid trace.SpanID, psc trace.SpanContext, tid trace.TraceID, late bool) {
	pid := psc.SpanID()
	if pid == sid || psc.TraceID() != tid {
		// Such a span is nobody's child.
		inv.fail(contract.ReasonMalformedParentage, inv.nameOf(n.name))
		return
	}
	p, at, ok := inv.parentRef(pid, tid, n.name)
	if !ok {
		return
	}
	n.parent = pid
	if late {
		n.lateEdge = true
		// Rule 1: a late child is a member but never counted by its
		// parent, whatever the order.
		if !p.arrived {
			p.lateChildren++
		} else if !p.remote {
			inv.anomaly(contract.AnomalyExtraChildren, inv.nameOf(p.name))
		}
		inv.nodes.put(at, p)
		return
	}
	if p.arrived && p.declaredChildren >= 0 {
		if p.arrivedChildren < p.declaredChildren {
			inv.open--
		} else if !p.remote {
			inv.anomaly(contract.AnomalyExtraChildren, inv.nameOf(p.name))
		}
	}
	p.arrivedChildren++
	inv.nodes.put(at, p)
}

// applyLinks discharges the followups the arrived span's links name: at
// most one per target (rule 2), none when the links are malformed (rule
// 3), none for a target of another invocation (foreign_followup, told by
// the ledger's background index before this is called).
func (inv *invocationState) applyLinks(s sdktrace.ReadOnlySpan, name string) {
	links := s.Links()
	if len(links) == 0 {
		return
	}
	lf := checkLinks(s)
	if lf.malformed {
		inv.fail(contract.ReasonMalformedLink, name)
		return
	}
	if lf.duplicate {
		inv.anomaly(contract.AnomalyDuplicateLink, name)
	}
	for i, link := range links {
		if attrString(link.Attributes, contract.AttrLink) != contract.LinkFollowup {
			continue
		}
		target := link.SpanContext.SpanID()
		if lf.duplicate && repeatsFollowup(links[:i], target) {
			continue
		}
		t, ok := inv.linkRef(link.SpanContext)
		if !ok {
			continue
		}
		if t.arrived && t.declaredFollowups >= 0 && t.arrivedFollowups < t.declaredFollowups {
			inv.open--
		}
		t.arrivedFollowups++
		inv.nodes.set(t)
	}
}

// repeatsFollowup reports whether links already hold a followup link to
// target.
func repeatsFollowup(links []sdktrace.Link, target trace.SpanID) bool {
	for _, l := range links {
		if l.SpanContext.SpanID() == target && attrString(l.Attributes, contract.AttrLink) == contract.LinkFollowup {
			return true
		}
	}
	return false
}

// addUsage sums a model call's usage (rule 5: one that did not fail and
// carries no usage makes the invocation incomplete).
func (inv *invocationState) addUsage(s sdktrace.ReadOnlySpan, f *spanFacts) {
	if !usageOperation(f.op) {
		return
	}
	u := &inv.usage
	u.ModelCalls++
	// A count that would overflow its sum is not summed and, like a
	// mistyped one, leaves the totals unproven (the collector's rule).
	for i, sum := range [...]*int64{&u.InputTokens, &u.OutputTokens, &u.CacheReadInputTokens, &u.CacheCreationInputTokens, &u.ReasoningOutputTokens} {
		if f.usage[i] > math.MaxInt64-*sum {
			f.invalidUsage = append(f.invalidUsage, string(usageKeys[i]))
			f.usage[i] = 0
			continue
		}
		*sum += f.usage[i]
	}
	switch {
	case !inv.rootArrived:
		if inv.preRoot == nil {
			inv.preRoot = make([]modelCall, 0, 8)
		}
		inv.preRoot = append(inv.preRoot, modelCall{start: s.StartTime(), in: f.usage[0], out: f.usage[1]})
	case s.StartTime().After(inv.rootEnd):
		u.AfterResultInputTokens += f.usage[0]
		u.AfterResultOutputTokens += f.usage[1]
	}
	for _, k := range f.invalidUsage {
		// Rule 5: a count that cannot be summed leaves the totals unproven.
		// The collector's detail: which attribute, on which span.
		inv.fail(contract.ReasonInvalidUsage, k+" on "+s.Name())
	}
	if !f.hasUsage && !f.failed {
		inv.fail(contract.ReasonUsageMissing, s.Name())
	}
}

// usageOperation reports whether op names a model call
// (contract.DefaultUsageOperations).
func usageOperation(op string) bool {
	switch op {
	case contract.OpChat, contract.OpTextCompletion, contract.OpGenerateContent, contract.OpEmbeddings:
		return true
	}
	return false
}

// maxRemoteWalk bounds the walk up the ancestors of an arriving span.
const maxRemoteWalk = 64

// breakCycle walks up from the arrived span sid; when the walk comes back
// to it, every span of the cycle is reported (rule 3) and made nobody's
// child, undoing what it counted toward its parent. Cycles longer than
// maxRemoteWalk are caught by checkCycles before the invocation closes.
func (inv *invocationState) breakCycle(sid trace.SpanID) {
	self, _ := inv.nodes.get(sid)
	cur := self.parent
	for i := 0; i < maxRemoteWalk; i++ {
		if cur == sid {
			inv.undoCycle(sid)
			return
		}
		n, ok := inv.nodes.get(cur)
		if !ok || !n.arrived || n.parent == (trace.SpanID{}) {
			return
		}
		cur = n.parent
	}
}

// undoCycle detaches every span of the parent cycle through sid.
func (inv *invocationState) undoCycle(sid trace.SpanID) {
	cur := sid
	for {
		m, _ := inv.nodes.get(cur)
		pid := m.parent
		if pid == (trace.SpanID{}) {
			return // back at the start: every member is detached
		}
		inv.fail(contract.ReasonMalformedParentage, inv.nameOf(m.name))
		if !m.lateEdge {
			p, _ := inv.nodes.get(pid)
			p.arrivedChildren--
			if p.arrived && p.declaredChildren >= 0 && p.arrivedChildren < p.declaredChildren {
				inv.open++ // the member's discharge is undone
			}
			inv.nodes.set(p)
		}
		m.parent, m.lateEdge = trace.SpanID{}, false
		inv.nodes.set(m)
		cur = pid
	}
}

// underRemote reports whether the span sid or an arrived in-process
// ancestor is remote.
func (inv *invocationState) underRemote(sid trace.SpanID) bool {
	if !inv.remoteSeen {
		return false
	}
	for i := 0; i < maxRemoteWalk; i++ {
		n, ok := inv.nodes.get(sid)
		if !ok || !n.arrived {
			return false
		}
		if n.remote {
			return true
		}
		if n.parent == (trace.SpanID{}) {
			return false
		}
		sid = n.parent
	}
	return false
}

// checkCycles fails the invocation for every arrived span whose parent
// chain loops (rule 3): such spans meet each other's counts. It visits
// each node once; the ledger calls it only when the invocation is about
// to close. A cycle forms when its last member arrives, and breakCycle
// then walks it whole unless it is longer than maxRemoteWalk: with no
// more nodes than that, no cycle can be left and nothing is visited.
func (inv *invocationState) checkCycles() {
	if inv.nodes.len() <= maxRemoteWalk {
		return
	}
	const (
		unvisited = iota
		onPath
		done
	)
	state := make(map[trace.SpanID]uint8, inv.nodes.len())
	var path []trace.SpanID
	for _, n := range inv.nodes.list {
		start := n.sid
		if !n.arrived || n.parent == (trace.SpanID{}) || state[start] != unvisited {
			continue
		}
		path = path[:0]
		sid := start
		for {
			state[sid] = onPath
			path = append(path, sid)
			cur, _ := inv.nodes.get(sid)
			next, ok := inv.nodes.get(cur.parent)
			if cur.parent == (trace.SpanID{}) || !ok || !next.arrived || state[cur.parent] == done {
				break
			}
			if state[cur.parent] == onPath {
				i := slices.Index(path, cur.parent)
				for _, member := range path[i:] {
					m, _ := inv.nodes.get(member)
					inv.fail(contract.ReasonMalformedParentage, inv.nameOf(m.name))
				}
				break
			}
			sid = cur.parent
		}
		for _, p := range path {
			state[p] = done
		}
	}
}

// openReasons lists what keeps inv open at now, sorted.
func (inv *invocationState) openReasons(now time.Time) []string {
	var reasons []string
	if !inv.rootArrived {
		reasons = append(reasons, contract.ReasonRootMissing)
	}
	reasons = append(reasons, inv.failures...)
	for i := range inv.nodes.list {
		n := &inv.nodes.list[i]
		if !n.arrived {
			continue
		}
		if n.declaredChildren > n.arrivedChildren {
			reasons = append(reasons, contract.ReasonMissingChildren+":"+inv.nameOf(n.name))
		}
		if n.declaredFollowups > n.arrivedFollowups {
			reasons = append(reasons, contract.ReasonOpenFollowup+":"+inv.nameOf(n.name))
		}
	}
	for _, name := range inv.unended {
		reasons = append(reasons, reasonOpenSpan+":"+name)
	}
	if len(inv.runningConts) > 0 {
		reasons = append(reasons, reasonOpenSpan+":"+contract.SpanNameContinuationPrefix)
	}
	if inv.open == 0 && inv.rootArrived && inv.settleUntil.After(now) {
		for i := range inv.nodes.list {
			if n := &inv.nodes.list[i]; n.arrived && n.remote {
				reasons = append(reasons, contract.ReasonRemoteSettling+":"+inv.nameOf(n.name))
			}
		}
	}
	sort.Strings(reasons)
	return slices.Compact(reasons)
}

// closingFailures returns the sorted reasons that forbid final, after the
// cycle check.
func (inv *invocationState) closingFailures() []string {
	inv.checkCycles()
	reasons := slices.Clone(inv.failures)
	sort.Strings(reasons)
	return reasons
}
