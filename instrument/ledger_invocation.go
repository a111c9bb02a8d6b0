package instrument

import (
	"github.com/agentledger/agentledger/internal/ledgerrule"
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

type modelCall struct {
	start   time.Time
	in, out int64
}

// invocationState is one invocation's running usage and obligations. The
// Ledger's mutex guards it.
type invocationState struct {
	// The fields that hold pointers come first, and emitted last among
	// them: the garbage collector scans an object only up to its last
	// pointer, and the ledger retains closed invocations.

	id, session, agent string
	// nodes holds one node per span ID seen; at most the ledger's
	// maxSpans. names holds their names, one per arrival (nameList).
	nodes nodeSet
	names nameList
	// preRoot holds the model calls that arrived before the root, to
	// split off their after-result part once the root's end is known; the
	// Ledger lends the buffer (spareCalls) and takes it back once the root
	// arrived.
	preRoot []modelCall
	// prev and next link it in the ledger's open or closed list;
	// sessionPrev and sessionNext among its session's invocations.
	prev, next               *invocationState
	sessionPrev, sessionNext *invocationState
	// created is when the ledger first saw a span of it: its open
	// timeout counts from there.
	created     time.Time
	rootEnd     time.Time
	latestEnd   time.Time
	settleUntil time.Time
	closedAt    time.Time
	anomalies   []string
	anomalySet  map[string]struct{}
	// failures are the "kind:detail" reasons that forbid final (contract
	// v0.2: unattributed turns, malformed input, missing usage, counts
	// that cannot be proven): with all obligations met the invocation
	// closes incomplete with them.
	failures []string

	// openJobs are the background spans started and not yet ended.
	openJobs map[trace.SpanID]JobInfo
	// runningConts and unended are the spans seen to start, not yet
	// ended, that no count declares: continuations, and by name the
	// others (jobs launched with no open span, late children, spans of a
	// new trace, followup_closed). The invocation is not final while any
	// runs (contract rule 6). These maps are made when first needed.
	runningConts map[trace.SpanID]struct{}
	unended      map[trace.SpanID]string
	// detached holds, by span, the detached spans declared and arrived
	// (contract v0.6 rule 4; ledger_detached.go); made when first needed.
	detached map[spanKey]detachedCount

	// done is closed at the first close; made by the first Wait.
	done        chan struct{}
	settleTimer Timer
	// status is that of the latest summary; pending until the first
	// close. emitted is the latest final or incomplete summary, revision
	// its number, forced the reason that closed it early ("" when its
	// conditions held), dirty (below) whether a span arrived since (a
	// revision is owed).
	status  string
	forced  string
	emitted Summary

	revision int
	usage    Usage
	// open counts unmet obligations: the root (until it arrives), owed
	// children and owed followups.
	open        int
	rootArrived bool
	// remoteSeen: a remote span arrived (else no span is under one).
	remoteSeen bool
	// forgotten: the retention dropped it; a SpanProcessor's record may
	// still point at it.
	forgotten bool
	// unattributedRunning is set while the root of an unattributed turn
	// runs (started, not yet ended).
	unattributedRunning bool
	inSession           bool
	// dirty sits with the other flags (see status above): beside revision
	// it would cost 8 bytes of padding, and the struct must stay within
	// 760 bytes, which with the allocator's 8-byte header for objects
	// with pointers above 512 bytes is the 768-byte size class.
	dirty bool
}

// newInvocationState returns the state of invocation id, first seen at
// now; names interns its span names.
func newInvocationState(id string, now time.Time, names *nameTable) *invocationState {
	return &invocationState{
		id:      id,
		created: now,
		names:   nameList{table: names},
		open:    1,
		status:  contract.StatusPending,
	}
}

// nameRef returns a reference to name.
func (inv *invocationState) nameRef(name string) nameRef { return inv.names.add(name) }

// nameOf returns the name ref stands for.
func (inv *invocationState) nameOf(ref nameRef) string { return inv.names.get(ref) }

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

// failReason records a reason already in "kind:detail" form.
func (inv *invocationState) failReason(r string) {
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
	return inv.obligations(time.Time{}, nil).Met()
}

// obligations reduces inv at now to the terms of the finality rule,
// which internal/ledgerrule decides for both halves; failures are the
// reasons that forbid final (closingFailures). Spans seen to start and
// not yet ended count as open obligations.
func (inv *invocationState) obligations(now time.Time, failures []string) ledgerrule.Obligations {
	open := inv.open
	if inv.running() {
		open++
	}
	return ledgerrule.Obligations{
		RootArrived: inv.rootArrived,
		Open:        open,
		Settling:    !now.IsZero() && inv.settleUntil.After(now),
		Tainted:     len(failures) > 0,
	}
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
		if n.arrivedFollowups > 0 {
			// Followup links named this span ID in another trace (v0.6
			// rule 2): none of them discharges it.
			inv.fail(contract.ReasonMalformedLink, name)
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
	inv.usage.Spans++
	if end := s.EndTime(); end.After(inv.latestEnd) {
		inv.latestEnd = end
	}

	if f.unattributed != "" {
		// Read on any span of the invocation, as the collector reads it.
		inv.fail(contract.ReasonUnattributedWakeup, f.unattributed)
	}
	if f.malformed != 0 {
		// CONTRACT.md v0.6 rule 1: malformed, never absent.
		for _, r := range ledgerrule.MalformedReasons(nil, f.malformed, name) {
			inv.failReason(r)
		}
	}
	if f.abandoned {
		// The followup it closes is discharged, but whether the
		// notification still starts a continuation is unknown (v0.5).
		inv.fail(contract.ReasonAbandonedFollowup, name)
	}
	if f.usageMismatch {
		// v0.8: the runtime's own usage report of the turn differs from
		// the wire's count; the count stays the usage.
		inv.anomaly(contract.AnomalyUsageMismatch, name)
	}
	switch f.role {
	case contract.RoleRoot:
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
			// The Ledger takes the buffer back for another invocation.
			inv.preRoot = inv.preRoot[:0]
		}
	case contract.RoleContinuation:
		inv.usage.Continuations++
		delete(inv.runningConts, sid)
	case contract.RoleBackground:
		inv.usage.BackgroundJobs++
		delete(inv.openJobs, sid)
		n.job |= jobBackground
		inv.noteInterrupted(&n)
		if f.followups == childrenInvalid {
			inv.fail(reasonInvalidCount, name)
		} else if f.followups >= 0 {
			n.declaredFollowups = spanCount(f.followups) // at most maxSpans
			if owed := f.followups - int(n.arrivedFollowups); owed > 0 {
				inv.open += owed
			}
		}
	}
	if len(inv.unended) > 0 {
		delete(inv.unended, sid)
	}
	if len(inv.detached) > 0 {
		inv.arriveLinked(spanKey{tid, sid})
	}
	if f.unrecorded != 0 || f.detached != 0 {
		inv.arriveDeclared(spanKey{tid, sid}, n.name, f, maxSpans)
	}

	switch {
	case f.children == childrenInvalid:
		inv.fail(reasonInvalidCount, name)
	case f.children >= 0:
		n.declaredChildren = spanCount(f.children) // at most maxSpans
		if owed := f.children - int(n.arrivedChildren); owed > 0 {
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
		pending := 0
		if at < 0 {
			pending = 1 // n is stored below
		}
		inv.arriveUnder(&n, sid, psc, tid, f.late, maxSpans, pending)
	} else if f.late && f.role == contract.RoleBackground {
		// Rule 6: a job started when no span of its invocation was open;
		// no count declares it.
		inv.anomaly(contract.AnomalyOrphanJob, name)
	}
	inv.nodes.put(at, n)
	if n.parent != (trace.SpanID{}) {
		inv.breakCycle(sid, n.parent)
	}
	inv.applyLinks(s, f, name, maxSpans)
	if f.modelCall {
		inv.addUsage(s, f)
	}
	return arriveIndexed
}

// addUsage sums a model call's usage (rule 5: one that did not fail and
// carries no usage makes the invocation incomplete).
func (inv *invocationState) addUsage(s sdktrace.ReadOnlySpan, f *spanFacts) {
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
	reasons = inv.missingDetached(reasons)
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
