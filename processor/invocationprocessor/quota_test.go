package invocationprocessor

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadatatest"
)

// consumeAs consumes a batch as an authenticated tenant.
func (h *harness) consumeAs(tenant string, spans ...sp) {
	h.t.Helper()
	require.NoError(h.t, h.p.ConsumeTraces(as(tenant), batch(spans...)))
	h.quiesce()
}

// openRoot is a root whose two declared children never arrive: it stays
// open until evicted or timed out.
func openRoot(inv string, base uint64) sp {
	return scenario(inv, base)[0]
}

// linking is a span of inv holding n followup links to spans that never
// arrive: each target is a span ID the invocation holds (v0.6 rule 5), so
// it grows the invocation's state by n entries.
func linking(inv string, base uint64, n int) sp {
	s := sp{inv: inv, name: "continue_agent flood", trace: base + 1, id: base + 2, start: 1, end: 2, role: contract.RoleContinuation, children: int64(0)}
	for i := range n {
		s.followupOf = append(s.followupOf, base+1000+uint64(i))
	}
	return s
}

func lastStatusReason(t *testing.T, h *harness, tenant, id string) (string, []string) {
	t.Helper()
	sums := h.ofTenant(tenant, id)
	if tenant == "" {
		sums = h.of(id)
	}
	require.NotEmpty(t, sums, "no summary of %s/%s", tenant, id)
	last := sums[len(sums)-1]
	return strAttr(last, contract.AttrStatus), strsAttr(last, contract.AttrIncompleteReasons)
}

func TestInvocationIDOverCapIsNotIndexed(t *testing.T) {
	h := newHarness(t, 4, func(c *Config) { c.MaxInvocationIDBytes = 64 })
	long := strings.Repeat("x", 65)
	fits := strings.Repeat("y", 64)
	h.consume(batch(scenario(long, 0)...))
	h.consume(batch(scenario(fits, 100)...))
	h.advance(time.Second)

	assert.Equal(t, 12, h.passed(), "every span passes through")
	assert.Empty(t, h.of(long), "an invocation whose id is over the cap gets no summary, so it is never final")
	assert.Nil(t, heldInvocation(h.p, long))
	status, _ := lastStatusReason(t, h, "", fits)
	assert.Equal(t, contract.StatusFinal, status)
	h.shutdown()
}

func TestNamesAreCut(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.MaxNameBytes = 32 })
	s := scenario("inv-1", 0)
	big := strings.Repeat("é", 64*1024) // two bytes each: cuts fall inside runes
	s[0].name = "invoke_agent " + big
	s[0].extra = map[string]any{contract.AttrConversationID: "session-" + big, contract.AttrAgentName: "agent-" + big, contract.AttrOperationName: contract.OpInvokeAgent}
	s[2].name = "execute_tool " + big
	h.consume(batch(s...))
	h.advance(time.Second)

	status, _ := lastStatusReason(t, h, "", "inv-1")
	require.Equal(t, contract.StatusFinal, status, "names prove nothing: the totals stay exact")
	sum := h.of("inv-1")[0]
	assert.Equal(t, int64(150), intAttr(sum, contract.AttrUsageInputTokens))
	for _, k := range []string{contract.AttrConversationID, contract.AttrAgentName} {
		v := strAttr(sum, k)
		assert.LessOrEqual(t, len(v), 32, k)
		assert.True(t, utf8.ValidString(v), k)
		assert.True(t, strings.HasSuffix(v, ellipsis), k)
	}
	for _, n := range heldInvocation(h.p, "inv-1").Names {
		assert.LessOrEqual(t, len(n), 32)
	}
	h.shutdown()
}

func TestCapName(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want string
	}{
		{"short", "short"},
		{strings.Repeat("a", 16), strings.Repeat("a", 16)},
		{strings.Repeat("a", 17), strings.Repeat("a", 13) + ellipsis},
		{strings.Repeat("é", 9), strings.Repeat("é", 6) + ellipsis}, // 18 bytes: 13 rounds down to 12
		{"abcd" + strings.Repeat("😀", 4), "abcd😀😀…"},                // 20 bytes: 13 rounds down to 12
	} {
		got, cut := capName(tc.in, 16)
		assert.Equal(t, tc.want, got)
		assert.Equal(t, tc.in != tc.want, cut)
		assert.LessOrEqual(t, len(got), 16)
		assert.True(t, utf8.ValidString(got))
	}
}

// One tenant's flood evicts only its own invocations: issue 23's point 3.
func TestTenantQuotaEvictsOnlyItsOwn(t *testing.T) {
	h := newHarness(t, 4, func(c *Config) {
		authTenants(c)
		c.MaxOpenInvocations = 40
		c.Tenant.MaxOpenInvocations = 10
		c.PendingDelay = 0
	})
	b := scenario("b-1", 0)
	h.consumeAs("tenant-b", b[0], b[1]) // open: the tool and the rest are missing
	for i := range 120 {
		h.consumeAs("tenant-a", openRoot(fmt.Sprintf("a-%d", i), uint64(1000+10*i)))
	}
	assert.EqualValues(t, 10, h.p.bounds.tenant("tenant-a").open.Load())
	assert.EqualValues(t, 1, h.p.bounds.tenant("tenant-b").open.Load())
	assert.Empty(t, h.ofTenant("tenant-b", "b-1")[1:], "tenant B's invocation got only its pending")
	h.consumeAs("tenant-b", b[2:]...)
	status, _ := lastStatusReason(t, h, "tenant-b", "b-1")
	assert.Equal(t, contract.StatusFinal, status)
	status, reasons := lastStatusReason(t, h, "tenant-a", "a-0")
	assert.Equal(t, contract.StatusIncomplete, status)
	assert.Contains(t, reasons, contract.ReasonEvicted)
	h.shutdown()
}

// With quotas that add up to more than the global bound, the global bound
// evicts from the tenant holding the most.
func TestGlobalBoundEvictsTheLargestTenant(t *testing.T) {
	h := newHarness(t, 4, func(c *Config) {
		authTenants(c)
		c.MaxOpenInvocations = 20
		c.Tenant.MaxOpenInvocations = 20
		c.PendingDelay = 0
	})
	for i := range 5 {
		h.consumeAs("tenant-b", openRoot(fmt.Sprintf("b-%d", i), uint64(10*i)))
	}
	for i := range 100 {
		h.consumeAs("tenant-a", openRoot(fmt.Sprintf("a-%d", i), uint64(1000+10*i)))
	}
	assert.EqualValues(t, 15, h.p.bounds.tenant("tenant-a").open.Load())
	assert.EqualValues(t, 5, h.p.bounds.tenant("tenant-b").open.Load())
	for i := range 5 {
		sums := h.ofTenant("tenant-b", fmt.Sprintf("b-%d", i))
		require.Len(t, sums, 1)
		assert.Equal(t, contract.StatusPending, strAttr(sums[0], contract.AttrStatus))
	}
	h.shutdown()
}

// The byte quota evicts a tenant whose few invocations hold much state
// (many link targets), and not the other tenant.
func TestTenantByteQuota(t *testing.T) {
	h := newHarness(t, 4, func(c *Config) {
		authTenants(c)
		c.MaxOpenBytes = 4 << 20
		c.Tenant.MaxOpenBytes = 1 << 20
		c.PendingDelay = 0
	})
	b := scenario("b-1", 0)
	h.consumeAs("tenant-b", b[0], b[1])
	bBytes := h.p.bounds.tenant("tenant-b").openBytes.Load()
	require.Positive(t, bBytes)
	for i := range 40 {
		h.consumeAs("tenant-a", linking(fmt.Sprintf("a-%d", i), uint64(100000*(i+1)), 2000))
		assert.LessOrEqual(t, h.p.bounds.tenant("tenant-a").openBytes.Load(), int64(1<<20))
	}
	assert.EqualValues(t, bBytes, h.p.bounds.tenant("tenant-b").openBytes.Load())
	assert.Len(t, h.ofTenant("tenant-b", "b-1"), 1, "only B's pending: not evicted")
	status, reasons := lastStatusReason(t, h, "tenant-a", "a-0")
	assert.Equal(t, contract.StatusIncomplete, status)
	assert.Contains(t, reasons, contract.ReasonEvicted)
	h.consumeAs("tenant-b", b[2:]...)
	status, _ = lastStatusReason(t, h, "tenant-b", "b-1")
	assert.Equal(t, contract.StatusFinal, status)
	h.shutdown()
}

// max_open_bytes bounds the open state and the retained closed state.
func TestMaxOpenBytes(t *testing.T) {
	const budget = 2 << 20
	h := newHarness(t, 4, func(c *Config) { c.MaxOpenBytes = budget })
	var perInv int64
	for i := range 60 {
		h.consume(batch(linking(fmt.Sprintf("inv-%d", i), uint64(100000*(i+1)), 2000)))
		if i == 0 {
			perInv = h.p.bounds.openBytes.Load()
		}
		assert.LessOrEqual(t, h.p.bounds.openBytes.Load(), int64(budget))
		assert.LessOrEqual(t, h.p.bounds.closedBytes.Load(), int64(budget))
	}
	held := h.p.bounds.open.Load()
	assert.EqualValues(t, budget/perInv, held, "as many as fit (%d bytes each)", perInv)
	status, reasons := lastStatusReason(t, h, "", "inv-0")
	assert.Equal(t, contract.StatusIncomplete, status)
	assert.Contains(t, reasons, contract.ReasonEvicted)
	h.shutdown()
	assert.Zero(t, h.p.bounds.openBytes.Load(), "shutdown closed every open invocation")
}

// Under memory pressure the timer sheds the state of the tenant holding
// the most, without any data arriving; a tenant that holds less is left
// alone while there is more to shed elsewhere.
func TestShedUnderPressure(t *testing.T) {
	heap := uint64(100 << 20)
	gcs := 0
	h := newHarness(t, 4, func(c *Config) {
		authTenants(c)
		c.ShedHeapBytes = 50 << 20
	})
	h.p.heapBytes = func() uint64 { return heap }
	h.p.gc = func() { gcs++ }
	b := scenario("b-1", 0)
	h.consumeAs("tenant-b", b[0], b[1])
	for i := range 40 {
		h.consumeAs("tenant-a", linking(fmt.Sprintf("a-%d", i), uint64(100000*(i+1)), 500))
	}
	a := h.p.bounds.tenant("tenant-a")
	before := heldBytes(a)
	h.advance(time.Millisecond)
	assert.Equal(t, 1, gcs)
	assert.Less(t, heldBytes(a), before)
	assert.GreaterOrEqual(t, before-heldBytes(a), before/shedFraction-before/40, "a quarter of the ledger's bytes per tick")
	bt := h.p.bounds.tenant("tenant-b")
	for i := 0; heldBytes(a) > 2*heldBytes(bt); i++ {
		require.Less(t, i, 40, "shedding stalled")
		h.advance(time.Millisecond)
		require.EqualValues(t, 1, bt.open.Load(), "B is not shed while A holds more")
	}
	assert.Zero(t, a.open.Load(), "tenant A's open invocations are shed")
	status, reasons := lastStatusReason(t, h, "tenant-a", "a-39")
	assert.Equal(t, contract.StatusIncomplete, status)
	assert.Contains(t, reasons, contract.ReasonEvicted)

	heap = 10 << 20 // the pressure is gone: nothing more is shed
	n := gcs
	h.advance(time.Millisecond)
	assert.Equal(t, n, gcs)
	h.consumeAs("tenant-b", b[2:]...)
	status, _ = lastStatusReason(t, h, "tenant-b", "b-1")
	assert.Equal(t, contract.StatusFinal, status)
	h.shutdown()
}

func TestBoundTelemetry(t *testing.T) {
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
	cfg := createDefaultConfig().(*Config)
	authTenants(cfg)
	cfg.MaxInvocationIDBytes = 32
	cfg.MaxNameBytes = 16
	cfg.MaxOpenInvocations = 10
	cfg.Tenant.MaxOpenInvocations = 2
	p, err := newProcessor(metadatatest.NewSettings(tt), cfg, consumertest.NewNop(), newFakeClock(), 2)
	require.NoError(t, err)
	ctx := as("tenant-a")
	require.NoError(t, p.ConsumeTraces(ctx, batch(openRoot(strings.Repeat("i", 33), 0))))
	for i := range 3 {
		root := openRoot(fmt.Sprintf("inv-%d", i), uint64(10*(i+1)))
		root.name = strings.Repeat("n", 17)
		require.NoError(t, p.ConsumeTraces(ctx, batch(root)))
	}
	require.NoError(t, p.Shutdown(context.Background()))
	metadatatest.AssertEqualProcessorInvocationBoundHits(t, tt, []metricdata.DataPoint[int64]{
		{Value: 1, Attributes: attribute.NewSet(attribute.String("bound", boundIDBytes))},
		{Value: 3, Attributes: attribute.NewSet(attribute.String("bound", boundNameBytes))},
		{Value: 1, Attributes: attribute.NewSet(attribute.String("bound", boundTenantOpen))},
	}, metricdatatest.IgnoreTimestamp())
	got, err := tt.GetMetric("otelcol_processor_invocation_ledger_bytes")
	require.NoError(t, err)
	var open, closed int64
	for _, dp := range got.Data.(metricdata.Sum[int64]).DataPoints {
		if v, _ := dp.Attributes.Value("state"); v.AsString() == "open" {
			open = dp.Value
		} else {
			closed = dp.Value
		}
	}
	assert.Zero(t, open, "shutdown closed every open invocation")
	assert.Positive(t, closed)
	assert.Equal(t, p.bounds.closedBytes.Load(), closed)
}
