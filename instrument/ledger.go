package instrument

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/internal/contract"
)

// Usage is the running usage of one invocation: sums over its model-call
// spans (gen_ai.operation.name in contract.DefaultUsageOperations) and
// counts of its lifecycle spans, as far as they have ended in this
// process.
type Usage struct {
	InputTokens              int64
	OutputTokens             int64
	CacheReadInputTokens     int64
	CacheCreationInputTokens int64
	ReasoningOutputTokens    int64
	// AfterResultInputTokens and AfterResultOutputTokens are the part of
	// the sums from model calls that started after the root span ended.
	AfterResultInputTokens  int64
	AfterResultOutputTokens int64
	ModelCalls              int64
	BackgroundJobs          int64
	Continuations           int64
	Spans                   int64
}

// Summary is the ledger's view of one invocation, with the fields of the
// collector's invocation.summary span.
type Summary struct {
	InvocationID string
	SessionID    string
	Agent        string
	// Status is contract.StatusPending, StatusFinal or StatusIncomplete.
	Status string
	// Reasons says, each as "kind:detail", what keeps a pending
	// invocation open or why it closed incomplete.
	Reasons []string
	// Anomalies lists, each as "kind:detail", what did not block finality
	// but a reader must know (extra_children, invalid_usage, late_span,
	// foreign_followup).
	Anomalies []string
	// Revision is 1 for the first final or incomplete status and grows by
	// one for each span that arrived after it; 0 while pending.
	Revision int
	Usage    Usage
	// TimeToFinal is the latest end of any member span minus the root's
	// end (contract.AttrTimeToFinalMS); 0 when nothing ended after the
	// root or the root has not ended.
	TimeToFinal time.Duration
}

// TimeToFinalMS is TimeToFinal in whole milliseconds.
func (s Summary) TimeToFinalMS() int64 { return s.TimeToFinal.Milliseconds() }

// JobInfo describes a background job of a session.
type JobInfo struct {
	InvocationID string
	SpanID       trace.SpanID
	// Name is the background span's name, e.g. "background shell".
	Name    string
	Started time.Time
}

// SessionState says whether a session still owes work to its invocations.
type SessionState struct {
	// OwesWork is true while a job runs, a followup is expected, a
	// continuation runs, or an unattributed turn runs: a runtime must not
	// unload the session then.
	OwesWork bool
	// OpenJobs are background spans started and not yet ended.
	OpenJobs []JobInfo
	// ExpectedFollowups are ended background spans whose promised
	// followups have not arrived.
	ExpectedFollowups []JobInfo
	// RunningContinuations counts continuation spans started and not yet
	// ended.
	RunningContinuations int
	// UnattributedTurns counts turns started with
	// Tracker.StartUnattributed and not yet ended.
	UnattributedTurns int
}

// ErrLedgerShutdown is returned by Wait after the SpanProcessor shut down
// before the invocation closed.
var ErrLedgerShutdown = errors.New("instrument: ledger shut down")

// Ledger keeps the running usage of invocations and decides their
// finality by the contract's rule from the spans that end in this
// process. It is fed by its SpanProcessor; get it with
// SpanProcessor.Ledger. Each arriving span costs constant work (plus a
// walk up its in-process ancestors to find a remote one). Memory is
// bounded: closed invocations are forgotten after the retention, and at
// most WithMaxOpenInvocations stay open.
type Ledger struct {
	clock        Clock
	settle       time.Duration
	openTimeout  time.Duration
	retention    time.Duration
	maxOpen      int
	usageOps     map[string]bool
	evictedCount metric.Int64Counter

	// mu guards all fields below and every invocation's state.
	mu       sync.Mutex
	invs     map[string]*invocationState
	open     *list.List // of *invocationState, by creation
	closed   *list.List // of *invocationState, by close time
	sessions map[string]map[string]struct{}
	// background maps the background spans of remembered invocations to
	// their invocation, to tell foreign followup links.
	background map[trace.SpanID]string
	down       bool
}

// node is the ledger's record of one span ID of an invocation.
type node struct {
	parent            trace.SpanID
	name              string
	role              string
	arrived           bool
	remote            bool
	declaredChildren  int // -1: not declared
	arrivedChildren   int
	declaredFollowups int // -1: not declared
	arrivedFollowups  int
}

type modelCall struct {
	start   time.Time
	in, out int64
}

type invocationState struct {
	id, session, agent string
	nodes              map[trace.SpanID]*node
	// open counts unmet obligations: the root (until it arrives), owed
	// children and owed followups.
	open        int
	rootArrived bool
	rootEnd     time.Time
	latestEnd   time.Time
	settleUntil time.Time
	usage       Usage
	// preRoot holds the model calls that arrived before the root, to
	// split off their after-result part once the root's end is known.
	preRoot    []modelCall
	status     string
	reasons    []string
	anomalies  []string
	anomalySet map[string]struct{}
	// failures are the "kind:detail" reasons that forbid final (contract
	// v0.2: unattributed turns, malformed input, missing usage): with all
	// obligations met the invocation closes incomplete with them.
	failures []string
	revision int
	// unattributedRunning is set while the root of an unattributed turn
	// runs (started, not yet ended).
	unattributedRunning bool

	openJobs     map[trace.SpanID]JobInfo
	runningConts map[trace.SpanID]struct{}

	done         chan struct{}
	elem         *list.Element
	closedAt     time.Time
	settleTimer  Timer
	timeoutTimer Timer
}

func newLedger(cfg config, meter metric.Meter) *Ledger {
	l := &Ledger{
		clock:       cfg.clock,
		settle:      cfg.remoteSettle,
		openTimeout: cfg.openTimeout,
		retention:   cfg.retention,
		maxOpen:     cfg.maxOpenInvocations,
		usageOps:    make(map[string]bool),
		invs:        make(map[string]*invocationState),
		open:        list.New(),
		closed:      list.New(),
		sessions:    make(map[string]map[string]struct{}),
		background:  make(map[trace.SpanID]string),
	}
	for _, op := range contract.DefaultUsageOperations {
		l.usageOps[op] = true
	}
	l.evictedCount, _ = meter.Int64Counter("agentledger.instrument.ledger.evicted",
		metric.WithDescription("Invocations closed incomplete because the open-invocation limit was reached."),
		metric.WithUnit("{invocation}"))
	return l
}

// lookup returns the state of id, creating it (and evicting the oldest
// open invocation beyond the limit) when needed. l.mu must be held.
func (l *Ledger) lookup(id string) *invocationState {
	if inv, ok := l.invs[id]; ok {
		return inv
	}
	for l.open.Len() >= l.maxOpen {
		oldest := l.open.Front().Value.(*invocationState)
		l.evictedCount.Add(context.Background(), 1)
		l.closeLocked(oldest, contract.StatusIncomplete, []string{contract.ReasonEvicted})
	}
	inv := &invocationState{
		id:           id,
		nodes:        make(map[trace.SpanID]*node),
		open:         1,
		status:       contract.StatusPending,
		openJobs:     make(map[trace.SpanID]JobInfo),
		runningConts: make(map[trace.SpanID]struct{}),
		done:         make(chan struct{}),
	}
	inv.elem = l.open.PushBack(inv)
	l.invs[id] = inv
	inv.timeoutTimer = l.clock.AfterFunc(l.openTimeout, func() { l.timedOut(inv) })
	return inv
}

func (l *Ledger) setSession(inv *invocationState, session, agent string) {
	if agent != "" && inv.agent == "" {
		inv.agent = agent
	}
	if session == "" || inv.session != "" {
		return
	}
	inv.session = session
	set, ok := l.sessions[session]
	if !ok {
		set = make(map[string]struct{})
		l.sessions[session] = set
	}
	set[inv.id] = struct{}{}
}

func (inv *invocationState) nodeFor(id trace.SpanID) *node {
	n, ok := inv.nodes[id]
	if !ok {
		n = &node{declaredChildren: -1, declaredFollowups: -1}
		inv.nodes[id] = n
	}
	return n
}

// fail records a reason that forbids final, once.
func (inv *invocationState) fail(kind, detail string) {
	r := kind + ":" + detail
	if !slices.Contains(inv.failures, r) {
		inv.failures = append(inv.failures, r)
	}
}

func (inv *invocationState) anomaly(kind, detail string) {
	a := kind + ":" + detail
	if _, ok := inv.anomalySet[a]; ok {
		return
	}
	if inv.anomalySet == nil {
		inv.anomalySet = make(map[string]struct{})
	}
	inv.anomalySet[a] = struct{}{}
	inv.anomalies = append(inv.anomalies, a)
}

// started records a sampled span of invocation id at its start: the
// session of roots and continuations, running jobs and continuations.
func (l *Ledger) started(id string, s sdktrace.ReadWriteSpan, attrs []attribute.KeyValue) {
	role := attrString(attrs, contract.AttrRole)
	if role == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return
	}
	l.sweep()
	inv := l.lookup(id)
	l.setSession(inv, attrString(attrs, contract.AttrConversationID), attrString(attrs, contract.AttrAgentName))
	sid := s.SpanContext().SpanID()
	switch role {
	case contract.RoleBackground:
		inv.openJobs[sid] = JobInfo{InvocationID: id, SpanID: sid, Name: s.Name(), Started: s.StartTime()}
		l.background[sid] = id
	case contract.RoleContinuation:
		inv.runningConts[sid] = struct{}{}
	case contract.RoleRoot:
		if reason, ok := unattributedReason(attrs); ok && !inv.rootArrived {
			inv.unattributedRunning = true
			inv.fail(contract.ReasonUnattributedWakeup, reason)
		}
	}
}

// unattributedReason returns the value of contract.AttrUnattributed, and
// whether the span carries it (a non-string value reads as "unknown").
func unattributedReason(attrs []attribute.KeyValue) (string, bool) {
	for _, kv := range attrs {
		if kv.Key == contract.AttrUnattributed {
			if kv.Value.Type() == attribute.STRING && kv.Value.AsString() != "" {
				return kv.Value.AsString(), true
			}
			return UnattributedUnknown, true
		}
	}
	return "", false
}

// arrived applies one ended, sampled span; children is its
// invocation.children, or -1 when it has none.
func (l *Ledger) arrived(s sdktrace.ReadOnlySpan, children int) {
	var (
		id, role, op, session, agent string
		unattributed                 string
		followups                    = -1
		remote                       bool
		usage                        [5]int64
		invalid                      []string
	)
	usageKeys := [5]attribute.Key{
		contract.AttrUsageInputTokens, contract.AttrUsageOutputTokens,
		contract.AttrUsageCacheReadTokens, contract.AttrUsageCacheCreateTokens,
		contract.AttrUsageReasoningTokens,
	}
	attrs := s.Attributes()
	for _, kv := range attrs {
		switch kv.Key {
		case contract.AttrInvocationID:
			id = kv.Value.AsString()
		case contract.AttrRole:
			role = kv.Value.AsString()
		case contract.AttrOperationName:
			op = kv.Value.AsString()
		case contract.AttrConversationID:
			session = kv.Value.AsString()
		case contract.AttrAgentName:
			agent = kv.Value.AsString()
		case contract.AttrFollowups:
			if kv.Value.Type() == attribute.INT64 && kv.Value.AsInt64() >= 0 {
				followups = int(kv.Value.AsInt64())
			}
		case contract.AttrRemote:
			remote = kv.Value.Type() == attribute.BOOL && kv.Value.AsBool()
		case contract.AttrUnattributed:
			unattributed = UnattributedUnknown
			if kv.Value.Type() == attribute.STRING && kv.Value.AsString() != "" {
				unattributed = kv.Value.AsString()
			}
		default:
			for i, k := range usageKeys {
				if kv.Key != k {
					continue
				}
				if kv.Value.Type() == attribute.INT64 && kv.Value.AsInt64() >= 0 {
					usage[i] = kv.Value.AsInt64()
				} else {
					invalid = append(invalid, string(k))
				}
			}
		}
	}
	if id == "" {
		return
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return
	}
	l.sweep()
	now := l.clock.Now()
	inv := l.lookup(id)
	sc := s.SpanContext()
	sid := sc.SpanID()
	n := inv.nodeFor(sid)
	if n.arrived {
		return // the SDK ends a span once; a repeat is ignored
	}
	closed := inv.status != contract.StatusPending
	if closed {
		inv.anomaly(contract.AnomalyLateSpan, s.Name())
		inv.revision++
	}
	n.arrived = true
	n.name = s.Name()
	n.role = role
	n.remote = remote
	inv.usage.Spans++
	if end := s.EndTime(); end.After(inv.latestEnd) {
		inv.latestEnd = end
	}

	switch role {
	case contract.RoleRoot:
		if unattributed != "" {
			inv.fail(contract.ReasonUnattributedWakeup, unattributed)
		}
		if !inv.rootArrived {
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
		l.setSession(inv, session, agent)
	case contract.RoleContinuation:
		inv.usage.Continuations++
		delete(inv.runningConts, sid)
		l.setSession(inv, session, agent)
	case contract.RoleBackground:
		inv.usage.BackgroundJobs++
		delete(inv.openJobs, sid)
		l.background[sid] = id
		if followups >= 0 {
			n.declaredFollowups = followups
			if owed := followups - n.arrivedFollowups; owed > 0 {
				inv.open += owed
			}
		}
	}

	if children >= 0 {
		n.declaredChildren = children
		if owed := children - n.arrivedChildren; owed > 0 {
			inv.open += owed
		} else if owed < 0 && !remote {
			inv.anomaly(contract.AnomalyExtraChildren, n.name)
		}
	}

	if psc := s.Parent(); psc.IsValid() && psc.TraceID() == sc.TraceID() {
		n.parent = psc.SpanID()
		p := inv.nodeFor(n.parent)
		if p.arrived && p.declaredChildren >= 0 {
			if p.arrivedChildren < p.declaredChildren {
				inv.open--
			} else if !p.remote {
				inv.anomaly(contract.AnomalyExtraChildren, p.name)
			}
		}
		p.arrivedChildren++
	}

	for _, link := range s.Links() {
		if attrString(link.Attributes, contract.AttrLink) != contract.LinkFollowup {
			continue
		}
		target := link.SpanContext.SpanID()
		if owner, ok := l.background[target]; ok && owner != id {
			inv.anomaly(contract.AnomalyForeignFollowup, n.name)
			continue
		}
		t := inv.nodeFor(target)
		if t.arrived && t.declaredFollowups >= 0 && t.arrivedFollowups < t.declaredFollowups {
			inv.open--
		}
		t.arrivedFollowups++
	}

	if l.usageOps[op] {
		inv.usage.ModelCalls++
		inv.usage.InputTokens += usage[0]
		inv.usage.OutputTokens += usage[1]
		inv.usage.CacheReadInputTokens += usage[2]
		inv.usage.CacheCreationInputTokens += usage[3]
		inv.usage.ReasoningOutputTokens += usage[4]
		switch {
		case !inv.rootArrived:
			inv.preRoot = append(inv.preRoot, modelCall{start: s.StartTime(), in: usage[0], out: usage[1]})
		case s.StartTime().After(inv.rootEnd):
			inv.usage.AfterResultInputTokens += usage[0]
			inv.usage.AfterResultOutputTokens += usage[1]
		}
		for _, k := range invalid {
			inv.anomaly(contract.AnomalyInvalidUsage, k)
		}
	}

	// Condition 4: a remote span's subtree must be quiet for the settle
	// time after its latest arrival. Only in-process arrivals are seen.
	if l.underRemote(inv, n) {
		if until := now.Add(l.settle); until.After(inv.settleUntil) {
			inv.settleUntil = until
		}
	}
	if !closed {
		l.evaluate(inv, now)
	}
}

// maxRemoteWalk bounds the walk up the ancestors of an arriving span.
const maxRemoteWalk = 64

// underRemote reports whether n or an arrived in-process ancestor is
// remote.
func (l *Ledger) underRemote(inv *invocationState, n *node) bool {
	for i := 0; n != nil && n.arrived && i < maxRemoteWalk; i++ {
		if n.remote {
			return true
		}
		if n.parent == (trace.SpanID{}) {
			return false
		}
		n = inv.nodes[n.parent]
	}
	return false
}

// evaluate closes inv as final when the contract's conditions hold, or
// schedules the settle timer. l.mu must be held.
func (l *Ledger) evaluate(inv *invocationState, now time.Time) {
	if inv.status != contract.StatusPending || !inv.rootArrived || inv.open > 0 {
		return
	}
	if wait := inv.settleUntil.Sub(now); wait > 0 {
		if inv.settleTimer != nil {
			inv.settleTimer.Stop()
		}
		inv.settleTimer = l.clock.AfterFunc(wait, func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.evaluate(inv, l.clock.Now())
		})
		return
	}
	if len(inv.failures) > 0 {
		reasons := slices.Clone(inv.failures)
		sort.Strings(reasons)
		l.closeLocked(inv, contract.StatusIncomplete, reasons)
		return
	}
	l.closeLocked(inv, contract.StatusFinal, nil)
}

func (l *Ledger) timedOut(inv *invocationState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if inv.status != contract.StatusPending {
		return
	}
	reasons := append([]string{contract.ReasonOpenTimeout}, l.openReasons(inv)...)
	l.closeLocked(inv, contract.StatusIncomplete, reasons)
}

// closeLocked gives inv its first final or incomplete status. l.mu must be
// held.
func (l *Ledger) closeLocked(inv *invocationState, status string, reasons []string) {
	if inv.status != contract.StatusPending {
		return
	}
	inv.status = status
	inv.reasons = reasons
	inv.revision = 1
	if inv.settleTimer != nil {
		inv.settleTimer.Stop()
	}
	if inv.timeoutTimer != nil {
		inv.timeoutTimer.Stop()
	}
	l.open.Remove(inv.elem)
	inv.closedAt = l.clock.Now()
	inv.elem = l.closed.PushBack(inv)
	close(inv.done)
}

// sweep forgets closed invocations older than the retention. l.mu must be
// held.
func (l *Ledger) sweep() {
	now := l.clock.Now()
	for e := l.closed.Front(); e != nil; e = l.closed.Front() {
		inv := e.Value.(*invocationState)
		if now.Sub(inv.closedAt) < l.retention {
			return
		}
		l.closed.Remove(e)
		l.forget(inv)
	}
}

func (l *Ledger) forget(inv *invocationState) {
	delete(l.invs, inv.id)
	if set, ok := l.sessions[inv.session]; ok {
		delete(set, inv.id)
		if len(set) == 0 {
			delete(l.sessions, inv.session)
		}
	}
	for sid, n := range inv.nodes {
		if n.role == contract.RoleBackground {
			delete(l.background, sid)
		}
	}
	for sid := range inv.openJobs {
		delete(l.background, sid)
	}
}

// openReasons lists what keeps inv open. l.mu must be held.
func (l *Ledger) openReasons(inv *invocationState) []string {
	var reasons []string
	if !inv.rootArrived {
		reasons = append(reasons, contract.ReasonRootMissing)
	}
	reasons = append(reasons, inv.failures...)
	for _, n := range inv.nodes {
		if !n.arrived {
			continue
		}
		if n.declaredChildren > n.arrivedChildren {
			reasons = append(reasons, contract.ReasonMissingChildren+":"+n.name)
		}
		if n.declaredFollowups > n.arrivedFollowups {
			reasons = append(reasons, contract.ReasonOpenFollowup+":"+n.name)
		}
	}
	if inv.open == 0 && inv.rootArrived && inv.settleUntil.After(l.clock.Now()) {
		for _, n := range inv.nodes {
			if n.arrived && n.remote {
				reasons = append(reasons, contract.ReasonRemoteSettling+":"+n.name)
			}
		}
	}
	sort.Strings(reasons)
	return slices.Compact(reasons)
}

func (l *Ledger) summaryLocked(inv *invocationState) Summary {
	s := Summary{
		InvocationID: inv.id,
		SessionID:    inv.session,
		Agent:        inv.agent,
		Status:       inv.status,
		Revision:     inv.revision,
		Usage:        inv.usage,
		Anomalies:    append([]string(nil), inv.anomalies...),
	}
	if inv.status == contract.StatusPending {
		s.Reasons = l.openReasons(inv)
	} else {
		s.Reasons = append([]string(nil), inv.reasons...)
	}
	if inv.rootArrived && inv.latestEnd.After(inv.rootEnd) {
		s.TimeToFinal = inv.latestEnd.Sub(inv.rootEnd)
	}
	return s
}

// Usage returns the running usage of invocation id, and false when the
// ledger does not know it (never seen, or forgotten after retention).
func (l *Ledger) Usage(id string) (Usage, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep()
	inv, ok := l.invs[id]
	if !ok {
		return Usage{}, false
	}
	return inv.usage, true
}

// Summary returns the current summary of invocation id without waiting,
// and false when the ledger does not know it.
func (l *Ledger) Summary(id string) (Summary, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep()
	inv, ok := l.invs[id]
	if !ok {
		return Summary{}, false
	}
	return l.summaryLocked(inv), true
}

// Wait blocks until invocation id is final or incomplete, or ctx ends; it
// then returns the summary (with ctx's error in the latter case). An id
// the ledger does not know yet is waited for: it is closed incomplete
// after the open timeout if no span of it ends.
func (l *Ledger) Wait(ctx context.Context, id string) (Summary, error) {
	l.mu.Lock()
	if l.down {
		inv, ok := l.invs[id]
		var s Summary
		if ok {
			s = l.summaryLocked(inv)
		}
		l.mu.Unlock()
		if ok && s.Status != contract.StatusPending {
			return s, nil
		}
		return s, ErrLedgerShutdown
	}
	l.sweep()
	inv := l.lookup(id)
	l.mu.Unlock()
	select {
	case <-inv.done:
	case <-ctx.Done():
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.summaryLocked(inv), fmt.Errorf("instrument: waiting for invocation %s: %w", id, ctx.Err())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.summaryLocked(inv), nil
}

// Session returns what session still owes its invocations.
func (l *Ledger) Session(session string) SessionState {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep()
	var st SessionState
	for id := range l.sessions[session] {
		inv := l.invs[id]
		for _, j := range inv.openJobs {
			st.OpenJobs = append(st.OpenJobs, j)
		}
		for sid, n := range inv.nodes {
			if n.arrived && n.declaredFollowups > n.arrivedFollowups {
				st.ExpectedFollowups = append(st.ExpectedFollowups,
					JobInfo{InvocationID: id, SpanID: sid, Name: n.name})
			}
		}
		st.RunningContinuations += len(inv.runningConts)
		if inv.unattributedRunning {
			st.UnattributedTurns++
		}
	}
	byID := func(js []JobInfo) {
		sort.Slice(js, func(i, j int) bool {
			if js[i].InvocationID != js[j].InvocationID {
				return js[i].InvocationID < js[j].InvocationID
			}
			return js[i].SpanID.String() < js[j].SpanID.String()
		})
	}
	byID(st.OpenJobs)
	byID(st.ExpectedFollowups)
	st.OwesWork = len(st.OpenJobs) > 0 || len(st.ExpectedFollowups) > 0 || st.RunningContinuations > 0 ||
		st.UnattributedTurns > 0
	return st
}

// shutdown closes every open invocation incomplete with reason shutdown
// and stops all timers.
func (l *Ledger) shutdown() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return
	}
	for e := l.open.Front(); e != nil; e = l.open.Front() {
		inv := e.Value.(*invocationState)
		reasons := append([]string{contract.ReasonShutdown}, l.openReasons(inv)...)
		l.closeLocked(inv, contract.StatusIncomplete, reasons)
	}
	l.down = true
}
