package invocationprocessor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
)

// A span's facts are encoded before the shard's lock (encodeFacts) and
// copied into the record: a batch whose write failed returns the error,
// its record stays queued, and what the sender does with its request
// afterwards (here: reuse its memory for other values) changes nothing
// of what is written later and replayed after a restart.
func TestStorageFailedWriteKeepsFactsAsIndexed(t *testing.T) {
	mem := newMemStorage()
	clk := newFakeClock()
	sink := new(consumertest.TracesSink)
	h := newStoredHarness(t, mem, clk, sink, nil)
	s := scenario("inv-1", 0)
	ctx := context.Background()

	td := batch(s[0], s[1], s[2], s[3])
	mem.setFailWrites(true)
	require.ErrorIs(t, h.p.ConsumeTraces(ctx, td), errInjected)
	// The receiver reuses the request: every span's facts change.
	spans := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans()
	for i := 0; i < spans.Len(); i++ {
		scribble(spans.At(i))
	}
	td.ResourceSpans().At(0).Resource().Attributes().PutStr("service.name", "scribbled")
	// A concurrent request that was past store.ready before the failure
	// encodes its facts, most likely in the pooled scratch the failed
	// request used (the failed record holds its own copy: the record was
	// encoded by the failed commit, its facts copied into its arena
	// before that).
	b := h.p.getScratch()
	h.p.route(ctx, batch(scenario("inv-8", 800)...), b)
	h.p.store.encodeFacts(b)
	h.p.putScratch(b)
	mem.setFailWrites(false)
	// The queued record is written by the next commit, not by a retry of
	// the request: another request's (which reuses the pooled scratch
	// the facts were encoded in), then a tick's.
	h.consume(batch(scenario("inv-9", 900)...))
	h.advance(time.Second)
	h.shutdown()

	h2 := newStoredHarness(t, mem, clk, new(consumertest.TracesSink), nil)
	h2.consume(batch(s[4], s[5]))
	sums := h2.of("inv-1")
	require.Len(t, sums, 1)
	assert.Equal(t, contract.StatusFinal, strAttr(sums[0], contract.AttrStatus))
	assert.Equal(t, int64(150), intAttr(sums[0], contract.AttrUsageInputTokens))
	assert.Equal(t, "coder", strAttr(sums[0], contract.AttrAgentName))
	h2.shutdown()
}

// scribble overwrites what the ledger reads of a span.
func scribble(span ptrace.Span) {
	span.SetName("scribbled")
	span.SetSpanID([8]byte{0xee, 0xee})
	a := span.Attributes()
	if _, ok := a.Get(contract.AttrUsageInputTokens); ok {
		a.PutInt(contract.AttrUsageInputTokens, 999_999)
	}
	if _, ok := a.Get(contract.AttrAgentName); ok {
		a.PutStr(contract.AttrAgentName, "scribbled")
	}
	a.PutStr(contract.AttrRole, contract.RoleRoot)
}

// A locked section whose spans were not encoded before the lock encodes
// them in it, to the same stored bytes.
func TestStorageFactsEncodedInTheLockWhenNotBefore(t *testing.T) {
	// One request for both (batch's attribute order is a map's).
	td := batch(append(scenario("inv-1", 0), scenario("inv-2", 100)...)...)
	stored := func(encodeFirst bool) map[string][]byte {
		mem := newMemStorage()
		h := newStoredHarness(t, mem, newFakeClock(), new(consumertest.TracesSink), nil)
		p := h.p
		b := p.getScratch()
		defer p.putScratch(b)
		p.route(context.Background(), td, b)
		require.NotEmpty(t, b.refs)
		if encodeFirst {
			p.store.encodeFacts(b)
		}
		p.groupByShard(b)
		var st stats
		for _, group := range b.groups {
			p.shards[group[0].shard].index(group, p.clock.Now().UnixNano(), &st)
		}
		require.NoError(t, p.commitBatch(context.Background(), &b.touched))
		return mem.snapshot()
	}
	before, in := stored(true), stored(false)
	assert.Equal(t, before, in)
	logs := 0
	for k := range before {
		if k[0] == 'l' {
			logs++
		}
	}
	assert.Positive(t, logs, "the batch wrote log records")
}
