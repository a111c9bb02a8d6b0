package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.uber.org/zap"

	"github.com/agentledger/agentledger/internal/ledgerrule"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadata"
)

// clock is the processor's source of time; tests inject a fake one.
type clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Tick interval bounds: a fraction of remote_settle (and of pending_delay,
// when set), so a settled invocation is summarised, and a due pending
// emitted, within about a quarter of either.
const (
	minTickInterval = 10 * time.Millisecond
	maxTickInterval = time.Second
)

// tickInterval is how often the timer goroutine fires due timers.
func tickInterval(cfg *Config) time.Duration {
	iv := cfg.RemoteSettle / 4
	if cfg.PendingDelay > 0 {
		iv = min(iv, cfg.PendingDelay/4)
	}
	return min(max(iv, minTickInterval), maxTickInterval)
}

// invocationProcessor passes every span through and adds summary spans.
type invocationProcessor struct {
	// rules is the ledger's view of config (ledgerConfig), shared by
	// every shard; config is the user's Config it was derived from.
	rules  ledgerConfig
	next   consumer.Traces
	clock  clock
	logger *zap.Logger
	tel    *metadata.TelemetryBuilder
	shards []*shard
	bounds *bounds
	// limits are the byte caps on ids and names (bytes.go).
	limits limits
	// shedHeap is shed_heap_bytes (0: never); heapBytes reads the Go
	// heap's live objects (shed.go), replaced in tests.
	shedHeap  uint64
	heapBytes func() uint64
	gc        func()
	tickIv    time.Duration
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
	tenants                    tenants
	trust                      trust
	warnSummaries, warnTenant  rateLimitedWarning
	warnClosedIDs, warnIDBytes rateLimitedWarning
	warnUnstorable             rateLimitedWarning

	// scratch pools batchScratch values (route.go), so that routing a
	// batch allocates nothing once warm.
	scratch sync.Pool

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
		rules: ledgerConfig{
			maxSpans:     cfg.MaxSpansPerInvocation,
			settle:       int64(cfg.RemoteSettle),
			openTimeout:  int64(cfg.OpenTimeout),
			retention:    int64(cfg.Retention),
			emitPending:  cfg.EmitPending,
			pendingDelay: int64(cfg.PendingDelay),
			usageOps:     make(map[string]struct{}, len(cfg.UsageOperations)),
			rule:         ledgerrule.NewConfig(cfg.UsageOperations, cfg.MaxSpansPerInvocation),
			graph:        ledgerrule.GraphConfig{MaxSpans: cfg.MaxSpansPerInvocation, Settle: int64(cfg.RemoteSettle)},
			prices:       cfg.Prices,
			pricesActive: len(cfg.Prices) > 0,
		},
		next:   next,
		clock:  clk,
		logger: set.Logger,
		tel:    tel,
		shards: make([]*shard, numShards),
		bounds: newBounds(cfg),
		limits: limits{idBytes: cfg.MaxInvocationIDBytes, nameBytes: cfg.MaxNameBytes},
		// shed_heap_bytes is validated non-negative.
		shedHeap:  uint64(cfg.ShedHeapBytes),
		heapBytes: heapObjectBytes,
		gc:        runtime.GC,
		tickIv:    tickInterval(cfg),
		// A shard's share of the open invocations' summaries, and slack.
		outboxLimit: (cfg.MaxOpenInvocations+numShards-1)/numShards + outboxSlack,
		set:         set,
		config:      cfg,
	}
	if cfg.Storage != nil {
		p.store = newStore(*cfg.Storage, set.ID, set.Logger)
	}
	p.statusID = cfg.Status
	if cfg.Status != nil {
		p.rules.timelineSpans = cfg.StatusSpans
	}
	p.tenants = newTenants(cfg.Tenant)
	p.trust = trust
	p.warnSummaries.msg = "dropped incoming invocation.summary spans: only the invocation processor writes summaries (summaries::accept_from names trusted collectors)"
	p.warnClosedIDs.msg = "dropped remembered ids of closed invocations (max_closed_invocations): a late span of one opens a new invocation, whose summary may be a second revision 1"
	p.warnIDBytes.msg = "spans whose invocation.id is longer than max_invocation_id_bytes were passed on without being indexed: their invocations get no summary"
	p.warnUnstorable.msg = "refused batches (permanent error, nothing acknowledged) with a value the invocation processor cannot store"
	p.warnTenant.msg = "spans without a tenant were passed on without being indexed (see the processor's tenant setting)"
	for _, op := range cfg.UsageOperations {
		p.rules.usageOps[op] = struct{}{}
	}
	for i := range p.shards {
		p.shards[i] = newShard(&p.rules, p.bounds, p.outboxLimit)
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

// ConsumeTraces indexes member spans under their tenant, passes the batch
// on (without the summaries it does not accept from outside), and then
// sends any summaries the batch completed.
func (p *invocationProcessor) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	now := p.clock.Now().UnixNano()
	b := p.getScratch()
	defer p.putScratch(b)
	refusedSpans := p.route(ctx, td, b)
	// pass hands the batch on: the caller's as it came, or the copy made
	// here without the refused summaries.
	pass := p.next.ConsumeTraces
	if refusedSpans != (refused{}) {
		p.recordRefused(ctx, refusedSpans, now)
		if refusedSpans.summaries > 0 {
			td, pass = p.trust.withoutUntrustedSummaries(td), p.consumeOwned
			if td.SpanCount() == 0 && len(b.refs) == 0 {
				return nil
			}
		}
	}

	if len(b.refs) == 0 {
		return pass(ctx, td)
	}
	// Refused whole, before anything is indexed, stored or passed on:
	// what is acknowledged is what the journal can give back (accept.go).
	if err := p.refuseUnstorable(ctx, b, td.SpanCount(), now); err != nil {
		return err
	}
	if p.store != nil {
		// Nothing is indexed while storage refuses writes.
		if err := p.store.ready(ctx); err != nil {
			return err
		}
		// What the journal stores of each span is encoded here, before
		// any shard's lock, while the request is the processor's.
		p.store.encodeFacts(b)
	}
	var stats stats
	p.groupByShard(b)
	for _, group := range b.groups {
		s := p.shards[group[0].shard]
		if s.index(group, now, &stats) {
			b.touched = append(b.touched, s)
		}
	}
	for _, s := range p.enforceBounds(now, &stats) {
		b.touched = appendShard(b.touched, s)
	}
	p.record(ctx, &stats)
	if p.store != nil {
		// Acknowledge only what is durable; the sender retries the rest.
		if err := p.commitBatch(ctx, &b.touched); err != nil {
			return err
		}
	}

	// Only the pass-through's error is the caller's: the summaries are
	// not its batch, and a retried batch would pass through twice. They
	// are retried from the outbox instead.
	err := pass(ctx, td)
	if ferr := p.flushAfterBatch(ctx, b); ferr != nil {
		p.logger.Debug("invocation summaries not sent yet", zap.Error(ferr))
	}
	return err
}

// tick fires every due timer (open_timeout, remote_settle, pending_delay,
// retention) at now and sends the resulting summaries, retrying what waits
// in the outboxes.
func (p *invocationProcessor) tick(ctx context.Context, now time.Time) error {
	n := now.UnixNano()
	var stats stats
	var pending []*shard
	for _, s := range p.shards {
		s.mu.Lock()
		s.journal.begin(s)
		s.tick(n, &stats)
		s.journal.end(s, n)
		stats.outboxDropped += s.trimOutbox()
		if len(s.outbox) > 0 {
			pending = append(pending, s)
		}
		s.mu.Unlock()
	}
	for _, s := range p.enforceBounds(n, &stats) {
		pending = appendShard(pending, s)
	}
	for _, s := range p.shedUnderPressure(n, &stats) {
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
