package instrument

import (
	"context"
	"math"
	"sync"
	"time"
	"weak"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/instrument/internal/ledger"
	"github.com/agentledger/agentledger/instrument/internal/unrecorded"
)

// The client wrappers that share instrument/internal/genaicall report
// through it.
func init() { unrecorded.Install(NoteUnrecorded) }

// This file is how the instrumentation declares spans the collector will
// never see (contract v0.6 rules 3 and 4): spans the sampler dropped
// inside a recording invocation (invocation.unrecorded on the nearest
// recording ancestor), and spans started as roots of new traces from the
// context of a span of the invocation (invocation.detached on that span,
// and a detached_from link back to it).
//
// The SDK does not call SpanProcessor.OnStart for a span its sampler
// drops, so the SpanProcessor learns of a dropped span in one of two
// ways: the provider's sampler is wrapped in Sampler, which records such
// a span without sampling it (the SpanProcessor sees it start and its
// exporters do not), or a client wrapper that started a model-call span
// that is not recording reports it with NoteUnrecorded.

// Sampler returns a sampler that decides as inner does, except that a
// span of an invocation that inner drops is recorded without being
// sampled (sdktrace.RecordOnly) when its parent is a recording, sampled
// span or an ended, sampled span (of the invocation named by the baggage
// member invocation.id, or by the parent's invocation.id), or when it has
// no parent and the
// baggage names an invocation (a root, or a span started with
// trace.WithNewRoot, whose context span the SDK hides from samplers). It
// is still not exported, but the SpanProcessor sees it start and counts it
// in its parent's (or context span's) invocation.unrecorded (contract
// v0.6 rule 3), or, when no open span counts it (baggage only, ended
// parent or context span), on an open turn of its invocation (drops.go),
// or, with none open, by a declaration span (declaration.go); so is a
// span dropped below another process's sampled span when the baggage
// names its invocation. So neither the Ledger nor the collector says final
// for an invocation with a span missing. A root recorded so is not
// sampled, as before: Ledger.Wait answers not_sampled. A nil inner is
// the SDK's default, ParentBased(AlwaysSample()).
//
// Install it on every TracerProvider whose pipeline has a SpanProcessor:
//
//	sdktrace.NewTracerProvider(
//		sdktrace.WithSampler(instrument.Sampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.1)))),
//		sdktrace.WithSpanProcessor(sp))
//
// A span inner drops below a span that is not sampled (here or in
// another process) is dropped as
// inner says: its nearest sampled ancestor already declares the subtree.
// Processors registered beside the SpanProcessor see the recorded spans
// (with IsSampled false); the SDK's batching and simple processors do not
// export them.
func Sampler(inner sdktrace.Sampler) sdktrace.Sampler {
	if inner == nil {
		inner = sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
	return sampler{inner: inner}
}

type sampler struct {
	inner sdktrace.Sampler
}

// ShouldSample implements sdktrace.Sampler.
func (s sampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	res := s.inner.ShouldSample(p)
	if res.Decision != sdktrace.Drop || p.ParentContext == nil {
		return res
	}
	parent := trace.SpanFromContext(p.ParentContext)
	psc := parent.SpanContext()
	switch {
	case !psc.IsValid():
		// A root, or a span started with trace.WithNewRoot (the SDK hides
		// the context's span from the sampler): the SpanProcessor, which
		// sees the context, tells whether a span of the invocation
		// declares it.
		if baggageInvocationID(p.ParentContext) == "" {
			return res
		}
	case !psc.IsSampled():
		return res
	case psc.IsRemote():
		// Another process's sampled span (a subprocess that received the
		// invocation's context): recorded when the baggage names the
		// invocation, so that the SpanProcessor declares the span by a
		// span of its own (declaration.go).
		if baggageInvocationID(p.ParentContext) == "" {
			return res
		}
	case !parent.IsRecording():
		// An ended span of the invocation (its late children are counted
		// by nobody): recorded, so that the SpanProcessor declares the
		// span on an open turn of the invocation (drops.go).
		if baggageInvocationID(p.ParentContext) == "" && endedInvocation(p.ParentContext) == "" {
			return res
		}
	case baggageInvocationID(p.ParentContext) == "":
		ro, ok := parent.(sdktrace.ReadOnlySpan)
		if !ok || ledger.ReadStartAttrs(ro.Attributes()).ID == "" {
			return res
		}
	}
	res.Decision = sdktrace.RecordOnly
	return res
}

// Description implements sdktrace.Sampler.
func (s sampler) Description() string { return "agentledger.Sampler{" + s.inner.Description() + "}" }

// NoteUnrecorded reports that span, started from parent under name, was
// dropped by the sampler (it is not recording). Only the SpanProcessor of
// the provider that started span hears of it (each pipeline's Ledger
// hears only of its own spans). When parent's span is a recording,
// sampled span of an invocation that it tracks, that span counts it in its
// invocation.unrecorded (contract v0.6 rule 3); when parent carries only
// the invocation id (baggage), or its span has ended, an open turn (root
// or continuation) of the invocation counts it. The SpanProcessor's Ledger
// makes the invocation incomplete with not_sampled:<name>. With no turn
// open, or under another process's sampled span, the SpanProcessor
// exports a declaration span in its place (declaration.go), which both
// halves read as not_sampled:<name>. A recording span, or a parent
// outside any invocation, is ignored.
//
// The client wrappers (otelopenai, otelanthropic, otelopencode,
// otelclaudecode) call it for every model call they start, so that a
// dropped model call never leaves a final invocation with its usage
// missing, with or without Sampler.
func NoteUnrecorded(parent context.Context, span trace.Span, name string) {
	if parent == nil || span == nil || span.IsRecording() {
		return
	}
	ps := trace.SpanFromContext(parent)
	psc := ps.SpanContext()
	switch {
	case psc.IsRemote() && !psc.IsSampled():
		// Another process's span, not sampled: that process declared it.
		return
	case psc.IsRemote():
		// Another process's sampled span: no span here counts the
		// dropped one; it is declared as one without a parent.
		psc = trace.SpanContext{}
	case psc.IsValid() && !psc.IsSampled() && ps.IsRecording():
		// A span Sampler recorded without sampling: its nearest sampled
		// ancestor declares it, and so its subtree.
		return
	case psc.IsValid() && !psc.IsSampled():
		// A dropped span nobody declared (no Sampler): declared below
		// as one without a parent.
		psc = trace.SpanContext{}
	}
	id := baggageInvocationID(parent)
	if id == "" {
		id = endedInvocation(parent)
	}
	tp := span.TracerProvider()
	for _, p := range processors.list() {
		res, ok := p.serves(tp)
		if !ok {
			continue
		}
		if psc.IsValid() && p.noteUnrecorded(psc, id, name) {
			return
		}
		if id == "" {
			continue
		}
		p.mu.Lock()
		counted := p.declareOrphanDropLocked(id)
		p.mu.Unlock()
		if counted {
			p.tellLedgerDrop(id, name)
		} else {
			p.declareDrop(id, name, res, time.Now())
		}
		return
	}
}

// noteUnrecorded counts a dropped child of invocation id (or, when id is
// "", of the parent's invocation) named name in the open span psc's
// invocation.unrecorded, and tells the ledger. It reports false when
// this processor does not track psc.
func (p *SpanProcessor) noteUnrecorded(psc trace.SpanContext, id, name string) bool {
	p.mu.Lock()
	rec := p.lookupOpen(psc.TraceID(), psc.SpanID())
	if rec == nil {
		p.mu.Unlock()
		return false
	}
	if id == "" {
		id = rec.invocation
	}
	if id != "" && id == rec.invocation {
		rec.noteUnrecorded()
	}
	p.mu.Unlock()
	if id != "" {
		p.ledger.l.UnrecordedSpan(id, name)
	}
	return true
}

// detachedStart handles the start of a span of invocation id (context sc)
// started as the root of a new trace from parent (rule 4). When parent's
// span is an open, sampled span of the same invocation, it counts the new
// span there (in invocation.detached when sampled, in
// invocation.unrecorded when not, then dropped is true) and returns that
// span's context for the new span's detached_from link. When parent's span
// ended already, late is true. p.mu must be held.
func (p *SpanProcessor) detachedStart(parent context.Context, id string, sc trace.SpanContext) (from trace.SpanContext, late, dropped bool) {
	csc := trace.SpanContextFromContext(parent)
	if !csc.IsValid() || csc.IsRemote() {
		return trace.SpanContext{}, false, false
	}
	if crec := p.lookupOpen(csc.TraceID(), csc.SpanID()); crec != nil {
		if crec.invocation != id || !csc.IsSampled() {
			return trace.SpanContext{}, false, false
		}
		if !sc.IsSampled() {
			crec.noteUnrecorded()
			return trace.SpanContext{}, false, true
		}
		if crec.detached < math.MaxInt32 {
			crec.detached++
		}
		return csc, false, false
	}
	ps, ok := trace.SpanFromContext(parent).(sdktrace.ReadOnlySpan)
	if ok && ps.SpanContext().Equal(csc) && !ps.EndTime().IsZero() &&
		ledger.ReadStartAttrs(ps.Attributes()).ID == id {
		return trace.SpanContext{}, true, false
	}
	return trace.SpanContext{}, false, false
}

// processors lists the live SpanProcessors, for NoteUnrecorded: a client
// wrapper knows the span in its context, not the processor that tracks
// it. It holds them weakly, so that a processor nobody uses is collected.
var processors processorList

type processorList struct {
	// mu guards all.
	mu  sync.Mutex
	all []weak.Pointer[SpanProcessor]
}

// add lists p, dropping the processors collected since.
func (l *processorList) add(p *SpanProcessor) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.prune(), weak.Make(p))
}

// list returns the live processors.
func (l *processorList) list() []*SpanProcessor {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = l.prune()
	out := make([]*SpanProcessor, 0, len(l.all))
	for _, w := range l.all {
		if p := w.Value(); p != nil {
			out = append(out, p)
		}
	}
	return out
}

// prune returns all without the collected processors. l.mu must be held.
func (l *processorList) prune() []weak.Pointer[SpanProcessor] {
	kept := l.all[:0]
	for _, w := range l.all {
		if w.Value() != nil {
			kept = append(kept, w)
		}
	}
	clear(l.all[len(kept):])
	return kept
}
