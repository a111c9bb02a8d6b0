package ledger

import (
	"context"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/clock"
	"github.com/agentledger/agentledger/internal/ledgerrule"
)

// Ledger is the in-process ledger behind instrument.Ledger (whose doc
// states what it promises): it keeps the running usage of invocations
// and decides their finality by the contract's rule from the spans that
// end in this process.
//
// Its parts, all guarded by its mutex: an Invocation per invocation
// keeps a ledgerrule.Graph, the finality rule the collector runs too
// (internal/ledgerrule; CONTRACT.md v0.10), fed the facts of each ended
// span as exported (invocation.go, facts.go; closing and revising in
// finality.go); the retention (retention.go) holds the open invocations
// by age for the open timeout and eviction, and the closed ones for the
// retention period; the sessionIndex (session.go) lists each session's
// invocations; the backgroundIndex (background.go) tells foreign
// followups; the nameTable (names.go) interns span names; the
// summaryRecord (record.go) answers a late Wait. Spans come in through
// ingest.go, questions through query.go.
type Ledger struct {
	clock    clock.Clock
	settle   time.Duration
	maxSpans int
	// rule configures the contract's reader of spans (internal/ledgerrule).
	rule *ledgerrule.Config
	// graph configures the finality rule (ledgerrule.Graph).
	graph          ledgerrule.GraphConfig
	evictedCount   metric.Int64Counter
	spanLimited    metric.Int64Counter
	recordDropped  metric.Int64Counter
	owingForgotten metric.Int64Counter

	// mu guards all fields below and every invocation's state.
	mu   sync.Mutex
	held retention
	// timeout is the timer of the oldest open invocation's open timeout
	// (nil when none is set).
	timeout    clock.Timer
	sessions   sessionIndex
	background backgroundIndex
	names      nameTable
	// record keeps the latest summaries of forgotten invocations for a
	// late Wait.
	record *summaryRecord
	// keptOwing counts the closed invocations the retention keeps because
	// they still hold work (at most MaxOpenInvocations); forgotten
	// remembers those it forgot nonetheless (owes.go).
	keptOwing int
	forgotten forgottenOwing
	// writtenOff holds what the open timeout wrote off, for the timed-out
	// invocations still held.
	writtenOff map[*Invocation][]owedKey
	down       bool
	// usual is the size of the invocation closed last, which a new
	// invocation's Graph reserves (ledgerrule.Graph.Reserve).
	usual usualSize
}

// usualSize is how many spans and model calls the invocation closed last
// held, bounded.
type usualSize struct {
	spans, calls int
}

// maxUsualCalls bounds the model calls a new invocation reserves room
// for; the Graph bounds the spans.
const maxUsualCalls = 16

// Config configures a Ledger; package instrument fills it from its
// options (WithRemoteSettle, WithOpenTimeout, WithRetention,
// WithMaxOpenInvocations, WithMaxSpansPerInvocation, WithClosedRecords).
type Config struct {
	Clock              clock.Clock
	RemoteSettle       time.Duration
	OpenTimeout        time.Duration
	Retention          time.Duration
	MaxOpenInvocations int
	MaxSpans           int
	ClosedRecords      int
}

// New returns a ledger configured by cfg whose counters meter makes.
func New(cfg Config, meter metric.Meter) *Ledger {
	l := &Ledger{
		clock:      cfg.Clock,
		settle:     cfg.RemoteSettle,
		maxSpans:   min(cfg.MaxSpans, math.MaxInt32), // nodes count in 32 bits
		rule:       ledgerrule.NewConfig(contract.DefaultUsageOperations, min(cfg.MaxSpans, math.MaxInt32)),
		held:       newRetention(cfg),
		sessions:   newSessionIndex(),
		background: make(backgroundIndex),
		record:     newSummaryRecord(cfg.ClosedRecords),
	}
	l.graph = ledgerrule.GraphConfig{MaxSpans: l.maxSpans, Settle: int64(cfg.RemoteSettle)}
	l.evictedCount, _ = meter.Int64Counter("agentledger.instrument.ledger.evicted",
		metric.WithDescription("Invocations closed incomplete because the open-invocation limit was reached."),
		metric.WithUnit("{invocation}"))
	l.spanLimited, _ = meter.Int64Counter("agentledger.instrument.ledger.span_limit",
		metric.WithDescription("Spans not indexed because their invocation reached the per-invocation span limit; the invocation closes incomplete."),
		metric.WithUnit("{span}"))
	l.owingForgotten, _ = meter.Int64Counter("agentledger.instrument.ledger.owing_forgotten",
		metric.WithDescription("Closed invocations forgotten while they still held work of their session (a job running, a followup owed), because as many as WithMaxOpenInvocations were kept already; the session keeps owing (owing_forgotten)."),
		metric.WithUnit("{invocation}"))
	l.recordDropped, _ = meter.Int64Counter("agentledger.instrument.ledger.closed_records_dropped",
		metric.WithDescription("Summaries of forgotten invocations dropped from the bounded record a late Wait answers from."),
		metric.WithUnit("{invocation}"))
	return l
}

// lookup returns the state of id, creating it at now (and evicting the
// oldest open invocation beyond the limit) when needed. l.mu must be
// held.
func (l *Ledger) lookup(id string, now time.Time) *Invocation {
	if inv, ok := l.held.get(id); ok {
		return inv
	}
	for l.held.full() {
		l.evictedCount.Add(context.Background(), 1)
		l.closeLocked(l.held.oldestOpen(), contract.StatusIncomplete, contract.ReasonEvicted, []string{contract.ReasonEvicted}, now)
	}
	inv := newInvocation(id, now)
	inv.g.Reserve(l.usual.spans, l.usual.calls)
	l.held.add(inv)
	l.recreated(inv)
	l.armTimeout(now)
	return inv
}

// armTimeout sets the open-timeout timer for the oldest open invocation
// unless it is set. The timer of an invocation that closed before its
// timeout fires all the same and moves on to the next. l.mu must be held.
func (l *Ledger) armTimeout(now time.Time) {
	oldest := l.held.oldestOpen()
	if l.timeout != nil || oldest == nil || l.down {
		return
	}
	l.timeout = l.clock.AfterFunc(l.held.deadline(oldest).Sub(now), l.timedOut)
}

// timedOut closes, incomplete with open_timeout, every open invocation
// whose open timeout has passed, oldest first.
func (l *Ledger) timedOut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timeout = nil
	if l.down {
		return
	}
	now := l.clock.Now()
	for inv := l.held.timedOut(now); inv != nil; inv = l.held.timedOut(now) {
		l.writeOff(inv, now)
		l.closeForced(inv, contract.ReasonOpenTimeout, now)
	}
	l.armTimeout(now)
}

// sweep forgets the closed invocations whose retention has passed at
// now: each leaves its summary in the bounded record a late Wait answers
// from, and its session and background spans are unlisted. l.mu must be
// held.
func (l *Ledger) sweep(now time.Time) {
	for inv := l.held.expiredFront(now); inv != nil; inv = l.held.expiredFront(now) {
		if l.keepOrForget(inv, now) {
			// It still holds work: kept another retention period.
			l.held.requeue(inv, now)
			continue
		}
		l.held.forget(inv)
		l.released(inv)
		if l.record.add(l.summaryLocked(inv)) {
			l.recordDropped.Add(context.Background(), 1)
		}
		l.sessions.remove(inv)
		l.background.forget(inv)
	}
}

// Shutdown closes every open invocation incomplete with reason shutdown
// and stops all timers.
func (l *Ledger) Shutdown() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.down {
		return
	}
	now := l.clock.Now()
	for inv := l.held.oldestOpen(); inv != nil; inv = l.held.oldestOpen() {
		l.closeForced(inv, contract.ReasonShutdown, now)
	}
	if l.timeout != nil {
		l.timeout.Stop()
		l.timeout = nil
	}
	l.down = true
}
