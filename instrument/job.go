package instrument

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

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
	_, span := t.start(parent, contract.SpanNameBackgroundPrefix+" "+kind, lifecycle{role: contract.RoleBackground}, opts...)
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
