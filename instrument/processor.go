package instrument

import (
	"github.com/agentledger/agentledger/instrument/internal/ledger"

	"context"
	"sync"

	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/instrument/internal/flush"
	"github.com/agentledger/agentledger/instrument/internal/parked"
)

// AttrLateChild (bool) marks a span that started after its parent span had
// ended, so its parent's invocation.children does not count it. It is
// still exported with its invocation.id and its usage counts; the collector
// reports it under its invocation's anomalies as extra_children.
const AttrLateChild = "invocation.late_child"

// SpanProcessor stamps invocation identity on every span, counts direct
// children, and feeds its Ledger; it passes every span on to the next
// processor (usually the batching, exporting one).
//
// At OnStart a span gets invocation.id from the W3C baggage member
// invocation.id of its parent context; when the context has none, the id
// is inherited from the parent span if this processor tracks it. A span
// that already carries invocation.id keeps it. At OnEnd the span is handed
// to the next processor with invocation.children set: the number of
// sampled direct children of the same invocation that started before it
// ended. OnStart stamps invocation.children = 0 with invocation.id (one
// SetAttributes, so that most spans, which have no children, need nothing
// more); the SDK's ended span cannot be changed, so a span whose count is
// not 0 (or whose stamp was overwritten) is passed on wrapped with its
// count. Only the next processor gets the count: a processor registered
// beside this one on the provider sees the stamp, 0.
type SpanProcessor struct {
	next   sdktrace.SpanProcessor
	ledger *Ledger
	max    int

	lateChildren metric.Int64Counter
	untracked    metric.Int64Counter

	// holders end the model calls the client wrappers hold open for a
	// retry, before a flush or shutdown.
	holders parked.Holders

	// mu guards open, openCount, turns and free.
	mu sync.Mutex
	// open has a record per span started and not yet ended, by span ID
	// (a key of 8 bytes hashes faster than trace and span ID): the records
	// of spans of other traces with the same span ID are chained through
	// spanRecord.sameID. Released at OnEnd; openCount of them, bounded by
	// max.
	open      map[trace.SpanID]*spanRecord
	openCount int
	// turns holds the open roots and continuations (the Tracker's turn
	// spans) by trace and invocation: where a job launched from an ended
	// span is declared when its ancestry has no open span left.
	turns map[turnKey]*spanRecord
	// free holds released records for reuse, so that a span costs no
	// allocation of its own here; at most as many as were open at once.
	free []*spanRecord
}

var _ sdktrace.SpanProcessor = (*SpanProcessor)(nil)

// NewSpanProcessor returns a SpanProcessor that passes spans on to next
// (which may be nil, for a ledger-only setup). Options WithRemoteSettle,
// WithOpenTimeout, WithRetention,
// WithMaxOpenInvocations, WithMaxSpansPerInvocation and WithClosedRecords
// configure its Ledger; WithMaxOpenSpans bounds its per-span bookkeeping;
// WithMeterProvider its internal telemetry. Tests set its clock with
// instrumenttest.WithClock.
func NewSpanProcessor(next sdktrace.SpanProcessor, opts ...SpanProcessorOption) *SpanProcessor {
	cfg := newProcessorConfig(opts)
	meter := cfg.meterProvider.Meter(ScopeName, metric.WithInstrumentationVersion(Version()))
	p := &SpanProcessor{
		next:   next,
		ledger: newLedger(cfg, meter),
		max:    cfg.maxOpenSpans,
		open:   make(map[trace.SpanID]*spanRecord),
		turns:  make(map[turnKey]*spanRecord),
	}
	// Errors from instrument creation leave a usable no-op instrument.
	p.lateChildren, _ = meter.Int64Counter("agentledger.instrument.late_children",
		metric.WithDescription("Spans started after their parent span ended (not in its invocation.children)."),
		metric.WithUnit("{span}"))
	p.untracked, _ = meter.Int64Counter("agentledger.instrument.untracked_spans",
		metric.WithDescription("Spans exported without invocation.children because the open-span limit was reached."),
		metric.WithUnit("{span}"))
	processors.add(p)
	return p
}

// Ledger returns the ledger this processor feeds.
func (p *SpanProcessor) Ledger() *Ledger { return p.ledger }

// OnStart implements sdktrace.SpanProcessor. It finds the span's
// invocation (its own attribute, the baggage, or its parent's record),
// counts it in its parent's record (fromParentLocked) or as a span of a
// new trace (detachedStart), tracks it until OnEnd (trackLocked), tells a
// Tracker or a client wrapper about it (noteOwner), stamps it (stamp), and
// tells the ledger of the spans no count declares (ledger.Ledger.Started).
func (p *SpanProcessor) OnStart(parent context.Context, s sdktrace.ReadWriteSpan) {
	if parent == nil {
		parent = context.Background()
	}
	st := spanStart{sc: s.SpanContext(), psc: s.Parent(), attrs: ledger.ReadStartAttrs(s.Attributes())}
	st.id = st.attrs.ID
	st.local = st.psc.IsValid() && !st.psc.IsRemote()
	if st.id == "" && !st.local {
		// A span with a local parent reads the baggage below, through its
		// parent's record.
		st.id = baggageInvocationID(parent)
	}
	// Only lifecycle spans (which carry a role) and model calls need to
	// know whether the Tracker started them.
	client := s.SpanKind() == trace.SpanKindClient
	ours := (st.attrs.Role != "" || client) && s.InstrumentationScope().Name == ScopeName
	st.ledgered = st.id != "" && st.sc.IsSampled()

	// A span without a local parent (a root, a continuation, a span of a
	// new trace) is counted by nobody: the ledger records it before the
	// span's record is made, so that the record carries the invocation's
	// state without a second pass under the lock.
	if !st.local && st.ledgered {
		st.inv = p.ledger.l.Started(st.id, s, &st.attrs, ledger.StartFacts{})
	}

	p.mu.Lock()
	switch {
	case st.local:
		p.fromParentLocked(parent, &st)
	case st.id != "" && st.attrs.Role == "" && !st.psc.IsValid():
		// A span started with trace.WithNewRoot from the context of a span
		// (rule 4). Lifecycle spans are declared otherwise.
		st.detachedFrom, st.late, st.dropped = p.detachedStart(parent, st.id, st.sc)
	}
	rec := p.trackLocked(s, &st, ours)
	p.mu.Unlock()
	p.noteOwner(parent, ours, client)
	p.stamp(parent, s, rec, &st)
	// A span with a local parent that counts it and no role costs the
	// ledger nothing at its start (ledger.Ledger.Started).
	if st.local && st.ledgered && (st.attrs.Role != "" || !st.counted) {
		if inv := p.ledger.l.Started(st.id, s, &st.attrs, ledger.StartFacts{Counted: st.counted, Late: st.late}); inv != nil && rec != nil {
			p.mu.Lock()
			rec.inv = inv
			p.mu.Unlock()
		}
	}
	if p.next != nil {
		p.next.OnStart(parent, s)
	}
}

// OnEnd implements sdktrace.SpanProcessor.
func (p *SpanProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	sc := s.SpanContext()
	children := ledger.CountAbsent
	var unrecorded, detached int
	var dropped bool
	var known *ledger.Invocation
	p.mu.Lock()
	if rec := p.removeOpen(sc.TraceID(), sc.SpanID()); rec != nil {
		if rec.turn {
			delete(p.turns, turnKey{sc.TraceID(), rec.invocation})
		}
		children, known = rec.children, rec.inv
		unrecorded, detached, dropped = int(rec.unrecorded), int(rec.detached), rec.dropped
		p.release(rec)
	}
	p.mu.Unlock()

	// Rules 3 and 4: the counts are the SpanProcessor's, as children. The
	// ledger reads the span as it is exported, as the collector does.
	counts := ledger.CountsOf(s, children, unrecorded, detached)
	out := counts.Span(s)
	var f ledger.Facts
	p.ledger.l.Read(&f, s, counts)
	if dropped && f.ModelCall && f.Invocation() != "" {
		// A model call recorded without being sampled inside a recording
		// span of its invocation (rule 3): its usage is never exported.
		p.ledger.l.UnrecordedSpan(f.Invocation(), s.Name())
	}
	// The next processor sees the span before the ledger does, so that when
	// Ledger.Wait returns final, every span of the invocation has already
	// been handed to the exporting pipeline (a ForceFlush then exports it).
	if p.next != nil {
		p.next.OnEnd(out)
	}
	if sc.IsSampled() {
		p.ledger.l.Apply(s, &f, known)
	}
}

// Shutdown ends the model calls the client wrappers (otelopenai,
// otelanthropic) hold open for a retry, so that they reach the next
// processor, then shuts down the next processor and closes the ledger:
// open invocations become incomplete with reason shutdown.
func (p *SpanProcessor) Shutdown(ctx context.Context) error {
	p.holders.EndParked()
	p.ledger.l.Shutdown()
	if p.next != nil {
		return p.next.Shutdown(ctx)
	}
	return nil
}

// ForceFlush ends the model calls the client wrappers hold open for a
// retry (a retry that comes later starts a new span), then flushes the
// next processor. An adapter's flush before a result
// (instrument/internal/flush) keeps them open: the runtime goes on.
func (p *SpanProcessor) ForceFlush(ctx context.Context) error {
	if !flush.KeepsParked(ctx) {
		p.holders.EndParked()
	}
	if p.next != nil {
		return p.next.ForceFlush(ctx)
	}
	return nil
}
