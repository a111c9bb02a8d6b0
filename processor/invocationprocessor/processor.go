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
	"go.opentelemetry.io/collector/consumer/consumererror"
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
	tickIv time.Duration

	// lifeMu guards stop and done, the ticker goroutine's controls.
	lifeMu sync.Mutex
	stop   chan struct{}
	done   chan struct{}
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
	if numShards <= 0 {
		numShards = runtime.GOMAXPROCS(0) * 4
	}
	// Fewer shards than open invocations allowed, so each shard may hold
	// at least one; the caps sum to max_open_invocations exactly.
	numShards = min(numShards, cfg.MaxOpenInvocations)
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
		tickIv: min(max(cfg.RemoteSettle/4, minTickInterval), maxTickInterval),
	}
	for _, op := range cfg.UsageOperations {
		p.cfg.usageOps[op] = struct{}{}
	}
	for i := range p.shards {
		c := cfg.MaxOpenInvocations / numShards
		if i < cfg.MaxOpenInvocations%numShards {
			c++
		}
		p.shards[i] = newShard(c)
	}
	return p, nil
}

// Capabilities reports that input data is not modified: summaries are sent
// as a separate batch.
func (*invocationProcessor) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: false}
}

// Start starts the goroutine that fires timers.
func (p *invocationProcessor) Start(context.Context, component.Host) error {
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	if p.stop != nil {
		return nil
	}
	p.stop = make(chan struct{})
	p.done = make(chan struct{})
	go p.run(p.stop, p.done)
	return nil
}

func (p *invocationProcessor) run(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(p.tickIv)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if err := p.tick(context.Background(), p.clock.Now()); err != nil {
				p.logger.Warn("next consumer refused invocation summaries", zap.Error(err))
			}
		}
	}
}

// Shutdown stops the timer goroutine and emits every open invocation as
// incomplete with reason shutdown before returning.
func (p *invocationProcessor) Shutdown(ctx context.Context) error {
	p.lifeMu.Lock()
	stop, done := p.stop, p.done
	p.stop, p.done = nil, nil
	p.lifeMu.Unlock()
	var errs []error
	if stop != nil {
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
	var st stats
	for _, s := range p.shards {
		s.mu.Lock()
		s.shutdown(now, &p.cfg, &st, &s.outbox)
		s.mu.Unlock()
	}
	p.record(ctx, &st)
	for _, s := range p.shards {
		errs = append(errs, p.flush(ctx, s, true))
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
	id    string
	span  ptrace.Span
	res   pcommon.Resource
}

// ConsumeTraces indexes member spans, passes the batch on unchanged, and
// then sends any summaries the batch completed.
func (p *invocationProcessor) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	now := p.clock.Now().UnixNano()
	var refs []indexRef
	rss := td.ResourceSpans()
	for i := 0; i < rss.Len(); i++ {
		rs := rss.At(i)
		sss := rs.ScopeSpans()
		for j := 0; j < sss.Len(); j++ {
			spans := sss.At(j).Spans()
			for k := 0; k < spans.Len(); k++ {
				sp := spans.At(k)
				v, ok := sp.Attributes().Get(contract.AttrInvocationID)
				if !ok || v.Type() != pcommon.ValueTypeStr || v.Str() == "" {
					continue
				}
				if sp.Name() == contract.SpanNameSummary {
					continue // our own output seen again (a second tier); never a member
				}
				id := v.Str()
				refs = append(refs, indexRef{shard: p.shardOf(id), id: id, span: sp, res: rs.Resource()})
			}
		}
	}

	if len(refs) == 0 {
		return p.next.ConsumeTraces(ctx, td)
	}
	var st stats
	var touched []*shard
	for _, group := range p.groupByShard(refs) {
		s := p.shards[group[0].shard]
		if p.indexShard(s, group, now, &st) {
			touched = append(touched, s)
		}
	}
	p.record(ctx, &st)

	errs := []error{p.next.ConsumeTraces(ctx, td)}
	for _, s := range touched {
		errs = append(errs, p.flush(ctx, s, false))
	}
	return errors.Join(errs...)
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
func (p *invocationProcessor) indexShard(s *shard, refs []indexRef, now int64, st *stats) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.touched = s.touched[:0]
	for i := range refs {
		r := &refs[i]
		inv := s.get(r.id, now, &p.cfg, st, &s.outbox)
		switch inv.add(r.span, r.res, now, &p.cfg) {
		case addIndexed:
			st.indexed++
		case addDuplicate:
			st.duplicates++
		case addSpanLimit:
			st.spanLimit++
		}
		s.touch(inv)
	}
	for _, inv := range s.touched {
		s.evaluate(inv, now, &p.cfg, st, &s.outbox)
	}
	clear(s.touched)
	s.touched = s.touched[:0]
	st.outboxDropped += s.trimOutbox()
	return len(s.outbox) > 0
}

// tick fires every due timer (open_timeout, remote_settle, retention) at
// now and sends the resulting summaries.
func (p *invocationProcessor) tick(ctx context.Context, now time.Time) error {
	n := now.UnixNano()
	var st stats
	var errs []error
	for _, s := range p.shards {
		s.mu.Lock()
		s.tick(n, &p.cfg, &st, &s.outbox)
		st.outboxDropped += s.trimOutbox()
		pending := len(s.outbox) > 0
		s.mu.Unlock()
		if pending {
			errs = append(errs, p.flush(ctx, s, false))
		}
	}
	p.record(ctx, &st)
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

// flush sends the shard's outbox to the next consumer. Only one goroutine
// sends a shard's summaries at a time, so they arrive in the order they were
// made (a pending never after its final); a goroutine that finds another one
// sending leaves its summaries to it, unless wait is set (Shutdown). A
// refused batch goes back to the front of the outbox for the next flush,
// unless the error is permanent.
func (p *invocationProcessor) flush(ctx context.Context, s *shard, wait bool) error {
	for {
		if wait {
			s.sendMu.Lock()
		} else if !s.sendMu.TryLock() {
			return nil
		}
		s.mu.Lock()
		out := s.outbox
		s.outbox = nil
		s.mu.Unlock()
		if len(out) == 0 {
			s.sendMu.Unlock()
			// Summaries added while this goroutine held sendMu, by one that
			// then gave up, must not wait for the next batch.
			s.mu.Lock()
			empty := len(s.outbox) == 0
			s.mu.Unlock()
			if empty {
				return nil
			}
			continue
		}
		err := p.next.ConsumeTraces(ctx, buildTraces(out))
		if err != nil {
			p.tel.ProcessorInvocationSummarySendFailures.Add(ctx, 1)
			if !consumererror.IsPermanent(err) && !wait {
				s.mu.Lock()
				s.outbox = append(out, s.outbox...)
				dropped := s.trimOutbox()
				s.mu.Unlock()
				if dropped > 0 {
					p.tel.ProcessorInvocationBoundHits.Add(ctx, dropped, boundOutboxAttr)
					p.logger.Warn("dropped invocation summaries the next consumer did not take", zap.Int64("count", dropped))
				}
			}
			s.sendMu.Unlock()
			return fmt.Errorf("sending %d invocation summaries: %w", len(out), err)
		}
		s.sendMu.Unlock()
		for i := range out {
			p.tel.ProcessorInvocationSummaries.Add(ctx, 1, statusAttr(out[i].status))
		}
	}
}

func (p *invocationProcessor) record(ctx context.Context, st *stats) {
	t := p.tel
	if st.indexed > 0 {
		t.ProcessorInvocationSpansIndexed.Add(ctx, st.indexed)
	}
	if st.duplicates > 0 {
		t.ProcessorInvocationDuplicateSpans.Add(ctx, st.duplicates)
	}
	if st.evicted > 0 {
		t.ProcessorInvocationBoundHits.Add(ctx, st.evicted, boundOpenAttr)
	}
	if st.spanLimit > 0 {
		t.ProcessorInvocationBoundHits.Add(ctx, st.spanLimit, boundSpansAttr)
	}
	if st.forgotten > 0 {
		t.ProcessorInvocationBoundHits.Add(ctx, st.forgotten, boundRetentionAttr)
	}
	if d := st.opened - st.closed; d != 0 {
		t.ProcessorInvocationOpenInvocations.Add(ctx, d)
	}
	for _, d := range st.delays {
		t.ProcessorInvocationFinalityDelay.Record(ctx, d)
	}
	if st.outboxDropped > 0 {
		t.ProcessorInvocationBoundHits.Add(ctx, st.outboxDropped, boundOutboxAttr)
		p.logger.Warn("dropped invocation summaries the next consumer did not take", zap.Int64("count", st.outboxDropped))
	}
}

var (
	statusPendingAttr    = metric.WithAttributeSet(attribute.NewSet(attribute.String("status", contract.StatusPending)))
	statusFinalAttr      = metric.WithAttributeSet(attribute.NewSet(attribute.String("status", contract.StatusFinal)))
	statusIncompleteAttr = metric.WithAttributeSet(attribute.NewSet(attribute.String("status", contract.StatusIncomplete)))
)

func statusAttr(s string) metric.AddOption {
	switch s {
	case contract.StatusPending:
		return statusPendingAttr
	case contract.StatusFinal:
		return statusFinalAttr
	default:
		return statusIncompleteAttr
	}
}
