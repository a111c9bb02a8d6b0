package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/agentledger/agentledger/internal/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadata"
)

// clock is the processor's source of time; tests inject a fake one.
type clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Tick interval bounds: a fraction of remote_settle, so a settled
// invocation is summarised within about a quarter of remote_settle.
const (
	minTickInterval = 10 * time.Millisecond
	maxTickInterval = time.Second
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

// invocationProcessor passes every span through and adds summary spans.
type invocationProcessor struct {
	cfg    ledgerConfig
	next   consumer.Traces
	clock  clock
	logger *zap.Logger
	tel    *metadata.TelemetryBuilder
	shards []*shard
	bounds *bounds
	tickIv time.Duration
	// outboxLimit is the number of summaries a shard keeps for a next
	// consumer that does not take them.
	outboxLimit int

	// statusID is the status extension the shards publish to (nil: none),
	// found in Start.
	statusID *component.ID

	// store holds the state across restarts when storage is configured
	// (storage.go); set and config rebuild the shards for its layout.
	store  *store
	set    processor.Settings
	config *Config

	// tenants reads each span's tenant (tenant.go); trust decides which
	// incoming summaries pass and marks the ones made here (trust.go).
	tenants                   tenants
	trust                     trust
	warnSummaries, warnTenant rateLimitedWarning

	// lifeMu guards stop, done and cancel, the timer goroutine's controls.
	lifeMu sync.Mutex
	stop   chan struct{}
	done   chan struct{}
	cancel context.CancelFunc
}

var _ processor.Traces = (*invocationProcessor)(nil)

func newProcessor(set processor.Settings, cfg *Config, next consumer.Traces, clk clock, numShards int) (*invocationProcessor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invocation processor config: %w", err)
	}
	tel, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, fmt.Errorf("invocation processor telemetry: %w", err)
	}
	trust, err := newTrust(&cfg.Summaries)
	if err != nil {
		return nil, fmt.Errorf("invocation processor config: %w", err)
	}
	if numShards <= 0 {
		numShards = runtime.GOMAXPROCS(0) * 4
	}
	p := &invocationProcessor{
		cfg: ledgerConfig{
			maxSpans:     cfg.MaxSpansPerInvocation,
			settle:       int64(cfg.RemoteSettle),
			openTimeout:  int64(cfg.OpenTimeout),
			retention:    int64(cfg.Retention),
			emitPending:  cfg.EmitPending,
			usageOps:     make(map[string]struct{}, len(cfg.UsageOperations)),
			prices:       cfg.Prices,
			pricesActive: len(cfg.Prices) > 0,
		},
		next:   next,
		clock:  clk,
		logger: set.Logger,
		tel:    tel,
		shards: make([]*shard, numShards),
		bounds: &bounds{limit: int64(cfg.MaxOpenInvocations)},
		tickIv: min(max(cfg.RemoteSettle/4, minTickInterval), maxTickInterval),
		// A shard's share of the open invocations' summaries, and slack.
		outboxLimit: (cfg.MaxOpenInvocations+numShards-1)/numShards + outboxSlack,
		set:         set,
		config:      cfg,
	}
	if cfg.Storage != nil {
		p.store = newStore(*cfg.Storage, set.ID, set.Logger)
	}
	p.statusID = cfg.Status
	p.tenants = newTenants(cfg.Tenant)
	p.trust = trust
	p.warnSummaries.msg = "dropped incoming invocation.summary spans: only the invocation processor writes summaries (summaries::accept_from names trusted collectors)"
	p.warnTenant.msg = "spans without a tenant were passed on without being indexed (see the processor's tenant setting)"
	for _, op := range cfg.UsageOperations {
		p.cfg.usageOps[op] = struct{}{}
	}
	for i := range p.shards {
		p.shards[i] = newShard(&p.cfg, p.bounds, p.outboxLimit)
	}
	return p, nil
}

// Capabilities reports that input data is not modified: summaries are sent
// as a separate batch.
func (*invocationProcessor) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: false}
}

// Start loads the stored state (with storage), finds the status
// extension, if one is configured, and starts the goroutine that fires
// timers.
func (p *invocationProcessor) Start(ctx context.Context, host component.Host) error {
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	if p.stop != nil {
		return nil
	}
	if p.store != nil {
		// Before the status extension is handed to the shards: loading
		// may rebuild them.
		if err := p.startStore(ctx, host); err != nil {
			return err
		}
	}
	if err := p.startStatus(host); err != nil {
		return err
	}
	if p.store != nil {
		p.publishRestored()
	}
	p.stop = make(chan struct{})
	p.done = make(chan struct{})
	// The timer goroutine's sends use a context Shutdown cancels, so a
	// next consumer that blocks cannot keep it running.
	var runCtx context.Context
	runCtx, p.cancel = context.WithCancel(context.Background())
	go p.run(runCtx, p.stop, p.done)
	return nil
}

func (p *invocationProcessor) run(ctx context.Context, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(p.tickIv)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if err := p.tick(ctx, p.clock.Now()); err != nil {
				p.logger.Debug("invocation summaries not sent yet", zap.Error(err))
			}
		}
	}
}

// Shutdown stops the timer goroutine and emits every open invocation as
// incomplete with reason shutdown (and every revision still owed) before
// returning. It returns when ctx ends even if the next consumer blocks.
func (p *invocationProcessor) Shutdown(ctx context.Context) error {
	p.lifeMu.Lock()
	stop, done, cancel := p.stop, p.done, p.cancel
	p.stop, p.done, p.cancel = nil, nil, nil
	p.lifeMu.Unlock()
	var errs []error
	if stop != nil {
		cancel()
		close(stop)
		select {
		case <-done:
		case <-ctx.Done():
			// Still summarise what is open: shard state is safe to use
			// while a last tick finishes.
			errs = append(errs, fmt.Errorf("waiting for the timer goroutine: %w", ctx.Err()))
		}
	}
	now := p.clock.Now().UnixNano()
	var stats stats
	for _, s := range p.shards {
		if p.store != nil {
			break // open invocations stay open in storage for the next Start
		}
		s.mu.Lock()
		s.shutdown(now, &stats)
		s.mu.Unlock()
	}
	p.enforceBounds(now, &stats) // every shard is flushed below
	p.record(ctx, &stats)
	for _, s := range p.shards {
		errs = append(errs, p.flush(ctx, s, flushAtShutdown))
	}
	if p.store != nil {
		errs = append(errs, p.closeStore(ctx))
	}
	p.tel.Shutdown()
	err := errors.Join(errs...)
	if err != nil {
		p.logger.Error("invocation summaries at shutdown were not all delivered", zap.Error(err))
	}
	return err
}

// indexRef is one span of the batch routed to a shard.
type indexRef struct {
	shard int
	id    string // the ledger key: tenant and invocation id (ledgerKey)
	span  ptrace.Span
	res   pcommon.Resource
}

// ConsumeTraces indexes member spans under their tenant, passes the batch
// on (without the summaries it does not accept from outside), and then
// sends any summaries the batch completed.
func (p *invocationProcessor) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	now := p.clock.Now().UnixNano()
	var refs []indexRef
	var refusedSpans refused
	req := p.tenants.ofRequest(ctx)
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		tenant, tenantOK := p.tenants.of(req, rs.Resource())
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				sp := spans.At(k)
				if sp.Name() == contract.SpanNameSummary {
					// Never a member. Passed on only from a trusted
					// collector (a second tier), else dropped below.
					if !p.trust.accepts(sss.At(j).Scope(), rs.Resource()) {
						refusedSpans.summaries++
					}
					continue
				}
				v, ok := sp.Attributes().Get(contract.AttrInvocationID)
				if !ok || v.Type() != pcommon.ValueTypeStr || v.Str() == "" {
					continue
				}
				if !tenantOK {
					refusedSpans.withoutTenant++
					continue
				}
				key := ledgerKey(tenant, v.Str())
				if refs == nil {
					refs = make([]indexRef, 0, td.SpanCount())
				}
				refs = append(refs, indexRef{shard: p.shardOf(key), id: key, span: sp, res: rs.Resource()})
			}
		}
	}
	if refusedSpans != (refused{}) {
		p.recordRefused(ctx, refusedSpans, now)
		if refusedSpans.summaries > 0 {
			td = p.trust.withoutUntrustedSummaries(td)
			if td.SpanCount() == 0 && len(refs) == 0 {
				return nil
			}
		}
	}

	if len(refs) == 0 {
		return p.next.ConsumeTraces(ctx, td)
	}
	if p.store != nil {
		// Nothing is indexed while storage refuses writes.
		if err := p.store.ready(ctx); err != nil {
			return err
		}
	}
	var stats stats
	var touched []*shard
	for _, group := range p.groupByShard(refs) {
		s := p.shards[group[0].shard]
		if p.indexShard(s, group, now, &stats) {
			touched = append(touched, s)
		}
	}
	for _, s := range p.enforceBounds(now, &stats) {
		touched = appendShard(touched, s)
	}
	p.record(ctx, &stats)
	if p.store != nil {
		// Acknowledge only what is durable; the sender retries the rest.
		if err := p.commitBatch(ctx, &touched); err != nil {
			return err
		}
	}

	// Only the pass-through's error is the caller's: the summaries are
	// not its batch, and a retried batch would pass through twice. They
	// are retried from the outbox instead.
	err := p.next.ConsumeTraces(ctx, td)
	if ferr := p.flushAfterBatch(ctx, touched); ferr != nil {
		p.logger.Debug("invocation summaries not sent yet", zap.Error(ferr))
	}
	return err
}

// groupByShard orders refs by shard with a counting sort, keeping batch
// order within a shard, and returns one slice per shard present.
func (p *invocationProcessor) groupByShard(refs []indexRef) [][]indexRef {
	first := refs[0].shard
	same := true
	for i := range refs {
		if refs[i].shard != first {
			same = false
			break
		}
	}
	if same {
		return [][]indexRef{refs}
	}
	counts := make([]int, len(p.shards)+1)
	for i := range refs {
		counts[refs[i].shard+1]++
	}
	groups := make([][]indexRef, 0, len(p.shards))
	for i := 1; i < len(counts); i++ {
		counts[i] += counts[i-1]
	}
	sorted := make([]indexRef, len(refs))
	next := slices.Clone(counts[:len(p.shards)])
	for i := range refs {
		sh := refs[i].shard
		sorted[next[sh]] = refs[i]
		next[sh]++
	}
	for sh := range p.shards {
		if counts[sh+1] > counts[sh] {
			groups = append(groups, sorted[counts[sh]:counts[sh+1]])
		}
	}
	return groups
}

// indexShard indexes one shard's spans of a batch under its lock and
// reports whether summaries are waiting in its outbox.
func (p *invocationProcessor) indexShard(s *shard, refs []indexRef, now int64, stats *stats) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.touched = s.touched[:0]
	s.journalBegin()
	for i := range refs {
		r := &refs[i]
		s.journalFact(r, now, stats)
		inv := s.ensure(r.id, now, stats)
		switch inv.add(r.span, r.res, &s.resources, now, &p.cfg) {
		case addIndexed:
			stats.indexed++
		case addDuplicate:
			stats.duplicates++
		case addSpanLimit:
			stats.spanLimit++
		}
		s.touch(inv)
	}
	for _, inv := range s.touched {
		s.evaluate(inv, now, stats)
	}
	s.publishOpen(s.touched, now)
	clear(s.touched)
	s.touched = s.touched[:0]
	s.journalEnd(now)
	stats.outboxDropped += s.trimOutbox()
	return len(s.outbox) > 0
}

// tick fires every due timer (open_timeout, remote_settle, retention) at
// now and sends the resulting summaries, retrying what waits in the
// outboxes.
func (p *invocationProcessor) tick(ctx context.Context, now time.Time) error {
	n := now.UnixNano()
	var stats stats
	var pending []*shard
	for _, s := range p.shards {
		s.mu.Lock()
		s.journalBegin()
		s.tick(n, &stats)
		s.journalEnd(n)
		stats.outboxDropped += s.trimOutbox()
		if len(s.outbox) > 0 {
			pending = append(pending, s)
		}
		s.mu.Unlock()
	}
	for _, s := range p.enforceBounds(n, &stats) {
		pending = appendShard(pending, s)
	}
	p.record(ctx, &stats)
	var errs []error
	for _, s := range pending {
		errs = append(errs, p.flush(ctx, s, flushFromTimer))
	}
	if p.store != nil {
		errs = append(errs, p.storeTick(ctx, n))
	}
	return errors.Join(errs...)
}

func (p *invocationProcessor) shardOf(id string) int {
	// FNV-1a, inline so routing allocates nothing.
	h := uint64(14695981039346656037)
	for i := 0; i < len(id); i++ {
		h ^= uint64(id[i])
		h *= 1099511628211
	}
	return int(h % uint64(len(p.shards)))
}

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
