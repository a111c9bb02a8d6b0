package instrument

import (
	"context"
	"math"
	"reflect"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/ledger"
)

// This file holds the SpanProcessor's per-span bookkeeping: the records
// of open spans, indexed by span ID (then trace), reused once a span ends,
// and the walk up them to the nearest open span of an invocation.

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
	// flags: recordDropped, recordInCall, recordMarked.
	flags recordFlags
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
	inv *ledger.Invocation
	// stamp holds the attributes OnStart adds (invocation.id and a
	// provisional invocation.children of 0), so that SetAttributes needs
	// no slice of its own; the SDK copies them.
	stamp [2]attribute.KeyValue
}

// recordFlags are a record's flags, in one byte so that a record stays in
// its size class.
type recordFlags uint8

const (
	// recordDropped: the span is not sampled and its parent (or context
	// span) counts it in invocation.unrecorded; OnEnd tells the ledger
	// when it is a model call.
	recordDropped recordFlags = 1 << iota
	// recordInCall: the span is a model call, or inside one (a model call
	// below it is double instrumentation).
	recordInCall
	// recordMarked: the SpanProcessor's marks holds what OnEnd exports
	// restored or marked on the span (spanids.go).
	recordMarked
)

// has reports whether flag f is set.
func (rec *spanRecord) has(f recordFlags) bool { return rec.flags&f != 0 }

// set sets flag f when on.
func (rec *spanRecord) set(f recordFlags, on bool) {
	if on {
		rec.flags |= f
	}
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
	if old := p.removeOpen(rec.trace, sid); old != nil && old.has(recordMarked) {
		delete(p.marks, old)
	}
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
	if rec.has(recordMarked) {
		delete(p.marks, rec)
	}
	*rec = spanRecord{}
	p.free = append(p.free, rec)
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
