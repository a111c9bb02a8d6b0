package instrument

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// Errors returned by StartContinuation.
var (
	// ErrMixedInvocations: the carriers name jobs of different
	// invocations; the caller must split the batch and start one
	// continuation per invocation.
	ErrMixedInvocations = errors.New("instrument: carriers name different invocations")
	// ErrNoCarriers: no carriers were given.
	ErrNoCarriers = errors.New("instrument: no carriers")
)

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
// must name the same invocation. It exports the turn's wake span at once
// (a child "wake_agent {agent}", CONTRACT.md v0.12): call it when the
// turn starts, before its first model request.
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
	ctx, span := t.start(ctx, contract.SpanNameContinuationPrefix+" "+agent, lifecycle{contract.RoleContinuation, session},
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
	continues := make([]trace.SpanContext, len(links))
	for i, l := range links {
		continues[i] = l.SpanContext
	}
	ctx = t.wake(ctx, agent, session, continues...)
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
	_, span := t.start(ctx, contract.SpanNameFollowupClosed, lifecycle{role: contract.RoleFollowupClosed},
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
// stays with its own invocation. Unless the turn exported a wake span
// already (a continuation's, an unattributed turn's), it exports one as a
// child of the span in ctx, linked to the job's span.
func (t *Tracker) ConsumeFollowup(ctx context.Context, carrier Carrier) error {
	ref, err := ParseCarrier(carrier)
	if err != nil {
		return err
	}
	span := trace.SpanFromContext(ctx)
	consumer := InvocationIDFromContext(ctx)
	// The turn that read the notification woke for it, unless it
	// announced itself already (a continuation, an unattributed turn).
	t.wake(ctx, "", "", ref.SpanContext)
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
