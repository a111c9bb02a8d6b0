package instrument

import (
	"context"
	"math"
	"reflect"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
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

type turnKey struct {
	trace      trace.TraceID
	invocation string
}

// spanRecord is the per-span bookkeeping between OnStart and OnEnd. It is
// reused once the span ended, so nothing may keep it past OnEnd.
type spanRecord struct {
	invocation string
	children   int
	span       sdktrace.ReadWriteSpan
	// trace is the span's trace; sameID the record of another open span
	// with the same span ID in another trace, or nil.
	trace  trace.TraceID
	sameID *spanRecord
	// parent is the span's parent in the same trace, when local.
	parent trace.SpanID
	// bagCtx is the context the span's latest child started from, when it
	// is a pointer, and bagID the invocation id in its baggage: the
	// children of a span most often start from one context, whose
	// baggage (immutable, as the context) is then read once.
	bagCtx context.Context
	bagID  string
	// turn: the span is registered in turns.
	turn bool
	// dropped: the span is not sampled and its parent (or context span)
	// counts it in invocation.unrecorded; OnEnd tells the ledger when it
	// is a model call.
	dropped bool
	// unrecorded and detached count the span's direct children of its
	// invocation that were not sampled, and the spans started from its
	// context as roots of new traces (contract v0.6 rules 3 and 4); OnEnd
	// adds them to the span when not 0. They fit beside the flags, so
	// that a record stays in its size class; unrecorded saturates (any
	// value above 0 means the same), detached is bounded by the spans a
	// process tracks.
	unrecorded uint16
	detached   int32
	// inv is the ledger's state of the span's invocation, when known at
	// its start: OnEnd hands it back so that the ledger need not look the
	// invocation up by id.
	inv *invocationState
	// stamp holds the attributes OnStart adds (invocation.id and a
	// provisional invocation.children of 0), so that SetAttributes needs
	// no slice of its own; the SDK copies them.
	stamp [2]attribute.KeyValue
}

// newRecord returns a cleared record. p.mu must be held.
func (p *SpanProcessor) newRecord() *spanRecord {
	if n := len(p.free); n > 0 {
		rec := p.free[n-1]
		p.free = p.free[:n-1]
		return rec
	}
	return &spanRecord{}
}

// lookupOpen returns the record of the open span sid of trace tid, or
// nil. p.mu must be held.
func (p *SpanProcessor) lookupOpen(tid trace.TraceID, sid trace.SpanID) *spanRecord {
	for rec := p.open[sid]; rec != nil; rec = rec.sameID {
		if rec.trace == tid {
			return rec
		}
	}
	return nil
}

// addOpen indexes rec, the record of span sid of trace rec.trace; it
// replaces the record of a span with the same IDs (which then ends
// unrecorded). p.mu must be held.
func (p *SpanProcessor) addOpen(sid trace.SpanID, rec *spanRecord) {
	p.removeOpen(rec.trace, sid)
	rec.sameID = p.open[sid]
	p.open[sid] = rec
	p.openCount++
}

// removeOpen unindexes and returns the record of the open span sid of
// trace tid, or nil. p.mu must be held.
func (p *SpanProcessor) removeOpen(tid trace.TraceID, sid trace.SpanID) *spanRecord {
	var prev *spanRecord
	for rec := p.open[sid]; rec != nil; prev, rec = rec, rec.sameID {
		if rec.trace != tid {
			continue
		}
		switch {
		case prev != nil:
			prev.sameID = rec.sameID
		case rec.sameID != nil:
			p.open[sid] = rec.sameID
		default:
			delete(p.open, sid)
		}
		rec.sameID = nil
		p.openCount--
		return rec
	}
	return nil
}

// baggageID returns the invocation id in the baggage of ctx, the context
// a child of rec's span starts from. It keeps the answer for the next
// child started from the same context; only a context that is a pointer
// is kept (comparing it cannot panic). p.mu must be held.
func (rec *spanRecord) baggageID(ctx context.Context) string {
	if rec.bagCtx != nil && rec.bagCtx == ctx {
		return rec.bagID
	}
	id := baggageInvocationID(ctx)
	if reflect.TypeOf(ctx).Kind() == reflect.Pointer {
		rec.bagCtx, rec.bagID = ctx, id
	}
	return id
}

// baggageInvocationID returns the invocation id in ctx's baggage, or "".
func baggageInvocationID(ctx context.Context) string {
	return baggage.FromContext(ctx).Member(contract.BaggageInvocationID).Value()
}

// noteUnrecorded counts a child of rec's span that was not recorded.
// p.mu must be held.
func (rec *spanRecord) noteUnrecorded() {
	if rec.unrecorded < math.MaxUint16 {
		rec.unrecorded++
	}
}

// release clears rec and keeps it for reuse. p.mu must be held.
func (p *SpanProcessor) release(rec *spanRecord) {
	*rec = spanRecord{}
	p.free = append(p.free, rec)
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

// OnStart implements sdktrace.SpanProcessor.
func (p *SpanProcessor) OnStart(parent context.Context, s sdktrace.ReadWriteSpan) {
	if parent == nil {
		parent = context.Background()
	}
	sc := s.SpanContext()
	attrs := readStartAttrs(s.Attributes())
	id := attrs.id
	psc := s.Parent()
	local := psc.IsValid() && !psc.IsRemote()
	if id == "" && !local {
		// A span with a local parent reads the baggage below, through its
		// parent's record.
		id = baggageInvocationID(parent)
	}
	// Only lifecycle spans (which carry a role) and model calls need to
	// know whether the Tracker started them.
	client := s.SpanKind() == trace.SpanKindClient
	ours := (attrs.role != "" || client) && s.InstrumentationScope().Name == ScopeName
	ledgered := id != "" && sc.IsSampled()

	// A span without a local parent (a root, a continuation, a span of a
	// new trace) is counted by nobody: the ledger records it before the
	// span's record is made, so that the record carries the invocation's
	// state without a second pass under the lock.
	var inv *invocationState
	if !local && ledgered {
		inv = p.ledger.started(id, s, &attrs, startFacts{})
	}

	var late, counted, dropped bool
	var detachedFrom trace.SpanContext
	var rec *spanRecord
	p.mu.Lock()
	if !local && id != "" && attrs.role == "" && !psc.IsValid() {
		// A span started with trace.WithNewRoot from the context of a span
		// (rule 4). Lifecycle spans are declared otherwise.
		detachedFrom, late, dropped = p.detachedStart(parent, id, sc)
	}
	if local {
		if prec := p.lookupOpen(psc.TraceID(), psc.SpanID()); prec != nil {
			if id == "" {
				id = prec.baggageID(parent)
				ledgered = id != "" && sc.IsSampled()
			}
			if id == "" {
				id = prec.invocation
				ledgered = sc.IsSampled()
			}
			if sc.IsSampled() && id == prec.invocation {
				prec.children++
				counted = true
				inv = prec.inv
			} else if id != "" && id == prec.invocation && prec.span.SpanContext().IsSampled() {
				// Recorded, never exported (rule 3): the parent declares it.
				prec.noteUnrecorded()
				dropped = true
			}
		} else {
			if id == "" {
				id = baggageInvocationID(parent)
				ledgered = id != "" && sc.IsSampled()
			}
			// The parent is not tracked: it ended already (a late child),
			// or it belongs to a provider without this processor.
			if ps, ok := trace.SpanFromContext(parent).(sdktrace.ReadOnlySpan); ok &&
				ps.SpanContext().SpanID() == psc.SpanID() && !ps.EndTime().IsZero() {
				pid := readStartAttrs(ps.Attributes()).id
				if id == "" {
					id = pid
					ledgered = id != "" && sc.IsSampled()
				}
				late = pid != "" && pid == id
			}
		}
	}
	tracked := p.openCount < p.max
	if tracked {
		rec = p.newRecord()
		rec.invocation, rec.span, rec.inv, rec.trace = id, s, inv, sc.TraceID()
		rec.dropped = dropped
		if local {
			rec.parent = psc.SpanID()
		}
		if ours && id != "" && (attrs.role == contract.RoleRoot || attrs.role == contract.RoleContinuation) {
			rec.turn = true
			p.turns[turnKey{sc.TraceID(), id}] = rec
		}
		p.addOpen(sc.SpanID(), rec)
	}
	p.mu.Unlock()
	if ours {
		// A Tracker's span: tell the Tracker its pipeline has this
		// processor (it says so loudly when none answers).
		if probe, ok := parent.Value(probeKey{}).(*startProbe); ok {
			probe.processor = p
		}
	} else if client {
		// A model call a wrapper may hold open for a retry.
		if h := parked.HolderFromContext(parent); h != nil {
			p.holders.Add(h)
		}
	}

	if tracked {
		// invocation.children is stamped 0 now, in the same call as
		// invocation.id: OnEnd passes a span whose count stayed 0 on as
		// it is, and wraps the others with their count.
		stamp := rec.stamp[:0]
		if id != "" && id != attrs.id {
			stamp = append(stamp, attribute.String(contract.AttrInvocationID, id))
		}
		stamp = append(stamp, attribute.Int(contract.AttrChildren, 0))
		s.SetAttributes(stamp...)
	} else {
		// Without invocation.children nobody declares this span's
		// children, so it is marked remote: the processor and the ledger
		// then wait remote_settle for its subtree instead of calling the
		// invocation final while a child may still come.
		p.untracked.Add(parent, 1)
		if id != "" {
			s.SetAttributes(attribute.String(contract.AttrInvocationID, id), attribute.Bool(contract.AttrRemote, true))
		}
	}
	if late {
		s.SetAttributes(attribute.Bool(AttrLateChild, true))
		p.lateChildren.Add(parent, 1)
	}
	if detachedFrom.IsValid() {
		s.AddLink(trace.Link{SpanContext: detachedFrom,
			Attributes: []attribute.KeyValue{attribute.String(contract.AttrLink, contract.LinkDetachedFrom)}})
	}
	// A span with a local parent that counts it and no role costs the
	// ledger nothing at its start (Ledger.started).
	if local && ledgered && (attrs.role != "" || !counted) {
		if inv := p.ledger.started(id, s, &attrs, startFacts{counted: counted, late: late}); inv != nil && tracked {
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
	children := countAbsent
	var unrecorded, detached int
	var dropped bool
	var known *invocationState
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
	counts := countsOf(s, children, unrecorded, detached)
	out := counts.span(s)
	var f spanFacts
	readFacts(&f, s, counts, p.ledger.rule)
	if dropped && f.ModelCall && f.id != "" {
		// A model call recorded without being sampled inside a recording
		// span of its invocation (rule 3): its usage is never exported.
		p.ledger.unrecordedSpan(f.id, s.Name())
	}
	// The next processor sees the span before the ledger does, so that when
	// Ledger.Wait returns final, every span of the invocation has already
	// been handed to the exporting pipeline (a ForceFlush then exports it).
	if p.next != nil {
		p.next.OnEnd(out)
	}
	if sc.IsSampled() {
		p.ledger.apply(s, &f, known)
	}
}

// Shutdown ends the model calls the client wrappers (otelopenai,
// otelanthropic) hold open for a retry, so that they reach the next
// processor, then shuts down the next processor and closes the ledger:
// open invocations become incomplete with reason shutdown.
func (p *SpanProcessor) Shutdown(ctx context.Context) error {
	p.holders.EndParked()
	p.ledger.shutdown()
	if p.next != nil {
		return p.next.Shutdown(ctx)
	}
	return nil
}

// ForceFlush ends the model calls the client wrappers hold open for a
// retry (a retry that comes later starts a new span), then flushes the
// next processor.
func (p *SpanProcessor) ForceFlush(ctx context.Context) error {
	p.holders.EndParked()
	if p.next != nil {
		return p.next.ForceFlush(ctx)
	}
	return nil
}

// maxAncestorWalk bounds the walk up the records of open spans.
const maxAncestorWalk = 64

// openAncestor returns the nearest span of invocation id on the ancestry
// of the ended span launching that is still open in this processor, and
// false when none is. The walk goes up the records of open spans from the
// launching span's parent; when it meets a span that has ended, it falls
// back to the open root or continuation of the invocation in the same
// trace (the turn that launched it), which is an ancestor of every span
// of the invocation in its trace.
func (p *SpanProcessor) openAncestor(id string, launching sdktrace.ReadOnlySpan) (trace.Span, bool) {
	psc := launching.Parent()
	tid := launching.SpanContext().TraceID()
	p.mu.Lock()
	defer p.mu.Unlock()
	if psc.IsValid() && !psc.IsRemote() {
		sid := psc.SpanID()
		for i := 0; i < maxAncestorWalk && sid != (trace.SpanID{}); i++ {
			rec := p.lookupOpen(tid, sid)
			if rec == nil {
				break
			}
			if rec.invocation == id {
				return rec.span, true
			}
			sid = rec.parent
		}
	}
	if rec, ok := p.turns[turnKey{tid, id}]; ok {
		return rec.span, true
	}
	return nil, false
}

// openSpans returns the number of spans tracked (for tests).
func (p *SpanProcessor) openSpans() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.openCount
}

// exportCounts are the counts the SpanProcessor puts on an ended span
// as it exports it: the invocation.children it counted (countAbsent when
// it counted none) and the invocation.unrecorded and invocation.detached
// it counted when not 0 (contract v0.6 rules 3 and 4). wrap is false when
// the span is exported as it is (it counted nothing, or the span carries
// the count it stamped at its start). The exported span (span) and the
// ledger's reading of it (readFacts) both take its attributes from
// exportedAttrs, so they cannot differ.
type exportCounts struct {
	children             int
	unrecorded, detached int32
	wrap                 bool
}

// countsOf returns how the SpanProcessor exports the ended span s.
func countsOf(s sdktrace.ReadOnlySpan, children, unrecorded, detached int) exportCounts {
	c := exportCounts{children: children,
		unrecorded: int32(min(unrecorded, math.MaxInt32)), detached: int32(min(detached, math.MaxInt32))}
	c.wrap = c.unrecorded != 0 || c.detached != 0 ||
		(children != countAbsent && !carriesCount(s.Attributes(), children))
	return c
}

// span returns s as exported.
func (c exportCounts) span(s sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	switch {
	case !c.wrap:
		return s
	case c.unrecorded != 0 || c.detached != 0:
		return &declaredSpan{ReadOnlySpan: s, children: c.children, unrecorded: c.unrecorded, detached: c.detached}
	}
	return &countedSpan{ReadOnlySpan: s, children: c.children}
}

// keeps reports whether the span's own attribute kv is exported as it is
// under the counts c (a count the SpanProcessor puts replaces the span's).
func (c exportCounts) keeps(kv attribute.KeyValue) bool {
	if !c.wrap {
		return true
	}
	switch kv.Key {
	case contract.AttrChildren:
		return c.children == countAbsent
	case contract.AttrUnrecorded:
		return c.unrecorded == 0
	case contract.AttrDetached:
		return c.detached == 0
	}
	return true
}

// added returns, in buf, the attributes the counts c add after the span's
// own (those keeps keeps).
func (c exportCounts) added(buf *[3]attribute.KeyValue) []attribute.KeyValue {
	out := buf[:0]
	if !c.wrap {
		return out
	}
	if c.children != countAbsent {
		out = append(out, attribute.Int(contract.AttrChildren, c.children))
	}
	if c.unrecorded != 0 {
		out = append(out, attribute.Int(contract.AttrUnrecorded, int(c.unrecorded)))
	}
	if c.detached != 0 {
		out = append(out, attribute.Int(contract.AttrDetached, int(c.detached)))
	}
	return out
}

// collectAttrs returns the attributes of the span whose own are base as
// exported with the counts c: what keeps keeps, then what added adds.
func collectAttrs(base []attribute.KeyValue, c exportCounts) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(base)+3)
	for _, kv := range base {
		if c.keeps(kv) {
			out = append(out, kv)
		}
	}
	var buf [3]attribute.KeyValue
	return append(out, c.added(&buf)...)
}

// carriesCount reports whether attrs hold invocation.children, every time
// as the int children (a stamp its attributes kept).
func carriesCount(attrs []attribute.KeyValue, children int) bool {
	found := false
	for _, kv := range attrs {
		if kv.Key != contract.AttrChildren {
			continue
		}
		if kv.Value.Type() != attribute.INT64 || kv.Value.AsInt64() != int64(children) {
			return false
		}
		found = true
	}
	return found
}

// countedSpan is an ended span with invocation.children added.
type countedSpan struct {
	sdktrace.ReadOnlySpan
	children int
}

// Attributes returns the span's attributes with invocation.children.
func (s *countedSpan) Attributes() []attribute.KeyValue {
	return collectAttrs(s.ReadOnlySpan.Attributes(), exportCounts{children: s.children, wrap: true})
}

// declaredSpan is an ended span with invocation.children added, and
// invocation.unrecorded and invocation.detached when not 0 (contract
// v0.6 rules 3 and 4). It is a type of its own so that countedSpan, which
// most spans with children get, stays 24 bytes.
type declaredSpan struct {
	sdktrace.ReadOnlySpan
	children             int
	unrecorded, detached int32
}

// Attributes returns the span's attributes with its counts.
func (s *declaredSpan) Attributes() []attribute.KeyValue {
	return collectAttrs(s.ReadOnlySpan.Attributes(),
		exportCounts{children: s.children, unrecorded: s.unrecorded, detached: s.detached, wrap: true})
}
