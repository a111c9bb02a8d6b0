package instrument

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// A wake span (CONTRACT.md v0.12, "A wake is an event") tells the
// collector that a turn the runtime started by itself is running, when it
// starts rather than when it ends: a zero-length child "wake_agent
// {agent}" of the turn's span with invocation.role = wake, ended at once
// so the exporter sends it with the next batch, or at once with
// WithWakeFlush (the adapters' default). Until the turn's span
// arrives the invocation owes it (running_turn), and the collector's
// session watch wakes when the wake arrives.

// wokenKey marks a context whose turn already exported its wake span.
type wokenKey struct{}

// wake exports the wake span of the turn whose span is in ctx, linked to
// each span it continues, once per turn; it does nothing when the turn's
// span is not recording (unsampled, or ended: a wake after the turn would
// announce nothing). It returns ctx marked woken.
func (t *Tracker) wake(ctx context.Context, agent, session string, continues ...trace.SpanContext) context.Context {
	turn := trace.SpanFromContext(ctx)
	if !turn.IsRecording() || ctx.Value(wokenKey{}) != nil {
		return ctx
	}
	id := InvocationIDFromContext(ctx)
	links := make([]trace.Link, 0, len(continues))
	for _, sc := range continues {
		if sc.IsValid() {
			// A plain link: no invocation.link, so it discharges nothing.
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	name := contract.SpanNameWakePrefix
	if agent != "" {
		name += " " + agent
	}
	attrs := []attribute.KeyValue{
		attribute.String(contract.AttrInvocationID, id),
		attribute.String(contract.AttrRole, contract.RoleWake),
	}
	if agent != "" {
		attrs = append(attrs, attribute.String(contract.AttrAgentName, agent))
	}
	if session != "" {
		attrs = append(attrs, attribute.String(contract.AttrConversationID, session))
	}
	now := time.Now()
	_, span := t.start(ctx, name, lifecycle{contract.RoleWake, session},
		trace.WithTimestamp(now),
		spanKindInternal,
		trace.WithLinks(links...),
		trace.WithAttributes(attrs...))
	span.End(trace.WithTimestamp(now))
	// With WithWakeFlush, sent now rather than with the next batch.
	t.wakeFlush.Kick()
	return context.WithValue(ctx, wokenKey{}, true)
}
