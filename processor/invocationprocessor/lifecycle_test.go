package invocationprocessor

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	"go.uber.org/goleak"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadatatest"
)

// blockingConsumer passes span batches on and blocks the first summary
// batch until released (or, with honourCtx, until its context is done).
type blockingConsumer struct {
	consumertest.TracesSink
	entered   chan struct{}
	release   chan struct{}
	honourCtx bool
	blocked   bool
}

func newBlockingConsumer(honourCtx bool) *blockingConsumer {
	return &blockingConsumer{entered: make(chan struct{}), release: make(chan struct{}), honourCtx: honourCtx}
}

func (b *blockingConsumer) ConsumeTraces(ctx context.Context, td ptrace.Traces) error {
	if len(summarySpans([]ptrace.Traces{td})) > 0 && !b.blocked {
		b.blocked = true // only one goroutine sends summaries at a time
		close(b.entered)
		if b.honourCtx {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-b.release:
			}
		} else {
			<-b.release
		}
	}
	return b.TracesSink.ConsumeTraces(ctx, td)
}

// within fails the test if f does not return in a generous real-time
// bound; it guards against a hang, it never paces the test.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not return", what)
	}
}

func TestSummaryFailureNotReturnedFromConsumeTraces(t *testing.T) {
	refused := errors.New("refused")
	next := &flakyConsumer{fail: 1, err: refused}
	clk := newFakeClock()
	p, err := newProcessor(settingsForTest(), createDefaultConfig().(*Config), next, clk, 1)
	require.NoError(t, err)
	// The batch went on: returning the summary's error would make the
	// receiver retry it, and every span of it would go downstream twice.
	require.NoError(t, p.ConsumeTraces(context.Background(), batch(scenario("inv-1", 0)...)))
	assert.Equal(t, 6, next.SpanCount(), "the spans passed through once")
	assert.Empty(t, summarySpans(next.AllTraces()))
	require.NoError(t, p.tick(context.Background(), clk.Advance(time.Second)))
	got := summarySpans(next.AllTraces())
	require.Len(t, got, 1, "the refused summary is sent again from the outbox")
	assertStatus(t, got[0], contract.StatusFinal, 1)
	assert.Equal(t, 6+1, next.SpanCount())
	require.NoError(t, p.Shutdown(context.Background()))
}

func TestPassThroughErrorReturned(t *testing.T) {
	refused := errors.New("refused")
	p, err := newProcessor(settingsForTest(), createDefaultConfig().(*Config), consumertest.NewErr(refused), newFakeClock(), 1)
	require.NoError(t, err)
	require.ErrorIs(t, p.ConsumeTraces(context.Background(), batch(scenario("inv-1", 0)...)), refused)
	require.ErrorIs(t, p.Shutdown(context.Background()), refused, "summaries not delivered at shutdown are reported")
}

func TestOutboxBoundCountsDrops(t *testing.T) {
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
	cfg := createDefaultConfig().(*Config)
	cfg.MaxOpenInvocations = 4
	next := &flakyConsumer{fail: 1 << 30, err: errors.New("down")}
	clk := newFakeClock()
	p, err := newProcessor(metadatatest.NewSettings(tt), cfg, next, clk, 1)
	require.NoError(t, err)
	n := p.outboxLimit + 5
	for i := range n {
		require.NoError(t, p.ConsumeTraces(context.Background(), batch(scenario(fmt.Sprintf("inv-%d", i), uint64(i*100))...)))
	}
	waiting := 0
	for _, s := range p.shards {
		waiting += len(s.outbox)
	}
	assert.Equal(t, p.outboxLimit, waiting, "the outbox is bounded")
	metadatatest.AssertEqualProcessorInvocationBoundHits(t, tt, []metricdata.DataPoint[int64]{
		{Value: int64(n - p.outboxLimit), Attributes: attribute.NewSet(attribute.String("bound", boundOutbox))},
		{Value: int64(n - cfg.MaxOpenInvocations), Attributes: attribute.NewSet(attribute.String("bound", boundRetention))},
	}, metricdatatest.IgnoreTimestamp())
	next.mu.Lock()
	next.fail = 0
	next.mu.Unlock()
	require.NoError(t, p.Shutdown(context.Background()))
	assert.Len(t, summarySpans(next.AllTraces()), p.outboxLimit, "what waited is delivered at shutdown")
}

func TestShutdownHonoursDeadlineWhenNextBlocks(t *testing.T) {
	next := newBlockingConsumer(false) // ignores its context
	cfg := createDefaultConfig().(*Config)
	cfg.EmitPending = false
	p, err := newProcessor(settingsForTest(), cfg, next, newFakeClock(), 1)
	require.NoError(t, err)
	require.NoError(t, p.Start(context.Background(), componenttest.NewNopHost()))
	require.NoError(t, p.ConsumeTraces(context.Background(), batch(scenario("inv-1", 0)[:3]...)))

	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-next.entered; cancel() }()
	var shutdownErr error
	within(t, "Shutdown", func() { shutdownErr = p.Shutdown(ctx) })
	require.ErrorIs(t, shutdownErr, context.Canceled)
	close(next.release) // the abandoned send finishes; nothing leaks
	goleak.VerifyNone(t, goleak.IgnoreCurrent())
}

func TestTimerGoroutineSendIsCancelledAtShutdown(t *testing.T) {
	next := newBlockingConsumer(true)
	cfg := createDefaultConfig().(*Config)
	cfg.EmitPending = false
	clk := newFakeClock()
	p, err := newProcessor(settingsForTest(), cfg, next, clk, 1)
	require.NoError(t, err)
	spans := scenario("inv-1", 0)
	spans[2].remote = true
	require.NoError(t, p.ConsumeTraces(context.Background(), batch(spans...)))
	clk.Advance(cfg.RemoteSettle) // the timer goroutine finds the settle timer due
	require.NoError(t, p.Start(context.Background(), componenttest.NewNopHost()))
	<-next.entered // the timer goroutine is sending, blocked
	within(t, "Shutdown", func() { require.NoError(t, p.Shutdown(context.Background())) })
	got := summarySpans(next.AllTraces())
	require.Len(t, got, 1, "the summary the cancelled send held is delivered at shutdown")
	assertStatus(t, got[0], contract.StatusFinal, 1)
}

func TestMaxOpenInvocationsIsGlobal(t *testing.T) {
	for _, shards := range []int{1, 7, 64} {
		t.Run(fmt.Sprintf("shards-%d", shards), func(t *testing.T) {
			const limit = 1000
			h := newHarness(t, shards, func(c *Config) { c.MaxOpenInvocations = limit })
			open := func(i int) {
				h.clock.Advance(time.Millisecond)
				h.consume(batch(sp{inv: fmt.Sprintf("inv-%d", i), name: "chat", trace: uint64(i + 1), id: uint64(i + 1), start: 0, end: 1,
					op: contract.OpChat, usage: tokens(1, 1)}))
			}
			for i := range limit {
				open(i)
			}
			assert.Empty(t, h.summaries(), "no eviction at exactly max_open_invocations")
			open(limit)
			got := h.summaries()
			require.Len(t, got, 1, "one eviction once the bound is exceeded")
			assert.Equal(t, "inv-0", strAttr(got[0], contract.AttrInvocationID), "the oldest open invocation is evicted")
			assertStatus(t, got[0], contract.StatusIncomplete, 1)
			assert.Equal(t, []string{contract.ReasonRootMissing, contract.ReasonEvicted}, strsAttr(got[0], contract.AttrIncompleteReasons))
			open(limit + 1)
			got = h.summaries()
			require.Len(t, got, 2)
			assert.Equal(t, "inv-1", strAttr(got[1], contract.AttrInvocationID))
		})
	}
}

func TestRetentionBoundIsGlobal(t *testing.T) {
	const limit = 10
	h := newHarness(t, 8, func(c *Config) { c.MaxOpenInvocations = limit })
	for i := range limit + 1 {
		h.clock.Advance(time.Millisecond)
		h.consume(batch(scenario(fmt.Sprintf("inv-%d", i), uint64(i*100))...))
	}
	closed := 0
	for _, s := range h.p.shards {
		closed += s.closed.n
		_, kept := s.invs["inv-0"]
		assert.False(t, kept, "the oldest closed invocation is forgotten first")
	}
	assert.Equal(t, limit, closed, "closed invocations kept: exactly max_open_invocations, across shards")
}
