package instrument

import (
	"github.com/agentledger/agentledger/instrument/internal/ledger"

	"context"
	"sync"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
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

	// reporter, when set, learns of every span of an invocation handed to
	// next (exportreport.go).
	reporter *ExportReporter

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
	// limits is what the stamps showed of each provider's value length
	// limit (spanids.go).
	limits []valueLimit
	// marks holds, for the open spans flagged recordMarked, the ids to
	// restore and the marks to export (spanids.go).
	marks map[*spanRecord]*ledger.Restored
	// turnsByID indexes the open turns by invocation (the latest of
	// each), where a dropped span no parent declares is counted
	// (drops.go).
	turnsByID map[string]*spanRecord
	// providers are the providers whose spans this processor saw start,
	// with the resource of each, lastProvider the latest (drops.go).
	providers    []trace.TracerProvider
	resources    []*resource.Resource
	lastProvider trace.TracerProvider
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

		reporter: cfg.reporter,
	}
	if p.reporter != nil {
		p.reporter.attach(p.ledger.l, meter)
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
	// The ids the SDK may have cut are read whole from the baggage and
	// the Tracker (spanids.go) before anything is keyed by them.
	restoreIDs(parent, s, &st)
	// Only lifecycle spans (which carry a role) and model calls need to
	// know whether the Tracker started them.
	client := s.SpanKind() == trace.SpanKindClient
	st.modelCall = p.ledger.l.IsModelCall(st.attrs.Operation)
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
	p.noteProviderLocked(s.TracerProvider(), s.Resource())
	// A span the sampler did not sample that no parent or context span
	// counts (drops.go): an open turn of its invocation declares it.
	orphanDrop := !st.sc.IsSampled() && st.id != "" && !st.dropped
	if orphanDrop && p.declareOrphanDropLocked(st.id) {
		orphanDrop = false
	}
	rec := p.trackLocked(s, &st, ours)
	p.mu.Unlock()
	switch {
	case orphanDrop && st.attrs.Role == contract.RoleRoot:
		p.tellLedgerDrop(st.id, s.Name())
	case orphanDrop:
		// No open span of the invocation counts it: it is declared by a
		// span of its own (declaration.go).
		p.declareDrop(st.id, s.Name(), s.Resource(), s.StartTime())
	}
	p.noteOwner(parent, ours, client)
	p.stamp(parent, s, rec, &st)
	if rec != nil && st.id != "" {
		if p.checkStamp(s, &st); st.cut != nil {
			p.mu.Lock()
			p.markLocked(rec, st.cut)
			p.mu.Unlock()
		}
	}
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
	var cut *ledger.Restored
	p.mu.Lock()
	if rec := p.removeOpen(sc.TraceID(), sc.SpanID()); rec != nil {
		if rec.turn {
			delete(p.turns, turnKey{sc.TraceID(), rec.invocation})
			p.unindexTurnLocked(rec)
		}
		children, known = rec.children, rec.inv
		unrecorded, detached, dropped = int(rec.unrecorded), int(rec.detached), rec.has(recordDropped)
		if rec.has(recordMarked) {
			cut = p.marks[rec]
			delete(p.marks, rec)
		}
		p.release(rec)
	}
	p.mu.Unlock()

	// Rules 3 and 4: the counts are the SpanProcessor's, as children. The
	// ledger reads the span as it is exported, as the collector does.
	counts := ledger.CountsOf(s, children, unrecorded, detached)
	if cut != nil {
		counts = counts.Restore(cut)
	}
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
		if p.reporter != nil && sc.IsSampled() && f.Invocation() != "" {
			p.reporter.handed(sc, f.Invocation())
		}
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
	if p.reporter != nil && p.next != nil {
		// The spans the queue dropped are known once it is flushed, and
		// reported before the ledger closes.
		p.flushAndSweep(ctx)
	}
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
	if p.next == nil {
		return nil
	}
	if p.reporter != nil {
		return p.flushAndSweep(ctx)
	}
	return p.next.ForceFlush(ctx)
}

// flushAndSweep flushes the next processor and, when the flush succeeded,
// reports the spans handed on before it that were never exported: the
// queue dropped them (exportreport.go).
func (p *SpanProcessor) flushAndSweep(ctx context.Context) error {
	mark := p.reporter.mark()
	if err := p.next.ForceFlush(ctx); err != nil {
		return err
	}
	p.reporter.sweep(mark)
	return nil
}
