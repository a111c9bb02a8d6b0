package instrument

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/flush"
)

// Tracker starts the lifecycle spans of invocations: roots, background
// jobs, continuations and followup_closed spans. Spans started from the
// contexts it returns carry the invocation's id in W3C baggage, which the
// SpanProcessor stamps on them. A Tracker is safe for concurrent use.
//
// A Tracker checks that its provider's pipeline has a SpanProcessor: the
// processor's OnStart runs inside the Tracker's Start and answers. A
// recorded span that no SpanProcessor answered reaches no Ledger (its
// invocation is never final in process, and nothing in it is counted);
// the Tracker then reports an error to otel.Handle (once per Tracker) and
// counts the span in agentledger.instrument.tracker.unledgered_spans.
type Tracker struct {
	tracer      trace.Tracer
	propagators propagation.TextMapPropagator
	unledgered  metric.Int64Counter

	// processor is the SpanProcessor that answered the Tracker's first
	// answered recorded span; nil until one did.
	processor atomic.Pointer[SpanProcessor]
	// warned is set once the missing processor was reported.
	warned atomic.Bool
	// rootNames caches "invoke_agent {agent}" by agent, for at most
	// maxRootNames agents (a runtime has a few).
	rootNames    sync.Map
	rootNamesLen atomic.Int32
	// wakeFlush exports a wake span at once (WithWakeFlush); nil for
	// none.
	wakeFlush *flush.Background
}

// maxRootNames bounds Tracker.rootNames.
const maxRootNames = 64

// NewTracker returns a Tracker. WithTracerProvider should name the
// provider whose pipeline has the SpanProcessor; WithPropagators adds
// propagators for Job.Env besides the W3C ones; WithMeterProvider the
// provider of its internal telemetry.
func NewTracker(opts ...TrackerOption) *Tracker {
	cfg := newTrackerConfig(opts)
	t := &Tracker{
		tracer:      cfg.tracerProvider.Tracer(ScopeName, trace.WithInstrumentationVersion(Version())),
		propagators: cfg.propagators,
	}
	if cfg.wakeFlush > 0 {
		t.wakeFlush = flush.NewBackground(flush.New(cfg.tracerProvider, cfg.wakeFlush))
	}
	meter := cfg.meterProvider.Meter(ScopeName, metric.WithInstrumentationVersion(Version()))
	// An error leaves a usable no-op instrument.
	t.unledgered, _ = meter.Int64Counter("agentledger.instrument.tracker.unledgered_spans",
		metric.WithDescription("Lifecycle spans a Tracker started on a provider whose pipeline has no instrument.SpanProcessor: no Ledger sees them."),
		metric.WithUnit("{span}"))
	return t
}

// ErrNoSpanProcessor is reported to otel.Handle when a Tracker's provider
// records spans that no SpanProcessor sees.
var ErrNoSpanProcessor = errors.New("instrument: the Tracker's TracerProvider has no instrument.SpanProcessor in its pipeline; no Ledger sees its invocations (pass the provider built with NewSpanProcessor to WithTracerProvider)")

// startProbe travels in the context of a Tracker's span start; the
// SpanProcessor's OnStart, which runs inside Start, fills it.
type startProbe struct {
	processor *SpanProcessor
}

type probeKey struct{}

// start starts a lifecycle span and, until a SpanProcessor answered one,
// checks that a SpanProcessor saw it (the provider's pipeline does not
// lose it afterwards). The returned context is ctx with the span; the
// probe does not stay in it.
//
// lc is the role and session the span's attributes set, which OnStart
// reads whole when the SDK's value length limit cut the attributes
// (spanids.go); the returned context does not answer it either.
func (t *Tracker) start(ctx context.Context, name string, lc lifecycle, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return t.startFrom(&lifecycleCtx{Context: ctx, lc: lc}, name, opts...)
}

// startFrom is start from lcc, whose Context is the caller's context;
// the caller may allocate lcc with what else it keeps.
func (t *Tracker) startFrom(lcc *lifecycleCtx, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	ctx := lcc.Context
	lcc.starting = true
	if t.processor.Load() != nil {
		spanCtx, span := t.tracer.Start(lcc, name, opts...)
		lcc.starting = false
		// A lifecycle span the sampler dropped is declared as a model
		// call is (drops.go): nothing else would count a dropped job or
		// continuation.
		NoteUnrecorded(ctx, span, name)
		// The tracer's context is lcc with the span: lcc no longer answers
		// the lifecycle, so it is ctx with the span, made once.
		return spanCtx, span
	}
	probe := &startProbe{}
	_, span := t.tracer.Start(context.WithValue(lcc, probeKey{}, probe), name, opts...)
	lcc.starting = false
	NoteUnrecorded(ctx, span, name)
	if span.IsRecording() {
		if probe.processor != nil {
			t.processor.Store(probe.processor)
		} else {
			t.unledgered.Add(ctx, 1)
			if t.warned.CompareAndSwap(false, true) {
				otel.Handle(fmt.Errorf("%w (span %q)", ErrNoSpanProcessor, name))
			}
		}
	}
	return trace.ContextWithSpan(ctx, span), span
}

// lifecycleCtx is the context a Tracker starts a lifecycle span from:
// Context with the span's lifecycle, which it answers under lifecycleKey
// while the span starts only (OnStart runs then). It replaces a
// context.WithValue and the lifecycle's own allocation, and the tracer's
// context made from it serves as the returned one, since it no longer
// answers the lifecycle once the span started.
type lifecycleCtx struct {
	context.Context
	lc       lifecycle
	starting bool
}

// Value answers lifecycleKey while the span starts, and otherwise asks
// the caller's context.
func (c *lifecycleCtx) Value(key any) any {
	if _, ok := key.(lifecycleKey); ok && c.starting {
		return &c.lc
	}
	return c.Context.Value(key)
}

// NewInvocationID returns a new random invocation id: 16 random bytes in
// lowercase hex.
func NewInvocationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// ContextWithInvocation returns ctx whose baggage names invocation id.
func ContextWithInvocation(ctx context.Context, id string) (context.Context, error) {
	m, err := baggage.NewMemberRaw(contract.BaggageInvocationID, id)
	if err != nil {
		return ctx, fmt.Errorf("instrument: invocation id %q: %w", id, err)
	}
	bag, err := baggage.FromContext(ctx).SetMember(m)
	if err != nil {
		return ctx, fmt.Errorf("instrument: invocation id %q: %w", id, err)
	}
	return baggage.ContextWithBaggage(ctx, bag), nil
}

// InvocationIDFromContext returns the invocation id in ctx's baggage, or
// "".
func InvocationIDFromContext(ctx context.Context) string {
	return baggage.FromContext(ctx).Member(contract.BaggageInvocationID).Value()
}
