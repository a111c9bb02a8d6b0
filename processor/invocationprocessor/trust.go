package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/zap"

	"github.com/agentledger/agentledger/contract"
)

// Only this processor writes summaries. An incoming span named
// invocation.summary is dropped unless it carries the marker of a
// collector listed in summaries::accept_from; the summaries the processor
// emits carry its marker (contract.SummaryScopeName and
// contract.AttrSummaryCollector), which metrics and dashboards select on.

func (c *SummariesConfig) validate() error {
	var errs []error
	if !validName(c.Collector) && c.Collector != "" {
		errs = append(errs, fmt.Errorf("summaries::collector must be valid UTF-8 without NUL, at most %d bytes", maxTenantLen))
	}
	for i, name := range c.AcceptFrom {
		if name == "" {
			errs = append(errs, fmt.Errorf("summaries::accept_from[%d] must not be empty", i))
		}
	}
	return errors.Join(errs...)
}

// collectorName is the name the summaries carry: the configured one, else
// the host name.
func collectorName(cfg *SummariesConfig) (string, error) {
	if cfg.Collector != "" {
		return cfg.Collector, nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("summaries::collector is not set and the host name is unknown: %w", err)
	}
	if !validName(host) {
		return "", fmt.Errorf("summaries::collector is not set and the host name %q cannot name a collector", host)
	}
	return host, nil
}

// trust decides which incoming summaries pass and marks the ones the
// processor emits.
type trust struct {
	// collector is this collector's name on its summaries.
	collector string
	// acceptFrom holds the collectors whose summaries pass.
	acceptFrom map[string]struct{}
}

func newTrust(cfg *SummariesConfig) (trust, error) {
	name, err := collectorName(cfg)
	if err != nil {
		return trust{}, err
	}
	t := trust{collector: name}
	if len(cfg.AcceptFrom) > 0 {
		t.acceptFrom = make(map[string]struct{}, len(cfg.AcceptFrom))
		for _, c := range cfg.AcceptFrom {
			t.acceptFrom[c] = struct{}{}
		}
	}
	return t, nil
}

// accepts reports whether an incoming span named invocation.summary, in
// scope under res, comes from a collector the processor trusts.
func (t *trust) accepts(scope pcommon.InstrumentationScope, res pcommon.Resource) bool {
	if t.acceptFrom == nil || scope.Name() != contract.SummaryScopeName {
		return false
	}
	v, ok := res.Attributes().Get(contract.AttrSummaryCollector)
	if !ok || v.Type() != pcommon.ValueTypeStr {
		return false
	}
	_, ok = t.acceptFrom[v.Str()]
	return ok
}

// mark sets a summary's resource: the root's attributes, without a
// tenant the agent may have claimed there (the summary's tenant is the
// span attribute the processor sets), and with this collector's name.
func (t *trust) mark(res pcommon.Map) {
	res.Remove(contract.AttrTenant)
	res.PutStr(contract.AttrSummaryCollector, t.collector)
}

// withoutUntrustedSummaries returns a copy of td without the summaries the
// processor does not accept. The input is not modified (the processor
// declares MutatesData false); only a batch holding such a summary is
// copied.
func (t *trust) withoutUntrustedSummaries(td ptrace.Traces) ptrace.Traces {
	out := ptrace.NewTraces()
	td.CopyTo(out)
	out.ResourceSpans().RemoveIf(func(rs ptrace.ResourceSpans) bool {
		had := rs.ScopeSpans().Len()
		rs.ScopeSpans().RemoveIf(func(ss ptrace.ScopeSpans) bool {
			n := ss.Spans().Len()
			ss.Spans().RemoveIf(func(sp ptrace.Span) bool {
				return sp.Name() == contract.SpanNameSummary && !t.accepts(ss.Scope(), rs.Resource())
			})
			return n > 0 && ss.Spans().Len() == 0
		})
		return had > 0 && rs.ScopeSpans().Len() == 0
	})
	return out
}

// warnInterval is the least time between two warnings of one kind.
const warnInterval = time.Minute

// rateLimitedWarning logs a warning at most once per warnInterval of the
// processor's clock, with the number of events since the last one.
type rateLimitedWarning struct {
	msg string
	// last is the clock's time of the last warning (Unix ns), 0 before
	// the first; pending counts events not yet reported.
	last    atomic.Int64
	pending atomic.Int64
}

func (w *rateLimitedWarning) note(logger *zap.Logger, now, events int64, fields ...zap.Field) {
	w.pending.Add(events)
	last := w.last.Load()
	if last != 0 && now-last < int64(warnInterval) {
		return
	}
	if !w.last.CompareAndSwap(last, now) {
		return // another batch reports these
	}
	logger.Warn(w.msg, append(fields, zap.Int64("count", w.pending.Swap(0)), zap.Duration("at_most_every", warnInterval))...)
}

// refused counts what a batch brought that the processor refused.
type refused struct {
	summaries     int64 // spans named invocation.summary from an untrusted sender: dropped
	withoutTenant int64 // member spans without a valid tenant: passed on, not indexed
	idTooLong     int64 // member spans whose invocation.id exceeds max_invocation_id_bytes: likewise
	namesCut      int64 // names cut at max_name_bytes (the span is indexed)
}

// recordRefused adds a batch's refused spans to the telemetry and the
// rate-limited warnings.
func (p *invocationProcessor) recordRefused(ctx context.Context, r refused, now int64) {
	ctx = context.WithoutCancel(ctx)
	if r.summaries > 0 {
		p.tel.ProcessorInvocationIncomingSummariesDropped.Add(ctx, r.summaries)
		p.warnSummaries.note(p.logger, now, r.summaries, zap.String("collector", p.trust.collector))
	}
	if r.withoutTenant > 0 {
		p.tel.ProcessorInvocationSpansWithoutTenant.Add(ctx, r.withoutTenant)
		p.warnTenant.note(p.logger, now, r.withoutTenant,
			zap.String("tenant_source", p.tenants.source), zap.String("tenant_attribute", p.tenants.attribute))
	}
	p.recordCapped(ctx, r, now)
}
