package instrument

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
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
// collector's invocation.summary span. While the invocation is pending it
// is its current state; once it closed, it is the latest summary: the
// first final or incomplete one, or the latest revision.
type Summary struct {
	InvocationID string
	SessionID    string
	Agent        string
	// Status is contract.StatusPending, StatusFinal or StatusIncomplete.
	Status string
	// Reasons says, each as "kind:detail", what keeps a pending
	// invocation open or why it closed incomplete: the contract's kinds,
	// and in process also "open_span:<name>" for a span the ledger saw
	// start, that no count declares, and that has not ended.
	Reasons []string
	// Anomalies lists, each as "kind:detail", what did not block finality
	// but a reader must know (extra_children, invalid_usage, late_span,
	// foreign_followup, duplicate_link, orphan_job).
	Anomalies []string
	// Revision is 1 for the first final or incomplete summary and grows
	// by one for each revision a span arriving later causes (contract
	// rule 4: final only when every condition holds, the remote settle
	// time included); 0 while pending.
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
// bounded: closed invocations are forgotten after the retention, at most
// WithMaxOpenInvocations stay open, and each keeps at most
// WithMaxSpansPerInvocation span IDs (beyond it the invocation can never
// be final: reason span_limit).
//
// The ledger never says final while a span of the invocation it saw
// start is still open and no count declares it (a background job, a
// continuation, an unattributed turn, a late child, a span of a new
// trace), and applies the v0.2 rules of CONTRACT.md: late children never
// discharge a count, a span discharges at most one followup per target,
// malformed parentage or links and reused span IDs fail closed, and a
// model call without usage makes the invocation incomplete.
//
// Its parts: an invocationState per invocation decides finality from its
// spans (ledger_invocation.go, ledger_finality.go); the retention
// (ledger_retention.go) keeps the open invocations by age for the open
// timeout and eviction, and the closed ones for the retention; the
// sessionIndex (ledger_session.go) answers Session.
type Ledger struct {
	clock         Clock
	settle        time.Duration
	openTimeout   time.Duration
	retention     time.Duration
	maxOpen       int
	maxSpans      int
	evictedCount  metric.Int64Counter
	spanLimited   metric.Int64Counter
	recordDropped metric.Int64Counter

	// mu guards all fields below and every invocation's state.
	mu   sync.Mutex
	invs map[string]*invocationState
	// open holds the open invocations by creation, closed the closed
	// ones by close time; timeout is the timer of the oldest open
	// invocation's open timeout (nil when none is set).
	open, closed invocationList
	timeout      Timer
	sessions     sessionIndex
	// background maps the background spans of remembered invocations to
	// their invocation, to tell foreign followup links.
	background map[trace.SpanID]string
	// record keeps the latest summaries of forgotten invocations for a
	// late Wait.
	record *summaryRecord
	down   bool
}

func newLedger(cfg config, meter metric.Meter) *Ledger {
	l := &Ledger{
		clock:       cfg.clock,
		settle:      cfg.remoteSettle,
		openTimeout: cfg.openTimeout,
		retention:   cfg.retention,
		maxOpen:     cfg.maxOpenInvocations,
		maxSpans:    cfg.maxSpans,
		invs:        make(map[string]*invocationState),
		sessions:    newSessionIndex(),
		background:  make(map[trace.SpanID]string),
		record:      newSummaryRecord(cfg.closedRecords),
	}
	l.evictedCount, _ = meter.Int64Counter("agentledger.instrument.ledger.evicted",
		metric.WithDescription("Invocations closed incomplete because the open-invocation limit was reached."),
		metric.WithUnit("{invocation}"))
	l.spanLimited, _ = meter.Int64Counter("agentledger.instrument.ledger.span_limit",
		metric.WithDescription("Spans not indexed because their invocation reached the per-invocation span limit; the invocation closes incomplete."),
		metric.WithUnit("{span}"))
	l.recordDropped, _ = meter.Int64Counter("agentledger.instrument.ledger.closed_records_dropped",
		metric.WithDescription("Summaries of forgotten invocations dropped from the bounded record a late Wait answers from."),
		metric.WithUnit("{invocation}"))
	return l
}

// startFacts is what the SpanProcessor knows of a span at its start
// besides its attributes.
type startFacts struct {
	// counted: the span's parent counts it in its invocation.children.
	counted bool
	// late: the span started after its parent ended.
	late bool
}

// started records a sampled span of invocation id at its start: the
// session of roots and continuations, and every span that no count
// declares (jobs, continuations, unattributed turns, late children, spans
// of a new trace), which the invocation then waits for (contract rule 6).
// A counted span without a role costs nothing here. It returns the
// invocation's state, for the SpanProcessor to hand back with the span's
// children (nil when it did not look it up).
func (l *Ledger) started(id string, s sdktrace.ReadWriteSpan, attrs *startAttrs, sf startFacts) *invocationState {
	role := attrs.role
	if role == "" && sf.counted {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return nil
	}
	now := l.clock.Now()
	l.sweep(now)
	inv := l.lookup(id, now)
	l.setSession(inv, attrs.session, attrs.agent)
	sid := s.SpanContext().SpanID()
	switch role {
	case contract.RoleBackground:
		if inv.openJobs == nil {
			inv.openJobs = make(map[trace.SpanID]JobInfo)
		}
		inv.openJobs[sid] = JobInfo{InvocationID: id, SpanID: sid, Name: s.Name(), Started: s.StartTime()}
		l.background[sid] = id
		if sf.late || attrs.lateChild {
			// No count declares the job (rule 6): it was started when no
			// span of its invocation was open.
			inv.anomaly(contract.AnomalyOrphanJob, s.Name())
		}
	case contract.RoleContinuation:
		if inv.runningConts == nil {
			inv.runningConts = make(map[trace.SpanID]struct{})
		}
		inv.runningConts[sid] = struct{}{}
	case contract.RoleRoot:
		if attrs.unattributed != "" && !inv.rootArrived {
			inv.unattributedRunning = true
			inv.fail(contract.ReasonUnattributedWakeup, attrs.unattributed)
		}
	}
	if !sf.counted && role != contract.RoleRoot && role != contract.RoleContinuation {
		if inv.unended == nil {
			inv.unended = make(map[trace.SpanID]string)
		}
		inv.unended[sid] = s.Name()
	}
	return inv
}

// setSession records the session and agent of inv from a root or
// continuation, the first time they are known. l.mu must be held.
func (l *Ledger) setSession(inv *invocationState, session, agent string) {
	if agent != "" && inv.agent == "" {
		inv.agent = agent
	}
	if session == "" || inv.session != "" {
		return
	}
	inv.session = session
	l.sessions.add(inv)
}

// arrived applies one ended, sampled span s of the SDK (without the
// SpanProcessor's wrapper); children is the invocation.children the
// SpanProcessor counted, countAbsent when it counted none.
func (l *Ledger) arrived(s sdktrace.ReadOnlySpan, children int) {
	f := readFacts(s, children, l.maxSpans)
	l.apply(s, &f, nil)
}

// apply applies one ended, sampled span s whose facts f were read with
// readFacts (outside the ledger's lock). known, when not nil, is the
// state the ledger had for the span's invocation at the span's start (or
// its parent's): it saves the lookup by id while the ledger still holds
// it.
func (l *Ledger) apply(s sdktrace.ReadOnlySpan, f *spanFacts, known *invocationState) {
	if f.id == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return
	}
	now := l.clock.Now()
	l.sweep(now)
	inv := known
	if inv == nil || inv.forgotten || inv.id != f.id {
		inv = l.lookup(f.id, now)
	}
	closed := inv.status != contract.StatusPending
	if f.role == contract.RoleBackground {
		l.background[s.SpanContext().SpanID()] = f.id
	}
	if l.foreignFollowup(s, f.id) {
		inv.anomaly(contract.AnomalyForeignFollowup, s.Name())
	}
	switch inv.arrive(s, f, l.maxSpans) {
	case arriveDuplicate:
		return
	case arriveSpanLimit:
		// Its totals can no longer be proven: it closes at once, as in
		// the collector.
		l.spanLimited.Add(context.Background(), 1)
		if !closed {
			l.closeForced(inv, reasonSpanLimit, now)
		}
		return
	case arriveNotIndexed:
		if !closed {
			l.evaluate(inv, now)
		}
		return
	}
	switch f.role {
	case contract.RoleRoot, contract.RoleContinuation:
		l.setSession(inv, f.session, f.agent)
	}
	// Condition 4: a remote span's subtree must be quiet for the settle
	// time after its latest arrival. Only in-process arrivals are seen.
	if inv.underRemote(s.SpanContext().SpanID()) {
		if until := now.Add(l.settle); until.After(inv.settleUntil) {
			inv.settleUntil = until
		}
	}
	if closed {
		inv.anomaly(contract.AnomalyLateSpan, s.Name())
		inv.dirty = true
		l.revise(inv, now)
		return
	}
	l.evaluate(inv, now)
}

// foreignFollowup reports whether span s of invocation id carries a
// followup link to a background span the ledger knows belongs to another
// invocation. Such a link discharges nothing: the target's node is in the
// other invocation, and this one never indexes it as a member. l.mu must
// be held.
func (l *Ledger) foreignFollowup(s sdktrace.ReadOnlySpan, id string) bool {
	for _, link := range s.Links() {
		if attrString(link.Attributes, contract.AttrLink) != contract.LinkFollowup {
			continue
		}
		if owner, ok := l.background[link.SpanContext.SpanID()]; ok && owner != id {
			return true
		}
	}
	return false
}

// summaryLocked returns inv's current summary: its open state while
// pending, else the latest final or incomplete summary. l.mu must be held.
func (l *Ledger) summaryLocked(inv *invocationState) Summary {
	if inv.status == contract.StatusPending {
		return inv.summary(contract.StatusPending, 0, inv.openReasons(l.clock.Now()))
	}
	s := inv.emitted
	s.Reasons = slices.Clone(s.Reasons)
	s.Anomalies = slices.Clone(s.Anomalies)
	return s
}

// Usage returns the running usage of invocation id, and false when the
// ledger does not know it (never seen, or forgotten after retention).
func (l *Ledger) Usage(id string) (Usage, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(l.clock.Now())
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
	l.sweep(l.clock.Now())
	inv, ok := l.invs[id]
	if !ok {
		return Summary{}, false
	}
	return l.summaryLocked(inv), true
}

// ErrUnknownInvocation is returned by Wait for an invocation the ledger
// has no record of: no span of it was seen, or it was forgotten after the
// retention and dropped from the bounded record of closed invocations
// (WithClosedRecords).
var ErrUnknownInvocation = errors.New("instrument: unknown invocation")

// Wait blocks until invocation id is final or incomplete, or ctx ends; it
// then returns the summary (with ctx's error in the latter case).
//
// Wait never creates state: an id the ledger holds no state for is
// answered at once, from the record of invocations closed and forgotten
// after the retention (bounded by WithClosedRecords), or, when a Tracker
// started the invocation with a root span that was not sampled, as
// incomplete with reason not_sampled (nothing of it is observed, here or
// in the collector); otherwise with ErrUnknownInvocation. Wait on an
// invocation whose root was not sampled answers not_sampled at once even
// when some of its spans were sampled.
func (l *Ledger) Wait(ctx context.Context, id string) (Summary, error) {
	l.mu.Lock()
	inv, ok := l.invs[id]
	if !l.down {
		now := l.clock.Now()
		l.sweep(now)
		inv, ok = l.invs[id]
		if ok && notSampled(id) {
			l.closeLocked(inv, contract.StatusIncomplete, contract.ReasonNotSampled, []string{contract.ReasonNotSampled}, now)
		}
	}
	if !ok {
		rec, recorded := l.record.get(id)
		l.mu.Unlock()
		switch {
		case recorded:
			return rec, nil
		case notSampled(id):
			return Summary{InvocationID: id, Status: contract.StatusIncomplete, Revision: 1,
				Reasons: []string{contract.ReasonNotSampled}}, nil
		case l.down:
			return Summary{}, ErrLedgerShutdown
		}
		return Summary{}, fmt.Errorf("%w %s", ErrUnknownInvocation, id)
	}
	if l.down {
		s := l.summaryLocked(inv)
		l.mu.Unlock()
		if s.Status == contract.StatusPending {
			return s, ErrLedgerShutdown
		}
		return s, nil
	}
	if inv.status != contract.StatusPending {
		defer l.mu.Unlock()
		return l.summaryLocked(inv), nil
	}
	// The channel is made by the first waiter and closed at the close.
	if inv.done == nil {
		inv.done = make(chan struct{})
	}
	done := inv.done
	l.mu.Unlock()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil && inv.status == contract.StatusPending {
		return l.summaryLocked(inv), fmt.Errorf("instrument: waiting for invocation %s: %w", id, err)
	}
	return l.summaryLocked(inv), nil
}

// shutdown closes every open invocation incomplete with reason shutdown
// and stops all timers.
func (l *Ledger) shutdown() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return
	}
	now := l.clock.Now()
	for inv := l.open.front(); inv != nil; inv = l.open.front() {
		l.closeForced(inv, contract.ReasonShutdown, now)
	}
	if l.timeout != nil {
		l.timeout.Stop()
		l.timeout = nil
	}
	l.down = true
}
