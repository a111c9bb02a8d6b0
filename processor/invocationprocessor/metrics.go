package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/agentledger/agentledger/contract"
)

// Bound names used in the bound_hits metric.
const (
	boundOpen      = "max_open_invocations"
	boundSpans     = "max_spans_per_invocation"
	boundRetention = "retention_capacity"
	boundOutbox    = "summary_outbox"
)

var (
	boundOpenAttr      = metric.WithAttributeSet(attribute.NewSet(attribute.String("bound", boundOpen)))
	boundSpansAttr     = metric.WithAttributeSet(attribute.NewSet(attribute.String("bound", boundSpans)))
	boundRetentionAttr = metric.WithAttributeSet(attribute.NewSet(attribute.String("bound", boundRetention)))
	boundOutboxAttr    = metric.WithAttributeSet(attribute.NewSet(attribute.String("bound", boundOutbox)))
)

// record adds what a locked section did to the internal telemetry.
func (p *invocationProcessor) record(ctx context.Context, done *stats) {
	ctx = context.WithoutCancel(ctx)
	t := p.tel
	if done.indexed > 0 {
		t.ProcessorInvocationSpansIndexed.Add(ctx, done.indexed)
	}
	if done.duplicates > 0 {
		t.ProcessorInvocationDuplicateSpans.Add(ctx, done.duplicates)
	}
	if done.evicted > 0 {
		t.ProcessorInvocationBoundHits.Add(ctx, done.evicted, boundOpenAttr)
	}
	if done.spanLimit > 0 {
		t.ProcessorInvocationBoundHits.Add(ctx, done.spanLimit, boundSpansAttr)
	}
	if done.forgotten > 0 {
		t.ProcessorInvocationBoundHits.Add(ctx, done.forgotten, boundRetentionAttr)
	}
	if done.afterForget > 0 {
		t.ProcessorInvocationSpansAfterForget.Add(ctx, done.afterForget)
	}
	if done.closedIDsDropped > 0 {
		t.ProcessorInvocationClosedIdsDropped.Add(ctx, done.closedIDsDropped)
	}
	if d := done.opened - done.closed; d != 0 {
		t.ProcessorInvocationOpenInvocations.Add(ctx, d)
	}
	for _, d := range done.delays {
		t.ProcessorInvocationFinalityDelay.Record(ctx, d)
	}
	if done.outboxDropped > 0 {
		t.ProcessorInvocationBoundHits.Add(ctx, done.outboxDropped, boundOutboxAttr)
		p.logger.Warn("dropped invocation summaries the next consumer did not take", zap.Int64("count", done.outboxDropped))
	}
}

var (
	statusPendingAttr    = metric.WithAttributeSet(attribute.NewSet(attribute.String("status", contract.StatusPending)))
	statusFinalAttr      = metric.WithAttributeSet(attribute.NewSet(attribute.String("status", contract.StatusFinal)))
	statusIncompleteAttr = metric.WithAttributeSet(attribute.NewSet(attribute.String("status", contract.StatusIncomplete)))
)

// countSent adds delivered summaries to the internal telemetry.
func (p *invocationProcessor) countSent(ctx context.Context, sent []summary) {
	ctx = context.WithoutCancel(ctx)
	var pending, final, incomplete int64
	for i := range sent {
		switch sent[i].status {
		case contract.StatusPending:
			pending++
		case contract.StatusFinal:
			final++
		default:
			incomplete++
		}
	}
	for _, c := range []struct {
		n    int64
		attr metric.AddOption
	}{{pending, statusPendingAttr}, {final, statusFinalAttr}, {incomplete, statusIncompleteAttr}} {
		if c.n > 0 {
			p.tel.ProcessorInvocationSummaries.Add(ctx, c.n, c.attr)
		}
	}
}
