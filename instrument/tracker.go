package instrument

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/internal/contract"
)

// Tracker starts the lifecycle spans of invocations: roots, background
// jobs, continuations and followup_closed spans. Spans started from the
// contexts it returns carry the invocation's id in W3C baggage, which the
// SpanProcessor stamps on them. A Tracker is safe for concurrent use.
type Tracker struct {
	tracer      trace.Tracer
	propagators propagation.TextMapPropagator
}

// NewTracker returns a Tracker. WithTracerProvider should name the
// provider whose pipeline has the SpanProcessor; WithPropagators adds
// propagators for Job.Env besides the W3C ones.
func NewTracker(opts ...Option) *Tracker {
	cfg := newConfig(opts)
	return &Tracker{
		tracer:      cfg.tracerProvider.Tracer(ScopeName, trace.WithInstrumentationVersion(Version())),
		propagators: cfg.propagators,
	}
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
func (t *Tracker) StartInvocation(ctx context.Context, agent, session string) (context.Context, *Invocation) {
	return t.startRoot(ctx, agent, session)
}

// UnattributedUnknown is the reason StartUnattributed records when it is
// given none.
const UnattributedUnknown = "unknown"

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
func (t *Tracker) StartUnattributed(ctx context.Context, agent, session, reason string) (context.Context, *Invocation) {
	if reason == "" {
		reason = UnattributedUnknown
	}
	return t.startRoot(ctx, agent, session, trace.WithNewRoot(),
		trace.WithAttributes(attribute.String(contract.AttrUnattributed, reason)))
}

// startRoot starts the root span of a new invocation.
func (t *Tracker) startRoot(ctx context.Context, agent, session string, extra ...trace.SpanStartOption) (context.Context, *Invocation) {
	id := NewInvocationID()
	ctx, err := ContextWithInvocation(ctx, id)
	if err != nil {
		// A hex id is always a valid baggage value.
		panic(err)
	}
	opts := append([]trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String(contract.AttrInvocationID, id),
			attribute.String(contract.AttrRole, contract.RoleRoot),
			attribute.String(contract.AttrOperationName, contract.OpInvokeAgent),
			attribute.String(contract.AttrAgentName, agent),
			attribute.String(contract.AttrConversationID, session),
		),
	}, extra...)
	ctx, span := t.tracer.Start(ctx, contract.SpanNameRootPrefix+" "+agent, opts...)
	return ctx, &Invocation{id: id, span: span}
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
func (t *Tracker) StartBackground(ctx context.Context, kind string, opts ...trace.SpanStartOption) (context.Context, *Job) {
	id := InvocationIDFromContext(ctx)
	attrs := []attribute.KeyValue{attribute.String(contract.AttrRole, contract.RoleBackground)}
	if id != "" {
		attrs = append(attrs, attribute.String(contract.AttrInvocationID, id))
	}
	opts = append([]trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindInternal)}, opts...)
	opts = append(opts, trace.WithAttributes(attrs...))
	ctx, span := t.tracer.Start(ctx, contract.SpanNameBackgroundPrefix+" "+kind, opts...)
	return ctx, &Job{t: t, invocation: id, ctx: ctx, span: span}
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

// End ends the job's span. outcome, when not nil, is recorded as the
// span's error. notify says whether the runtime will post a completion
// notification (invocation.followups = 1) or is known to post none (0);
// a posted notification must later start a continuation or be closed with
// CloseFollowup or ConsumeFollowup.
func (j *Job) End(outcome error, notify bool) {
	followups := 0
	if notify {
		followups = 1
	}
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
	ctx, span := t.tracer.Start(ctx, contract.SpanNameContinuationPrefix+" "+agent,
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindInternal),
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

// CloseFollowup records that the notification of the job named by carrier
// will not start a continuation of the job's invocation: a zero-length
// span "followup_closed", the root of its own trace, of the job's
// invocation, with a followup link to the job's span. reason is one of
// contract.ReasonInterrupted, ReasonSessionClosed, ReasonCancelled or
// ReasonConsumedBy; consumer names the consuming invocation and is
// required with ReasonConsumedBy only. ctx supplies no parent, only
// context values.
func (t *Tracker) CloseFollowup(ctx context.Context, carrier Carrier, reason, consumer string) error {
	ref, err := ParseCarrier(carrier)
	if err != nil {
		return err
	}
	switch reason {
	case contract.ReasonInterrupted, contract.ReasonSessionClosed, contract.ReasonCancelled:
		if consumer != "" {
			return fmt.Errorf("instrument: consumer %q given with reason %q", consumer, reason)
		}
	case contract.ReasonConsumedBy:
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
		attribute.String(contract.AttrFollowupReason, reason),
	}
	if consumer != "" {
		attrs = append(attrs, attribute.String(contract.AttrFollowupConsumer, consumer))
	}
	now := time.Now()
	_, span := t.tracer.Start(ctx, contract.SpanNameFollowupClosed,
		trace.WithNewRoot(),
		trace.WithTimestamp(now),
		trace.WithSpanKind(trace.SpanKindInternal),
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
	return t.CloseFollowup(ctx, carrier, contract.ReasonConsumedBy, consumer)
}
