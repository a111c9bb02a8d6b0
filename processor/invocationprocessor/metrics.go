package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// Bound names used in the bound_hits metric.
const (
	boundOpen      = "max_open_invocations"
	boundSpans     = "max_spans_per_invocation"
	boundRetention = "retention_capacity"
	boundOutbox    = "summary_outbox"
	// The byte bounds, the tenant quotas and memory pressure.
	boundOpenBytes       = "max_open_bytes"
	boundTenantOpen      = "tenant_max_open_invocations"
	boundTenantOpenBytes = "tenant_max_open_bytes"
	boundRetentionBytes  = "retention_bytes"
	boundShed            = "shed_heap_bytes"
	boundIDBytes         = "max_invocation_id_bytes"
	boundNameBytes       = "max_name_bytes"
	// A span not recorded for the status extension's timeline page (the
	// summary counts it).
	boundStatusSpans = "status_spans"
	// A closed invocation forgotten by a bound while it still owed work
	// (counted besides the bound that forgot it; CONTRACT.md v0.12).
	boundOwingForgotten = "owing_forgotten"
)

var (
	boundOpenAttr      = metric.WithAttributeSet(attribute.NewSet(attribute.String("bound", boundOpen)))
	boundSpansAttr     = metric.WithAttributeSet(attribute.NewSet(attribute.String("bound", boundSpans)))
	boundRetentionAttr = metric.WithAttributeSet(attribute.NewSet(attribute.String("bound", boundRetention)))
	boundOwingAttr     = metric.WithAttributeSet(attribute.NewSet(attribute.String("bound", boundOwingForgotten)))
	boundOutboxAttr    = metric.WithAttributeSet(attribute.NewSet(attribute.String("bound", boundOutbox)))

	boundOpenBytesAttr       = metric.WithAttributeSet(attribute.NewSet(attribute.String("bound", boundOpenBytes)))
	boundTenantOpenAttr      = metric.WithAttributeSet(attribute.NewSet(attribute.String("bound", boundTenantOpen)))
	boundTenantOpenBytesAttr = metric.WithAttributeSet(attribute.NewSet(attribute.String("bound", boundTenantOpenBytes)))
	boundRetentionBytesAttr  = metric.WithAttributeSet(attribute.NewSet(attribute.String("bound", boundRetentionBytes)))
	boundShedAttr            = metric.WithAttributeSet(attribute.NewSet(attribute.String("bound", boundShed)))
	boundIDBytesAttr         = metric.WithAttributeSet(attribute.NewSet(attribute.String("bound", boundIDBytes)))
	boundNameBytesAttr       = metric.WithAttributeSet(attribute.NewSet(attribute.String("bound", boundNameBytes)))
	boundStatusSpansAttr     = metric.WithAttributeSet(attribute.NewSet(attribute.String("bound", boundStatusSpans)))

	stateOpenAttr   = metric.WithAttributeSet(attribute.NewSet(attribute.String("state", "open")))
	stateClosedAttr = metric.WithAttributeSet(attribute.NewSet(attribute.String("state", "closed")))
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
	if done.owingForgotten > 0 {
		t.ProcessorInvocationBoundHits.Add(ctx, done.owingForgotten, boundOwingAttr)
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
	for _, c := range []struct {
		n    int64
		attr metric.AddOption
	}{
		{done.evictedBytes, boundOpenBytesAttr},
		{done.evictedTenant, boundTenantOpenAttr},
		{done.evictedTenantBytes, boundTenantOpenBytesAttr},
		{done.forgottenBytes, boundRetentionBytesAttr},
		{done.shed, boundShedAttr},
		{done.unrecorded, boundStatusSpansAttr},
	} {
		if c.n > 0 {
			t.ProcessorInvocationBoundHits.Add(ctx, c.n, c.attr)
		}
	}
	if done.shed > 0 {
		p.logger.Warn("memory pressure: shed ledger state (closed invocations forgotten, open ones summarised incomplete with evicted)",
			zap.Int64("invocations", done.shed), zap.Uint64("shed_heap_bytes", p.shedHeap))
	}
	p.recordBytes(ctx)
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
func (p *invocationProcessor) countSent(ctx context.Context, sent []summary.Summary) {
	ctx = context.WithoutCancel(ctx)
	var pending, final, incomplete int64
	for i := range sent {
		switch sent[i].Status {
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

// recordBytes brings the ledger_bytes metric up to the bounds' counts.
func (p *invocationProcessor) recordBytes(ctx context.Context) {
	b := p.bounds
	if d := b.openBytes.Load(); d != b.reportedOpenBytes.Load() {
		p.tel.ProcessorInvocationLedgerBytes.Add(ctx, d-b.reportedOpenBytes.Swap(d), stateOpenAttr)
	}
	if d := b.closedBytes.Load(); d != b.reportedClosedBytes.Load() {
		p.tel.ProcessorInvocationLedgerBytes.Add(ctx, d-b.reportedClosedBytes.Swap(d), stateClosedAttr)
	}
}

// recordCapped counts the spans refused for an over-long invocation.id
// and the names cut, with a rate-limited warning for the former.
func (p *invocationProcessor) recordCapped(ctx context.Context, r refused, now int64) {
	if r.idTooLong > 0 {
		p.tel.ProcessorInvocationBoundHits.Add(ctx, r.idTooLong, boundIDBytesAttr)
		p.warnIDBytes.note(p.logger, now, r.idTooLong, zap.Int("max_invocation_id_bytes", p.limits.idBytes))
	}
	if r.namesCut > 0 {
		p.tel.ProcessorInvocationBoundHits.Add(ctx, r.namesCut, boundNameBytesAttr)
	}
}
