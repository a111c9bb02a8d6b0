package instrument

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
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
func (t *Tracker) start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if t.processor.Load() != nil {
		return t.tracer.Start(ctx, name, opts...)
	}
	probe := &startProbe{}
	_, span := t.tracer.Start(context.WithValue(ctx, probeKey{}, probe), name, opts...)
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

// Invocation is one caller request into a session; its root span ends
// when the caller receives the result.
type Invocation struct {
	id   string
	span trace.Span
}

// StartInvocation starts a new invocation of agent in session: a root span
// "invoke_agent {agent}" and a fresh invocation id in the returned
// context's baggage. Call End when the caller receives its result.
//
// When the sampler does not sample the root, neither the ledger nor the
// collector can observe the invocation: Ledger.Wait then answers at once,
// incomplete with reason not_sampled (contract.ReasonNotSampled).
func (t *Tracker) StartInvocation(ctx context.Context, agent, session string) (context.Context, *Invocation) {
	return t.startRoot(ctx, agent, session)
}

// UnattributedReason says why a turn is unattributed: the value of
// contract.AttrUnattributed and the detail of its
// "unattributed_wakeup:<reason>" reason. Each adapter names its own (for
// example otelopencode.UnattributedUnknownTask).
type UnattributedReason string

// UnattributedUnknown is the reason StartUnattributed records when it is
// given none.
const UnattributedUnknown UnattributedReason = "unknown"

// StartUnattributed starts a turn the runtime started by itself that no
// invocation can own (contract rule 7): the notification of a job no
// adapter saw, a turn started while the adapter was detached. reason says
// why (for example "unknown_task"; UnattributedUnknown when empty). The
// turn is an invocation of its own: a root span "invoke_agent {agent}",
// the root of a new trace, with contract.AttrUnattributed = reason and a
// fresh invocation id in the returned context's baggage. Spans started
// from the context are its members and their usage is summed as usual,
// but the ledger closes it incomplete with
// "unattributed_wakeup:<reason>", never final, and Ledger.Session says the
// session owes work until End is called.
func (t *Tracker) StartUnattributed(ctx context.Context, agent, session string, reason UnattributedReason) (context.Context, *Invocation) {
	if reason == "" {
		reason = UnattributedUnknown
	}
	return t.startRoot(ctx, agent, session, trace.WithNewRoot(),
		trace.WithAttributes(attribute.String(contract.AttrUnattributed, string(reason))))
}

// StartInvocationWithID starts an invocation as StartInvocation does, but
// with id as its invocation id instead of a fresh one: the runtime's own
// id of the prompt (a Claude Code user message's uuid, an OpenCode
// message id), so that a host asks the collector about the invocation by
// the id it already has. id must name this invocation only (within its
// tenant): a second root with the same id joins the first invocation,
// which the ledger then closes incomplete. It fails, starting nothing,
// when id is empty or not a valid baggage value.
func (t *Tracker) StartInvocationWithID(ctx context.Context, id, agent, session string) (context.Context, *Invocation, error) {
	if id == "" {
		return ctx, nil, errors.New("instrument: empty invocation id")
	}
	ctx, err := ContextWithInvocation(ctx, id)
	if err != nil {
		return ctx, nil, err
	}
	ctx, inv := t.startRootIn(ctx, id, agent, session)
	return ctx, inv, nil
}

// startRoot starts the root span of a new invocation.
func (t *Tracker) startRoot(ctx context.Context, agent, session string, extra ...trace.SpanStartOption) (context.Context, *Invocation) {
	id := NewInvocationID()
	ctx, err := ContextWithInvocation(ctx, id)
	if err != nil {
		// A hex id is always a valid baggage value.
		panic(err)
	}
	return t.startRootIn(ctx, id, agent, session, extra...)
}

// startRootIn starts the root span of invocation id, whose id ctx's
// baggage holds.
func (t *Tracker) startRootIn(ctx context.Context, id, agent, session string, extra ...trace.SpanStartOption) (context.Context, *Invocation) {
	opts := make([]trace.SpanStartOption, 0, 2+len(extra))
	opts = append(opts, spanKindInternal, trace.WithAttributes(
		attribute.String(contract.AttrInvocationID, id),
		attribute.String(contract.AttrRole, contract.RoleRoot),
		attribute.String(contract.AttrOperationName, contract.OpInvokeAgent),
		attribute.String(contract.AttrAgentName, agent),
		attribute.String(contract.AttrConversationID, session),
	))
	opts = append(opts, extra...)
	ctx, span := t.start(ctx, t.rootName(agent), opts...)
	if !span.SpanContext().IsSampled() {
		// Nothing of the invocation is observed: Ledger.Wait answers
		// not_sampled at once instead of waiting for the open timeout.
		markNotSampled(id)
	}
	return ctx, &Invocation{id: id, span: span}
}

// spanKindInternal is the span kind of lifecycle spans, made once: the
// option is a closure, which would otherwise cost an allocation per span.
var spanKindInternal = trace.WithSpanKind(trace.SpanKindInternal)

// rootName returns the root span name of agent.
func (t *Tracker) rootName(agent string) string {
	if name, ok := t.rootNames.Load(agent); ok {
		return name.(string)
	}
	name := contract.SpanNameRootPrefix + " " + agent
	if t.rootNamesLen.Add(1) <= maxRootNames {
		t.rootNames.Store(agent, name)
	}
	return name
}

// ID returns the invocation id.
func (i *Invocation) ID() string { return i.id }

// Span returns the root span.
func (i *Invocation) Span() trace.Span { return i.span }

// End ends the root span: the caller has its result.
func (i *Invocation) End(opts ...trace.SpanEndOption) { i.span.End(opts...) }

// Job is a background job: work started and not waited for. Its span
// starts as a child of the current span and ends when the job ends.
type Job struct {
	t          *Tracker
	invocation string
	ctx        context.Context
	span       trace.Span
}

// StartBackground starts a background job of the invocation in ctx: a span
// "background {kind}" that is a child of ctx's span. Pass the returned
// context (or Env, or Carrier) to the job's work, and call End when it
// ends.
//
// When ctx's span has already ended (a tool span that returned before
// its job was launched), its invocation.children is already exported, so
// the job cannot be its child (contract rule 6). The job is then the
// child of the nearest span of the invocation on that span's ancestry
// that is still open (in practice the root or the continuation whose turn
// launched it), counted there, with a link to the ended span carrying
// invocation.link=launched_by. When no span of the invocation is open, the
// job starts a trace of its own, marked invocation.late_child=true, with
// the same link; the Ledger waits for it and reports orphan_job. Finding
// the open span needs the SpanProcessor, which the Tracker learns from the
// first span it starts; before that, such a job is an orphan.
func (t *Tracker) StartBackground(ctx context.Context, kind string, opts ...trace.SpanStartOption) (context.Context, *Job) {
	id := InvocationIDFromContext(ctx)
	attrs := []attribute.KeyValue{attribute.String(contract.AttrRole, contract.RoleBackground)}
	if id != "" {
		attrs = append(attrs, attribute.String(contract.AttrInvocationID, id))
	}
	opts = append([]trace.SpanStartOption{spanKindInternal}, opts...)
	parent := ctx
	if launching, ended := endedSpan(ctx); ended && id != "" {
		opts = append(opts, trace.WithLinks(followupLink(launching.SpanContext(), contract.LinkLaunchedBy)))
		var open trace.Span
		if sp := t.processor.Load(); sp != nil {
			open, _ = sp.openAncestor(id, launching)
		}
		if open != nil {
			parent = trace.ContextWithSpan(ctx, open)
		} else {
			opts = append(opts, trace.WithNewRoot())
			attrs = append(attrs, attribute.Bool(contract.AttrLateChild, true))
		}
	}
	opts = append(opts, trace.WithAttributes(attrs...))
	_, span := t.start(parent, contract.SpanNameBackgroundPrefix+" "+kind, opts...)
	ctx = trace.ContextWithSpan(ctx, span)
	return ctx, &Job{t: t, invocation: id, ctx: ctx, span: span}
}

// endedSpan returns ctx's span when it is an SDK span that has ended.
func endedSpan(ctx context.Context) (sdktrace.ReadOnlySpan, bool) {
	ro, ok := trace.SpanFromContext(ctx).(sdktrace.ReadOnlySpan)
	if !ok || ro.EndTime().IsZero() {
		return nil, false
	}
	return ro, true
}

// InvocationID returns the invocation the job belongs to.
func (j *Job) InvocationID() string { return j.invocation }

// Span returns the job's background span.
func (j *Job) Span() trace.Span { return j.span }

// Env returns environment variables (TRACEPARENT, TRACESTATE when set,
// BAGGAGE, and the fields of any extra propagators) that hand the job's
// context to a subprocess; append them to the command's environment. The
// job's span is marked invocation.remote=true, since the subprocess's
// spans are children the span cannot count. Read them in the subprocess
// with ContextFromEnv.
func (j *Job) Env() []string {
	j.span.SetAttributes(attribute.Bool(contract.AttrRemote, true))
	carrier := envCarrier{}
	j.t.propagators.Inject(j.ctx, carrier)
	w3c.Inject(j.ctx, carrier)
	env := make([]string, 0, len(carrier))
	for _, k := range carrier.Keys() {
		env = append(env, envName(k)+"="+carrier[envName(k)])
	}
	return env
}

// Carrier returns the job's W3C trace context and baggage, to store in the
// completion notification that reports the job.
func (j *Job) Carrier() Carrier {
	c := Carrier{}
	w3c.Inject(j.ctx, c)
	return c
}

// EndWithFollowup ends the job's span and declares that the runtime will
// post a completion notification for it (invocation.followups = 1); the
// notification must later start a continuation or be closed with
// CloseFollowup or ConsumeFollowup. outcome, when not nil, is recorded as
// the span's error.
func (j *Job) EndWithFollowup(outcome error) { j.end(outcome, 1) }

// EndWithoutFollowup ends the job's span and declares that the runtime is
// known to post no completion notification for it (invocation.followups =
// 0). outcome, when not nil, is recorded as the span's error.
func (j *Job) EndWithoutFollowup(outcome error) { j.end(outcome, 0) }

// End ends the job's span: with notify, as EndWithFollowup; without, as
// EndWithoutFollowup.
//
// Deprecated: use EndWithFollowup or EndWithoutFollowup.
func (j *Job) End(outcome error, notify bool) {
	if notify {
		j.EndWithFollowup(outcome)
		return
	}
	j.EndWithoutFollowup(outcome)
}

func (j *Job) end(outcome error, followups int) {
	j.span.SetAttributes(attribute.Int(contract.AttrFollowups, followups))
	if outcome != nil {
		j.span.RecordError(outcome)
		j.span.SetStatus(codes.Error, outcome.Error())
	}
	j.span.End()
}

// ErrMixedInvocations is returned by StartContinuation when its carriers
// name jobs of different invocations; the caller must split the batch and
// start one continuation per invocation.
var ErrMixedInvocations = errors.New("instrument: carriers name different invocations")

// ErrNoCarriers is returned by StartContinuation without carriers.
var ErrNoCarriers = errors.New("instrument: no carriers")

// Continuation is a turn the runtime starts by itself because of
// completion notifications; it belongs to the invocation whose jobs woke
// it.
type Continuation struct {
	id   string
	span trace.Span
}

// StartContinuation starts a continuation of agent in session for the
// notifications whose carriers are given: a span "continue_agent {agent}"
// that is the root of a new trace, with a followup link to each job's
// span, and the jobs' invocation id in the returned context. All carriers
// must name the same invocation.
func (t *Tracker) StartContinuation(ctx context.Context, agent, session string, carriers ...Carrier) (context.Context, *Continuation, error) {
	if len(carriers) == 0 {
		return ctx, nil, ErrNoCarriers
	}
	links := make([]trace.Link, 0, len(carriers))
	var id string
	for i, c := range carriers {
		ref, err := ParseCarrier(c)
		if err != nil {
			return ctx, nil, fmt.Errorf("instrument: carrier %d: %w", i, err)
		}
		if id == "" {
			id = ref.InvocationID
		} else if ref.InvocationID != id {
			return ctx, nil, fmt.Errorf("%w: %s and %s", ErrMixedInvocations, id, ref.InvocationID)
		}
		links = append(links, followupLink(ref.SpanContext, contract.LinkFollowup))
	}
	ctx, err := ContextWithInvocation(ctx, id)
	if err != nil {
		return ctx, nil, err
	}
	ctx, span := t.start(ctx, contract.SpanNameContinuationPrefix+" "+agent,
		trace.WithNewRoot(),
		spanKindInternal,
		trace.WithLinks(links...),
		trace.WithAttributes(
			attribute.String(contract.AttrInvocationID, id),
			attribute.String(contract.AttrRole, contract.RoleContinuation),
			attribute.String(contract.AttrOperationName, contract.OpInvokeAgent),
			attribute.String(contract.AttrAgentName, agent),
			attribute.String(contract.AttrConversationID, session),
		))
	return ctx, &Continuation{id: id, span: span}, nil
}

// InvocationID returns the invocation the continuation belongs to.
func (c *Continuation) InvocationID() string { return c.id }

// Span returns the continuation's span.
func (c *Continuation) Span() trace.Span { return c.span }

// End ends the continuation's span.
func (c *Continuation) End(opts ...trace.SpanEndOption) { c.span.End(opts...) }

func followupLink(sc trace.SpanContext, kind string) trace.Link {
	return trace.Link{
		SpanContext: sc,
		Attributes:  []attribute.KeyValue{attribute.String(contract.AttrLink, kind)},
	}
}

// FollowupReason says why a followup closed without a continuation of its
// job's invocation: the values of contract.AttrFollowupReason.
type FollowupReason string

// Values of FollowupReason.
const (
	// FollowupInterrupted: the job was interrupted; no notification comes.
	FollowupInterrupted FollowupReason = contract.ReasonInterrupted
	// FollowupSessionClosed: the session closed before the notification
	// was delivered.
	FollowupSessionClosed FollowupReason = contract.ReasonSessionClosed
	// FollowupCancelled: the runtime cancelled the notification.
	FollowupCancelled FollowupReason = contract.ReasonCancelled
	// FollowupConsumedBy: another invocation read the notification; the
	// consumer is required.
	FollowupConsumedBy FollowupReason = contract.ReasonConsumedBy
	// FollowupAbandoned: the instrumentation stops waiting without knowing
	// whether the notification will still start a continuation; the
	// invocation closes incomplete, never final.
	FollowupAbandoned FollowupReason = contract.ReasonAbandoned
)

// CloseFollowup records that the notification of the job named by carrier
// will not start a continuation of the job's invocation: a zero-length
// span "followup_closed", the root of its own trace, of the job's
// invocation, with a followup link to the job's span. reason is one of
// FollowupInterrupted, FollowupSessionClosed, FollowupCancelled,
// FollowupConsumedBy or FollowupAbandoned (the caller cannot tell whether the
// notification will still start a continuation: the invocation then closes
// incomplete, never final); consumer names the consuming invocation and is
// required with FollowupConsumedBy only. ctx supplies no parent, only
// context values.
func (t *Tracker) CloseFollowup(ctx context.Context, carrier Carrier, reason FollowupReason, consumer string) error {
	ref, err := ParseCarrier(carrier)
	if err != nil {
		return err
	}
	switch reason {
	case FollowupInterrupted, FollowupSessionClosed, FollowupCancelled, FollowupAbandoned:
		if consumer != "" {
			return fmt.Errorf("instrument: consumer %q given with reason %q", consumer, reason)
		}
	case FollowupConsumedBy:
		if consumer == "" {
			return fmt.Errorf("instrument: reason %q needs a consumer", reason)
		}
	default:
		return fmt.Errorf("instrument: unknown followup reason %q", reason)
	}
	ctx, err = ContextWithInvocation(ctx, ref.InvocationID)
	if err != nil {
		return err
	}
	attrs := []attribute.KeyValue{
		attribute.String(contract.AttrInvocationID, ref.InvocationID),
		attribute.String(contract.AttrRole, contract.RoleFollowupClosed),
		attribute.String(contract.AttrFollowupReason, string(reason)),
	}
	if consumer != "" {
		attrs = append(attrs, attribute.String(contract.AttrFollowupConsumer, consumer))
	}
	now := time.Now()
	_, span := t.start(ctx, contract.SpanNameFollowupClosed,
		trace.WithNewRoot(),
		trace.WithTimestamp(now),
		spanKindInternal,
		trace.WithLinks(followupLink(ref.SpanContext, contract.LinkFollowup)),
		trace.WithAttributes(attrs...))
	span.End(trace.WithTimestamp(now))
	return nil
}

// ConsumeFollowup records that the turn running in ctx read the completion
// notification of the job named by carrier. When the turn belongs to the
// job's invocation, the turn's span gets a followup link and discharges
// the followup itself. Otherwise the turn's span gets a plain link with
// invocation.link=consumed and a followup_closed span with reason
// consumed_by names the turn's invocation as consumer; the turn's usage
// stays with its own invocation.
func (t *Tracker) ConsumeFollowup(ctx context.Context, carrier Carrier) error {
	ref, err := ParseCarrier(carrier)
	if err != nil {
		return err
	}
	span := trace.SpanFromContext(ctx)
	consumer := InvocationIDFromContext(ctx)
	if consumer == ref.InvocationID {
		span.AddLink(followupLink(ref.SpanContext, contract.LinkFollowup))
		return nil
	}
	if consumer == "" {
		return errors.New("instrument: the consuming context names no invocation")
	}
	span.AddLink(followupLink(ref.SpanContext, contract.LinkConsumed))
	return t.CloseFollowup(ctx, carrier, FollowupConsumedBy, consumer)
}
