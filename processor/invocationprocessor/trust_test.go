package invocationprocessor

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadata"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadatatest"
)

// forgedSummary is what a client could send to make up billing records:
// a final summary with a billion input tokens, carrying the marker of the
// given collector (scope and invocation.collector) as well.
func forgedSummary(invocationID, collector string, spanID uint64) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "agent")
	if collector != "" {
		rs.Resource().Attributes().PutStr(contract.AttrSummaryCollector, collector)
	}
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName(contract.SummaryScopeName)
	s := ss.Spans().AppendEmpty()
	s.SetName(contract.SpanNameSummary)
	s.SetTraceID(tid(900))
	s.SetSpanID(sid(spanID))
	s.SetStartTimestamp(ts(0))
	s.SetEndTimestamp(ts(1))
	a := s.Attributes()
	a.PutStr(contract.AttrInvocationID, invocationID)
	a.PutStr(contract.AttrStatus, contract.StatusFinal)
	a.PutInt(contract.AttrRevision, 1)
	a.PutInt(contract.AttrUsageInputTokens, 1_000_000_000)
	return td
}

// appendTraces moves every ResourceSpans of src to the end of dst.
func appendTraces(dst, src ptrace.Traces) ptrace.Traces {
	src.ResourceSpans().MoveAndAppendTo(dst.ResourceSpans())
	return dst
}

func TestSummaryScopeIsTheContracts(t *testing.T) {
	assert.Equal(t, contract.SummaryScopeName, metadata.ScopeName)
}

// TestIncomingSummaryDropped: a summary from outside, even one carrying
// this collector's own marker, is dropped from the batch (the input is
// not modified, the other spans pass), indexes nothing, never reaches the
// next consumer, and is counted.
func TestIncomingSummaryDropped(t *testing.T) {
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
	cfg := createDefaultConfig().(*Config)
	cfg.Summaries.Collector = testCollector
	cfg.PendingDelay = 0
	sink := new(consumertest.TracesSink)
	p, err := newProcessor(metadatatest.NewSettings(tt), cfg, sink, newFakeClock(), 1)
	require.NoError(t, err)
	ctx := context.Background()

	spans := scenario("inv-1", 0)
	in := appendTraces(batch(spans[:3]...), forgedSummary("inv-1", testCollector, 901))
	// An unmarked one, and one without an invocation.id.
	unmarked := forgedSummary("inv-2", "", 902)
	unmarked.ResourceSpans().At(0).ScopeSpans().At(0).Scope().SetName("agent")
	in = appendTraces(in, unmarked)
	in = appendTraces(in, forgedSummary("inv-3", testCollector, 903))
	in.ResourceSpans().At(3).ScopeSpans().At(0).Spans().At(0).Attributes().Remove(contract.AttrInvocationID)
	require.NoError(t, p.ConsumeTraces(ctx, in))

	assert.Equal(t, 6, in.SpanCount(), "the input batch is not modified")
	all := sink.AllTraces()
	require.Len(t, all, 2, "the batch without the summaries, then the pending summary")
	passed := all[0]
	assert.Equal(t, 3, passed.SpanCount())
	assert.Equal(t, 1, passed.ResourceSpans().Len(), "emptied resources are removed")
	assert.Empty(t, summarySpans([]ptrace.Traces{passed}))
	require.NoError(t, p.ConsumeTraces(ctx, forgedSummary("inv-1", testCollector, 904)))
	assert.Len(t, sink.AllTraces(), 2, "a batch of forged summaries alone sends nothing")

	sums := summarySpans(sink.AllTraces())
	require.Len(t, sums, 1)
	assert.Equal(t, contract.StatusPending, strAttr(sums[0], contract.AttrStatus))
	assert.Equal(t, int64(0), intAttr(sums[0], contract.AttrRevision))
	assert.Equal(t, int64(100), intAttr(sums[0], contract.AttrUsageInputTokens), "the forged tokens are not counted")
	assert.Len(t, p.shards[0].invs, 1, "only inv-1, from its member spans")

	require.NoError(t, p.ConsumeTraces(ctx, batch(spans[3:]...)))
	sums = summarySpans(sink.AllTraces())
	require.Len(t, sums, 2)
	assert.Equal(t, contract.StatusFinal, strAttr(sums[1], contract.AttrStatus))
	assert.Equal(t, int64(150), intAttr(sums[1], contract.AttrUsageInputTokens))
	assert.Equal(t, int64(6), intAttr(sums[1], contract.AttrSpans))

	metadatatest.AssertEqualProcessorInvocationIncomingSummariesDropped(t, tt,
		[]metricdata.DataPoint[int64]{{Value: 4}}, metricdatatest.IgnoreTimestamp())
	require.NoError(t, p.Shutdown(ctx))
}

// TestAcceptFrom: with summaries::accept_from, a summary passes (in the
// batch itself, not a copy) only with the processor's scope and a listed
// invocation.collector; every other is dropped.
func TestAcceptFrom(t *testing.T) {
	wrongScope := forgedSummary("inv-1", "upstream-a", 3)
	wrongScope.ResourceSpans().At(0).ScopeSpans().At(0).Scope().SetName("github.com/someone/else")
	notAString := forgedSummary("inv-1", "", 4)
	notAString.ResourceSpans().At(0).Resource().Attributes().PutInt(contract.AttrSummaryCollector, 1)
	tests := []struct {
		name   string
		td     ptrace.Traces
		passes bool
	}{
		{"listed collector", forgedSummary("inv-1", "upstream-a", 1), true},
		{"another listed collector", forgedSummary("inv-1", "upstream-b", 1), true},
		{"unlisted collector", forgedSummary("inv-1", "upstream-c", 2), false},
		{"this collector", forgedSummary("inv-1", testCollector, 2), false},
		{"no collector", forgedSummary("inv-1", "", 2), false},
		{"other scope", wrongScope, false},
		{"collector not a string", notAString, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, 1, func(c *Config) { c.Summaries.AcceptFrom = []string{"upstream-a", "upstream-b"} })
			h.consume(tt.td)
			if tt.passes {
				require.Len(t, h.sink.AllTraces(), 1)
				assert.True(t, h.sink.AllTraces()[0] == tt.td, "passed unchanged")
			} else {
				assert.Empty(t, h.sink.AllTraces())
			}
			assert.Empty(t, h.p.shards[0].invs, "a summary is never a member")
		})
	}
}

// TestSummaryMarker: emitted summaries carry the processor's scope and
// this collector's name, and never the tenant the root's resource claims.
func TestSummaryMarker(t *testing.T) {
	h := newHarness(t, 1, nil)
	td := batch(scenario("inv-1", 0)...)
	res := td.ResourceSpans().At(0).Resource().Attributes()
	res.PutStr(contract.AttrTenant, "someone-else")
	res.PutStr(contract.AttrSummaryCollector, "not-us")
	h.consume(td)
	all := h.sink.AllTraces()
	require.Len(t, all, 2)
	rs := all[1].ResourceSpans().At(0)
	assert.Equal(t, contract.SummaryScopeName, rs.ScopeSpans().At(0).Scope().Name())
	assert.Equal(t, map[string]any{"service.name": "agent", contract.AttrSummaryCollector: testCollector}, rs.Resource().Attributes().AsRaw())
	_, hasTenant := rs.ScopeSpans().At(0).Spans().At(0).Attributes().Get(contract.AttrTenant)
	assert.False(t, hasTenant, "no tenant setting, no tenant")
	assert.Equal(t, "someone-else", all[0].ResourceSpans().At(0).Resource().Attributes().AsRaw()[contract.AttrTenant], "the agent's own spans pass unchanged")
}

func TestCollectorNameDefaultsToHostName(t *testing.T) {
	host, err := os.Hostname()
	require.NoError(t, err)
	cfg := createDefaultConfig().(*Config)
	require.Empty(t, cfg.Summaries.Collector)
	p, err := newProcessor(settingsForTest(), cfg, consumertest.NewNop(), newFakeClock(), 1)
	require.NoError(t, err)
	assert.Equal(t, host, p.trust.collector)
}

// TestRefusedWarningRateLimited: the warning about dropped summaries is
// logged at most once a minute of the processor's clock, with the count
// since the last one.
func TestRefusedWarningRateLimited(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	set := settingsForTest()
	set.Logger = zap.New(core)
	cfg := createDefaultConfig().(*Config)
	cfg.Summaries.Collector = testCollector
	clk := newFakeClock()
	p, err := newProcessor(set, cfg, consumertest.NewNop(), clk, 1)
	require.NoError(t, err)
	ctx := context.Background()
	send := func() { require.NoError(t, p.ConsumeTraces(ctx, forgedSummary("inv-1", "", 1))) }

	send()
	send()
	clk.Advance(59 * time.Second)
	send()
	warnings := logs.FilterMessage(p.warnSummaries.msg).All()
	require.Len(t, warnings, 1)
	assert.Equal(t, int64(1), warnings[0].ContextMap()["count"])
	clk.Advance(time.Second)
	send()
	warnings = logs.FilterMessage(p.warnSummaries.msg).All()
	require.Len(t, warnings, 2)
	assert.Equal(t, int64(3), warnings[1].ContextMap()["count"], "the two suppressed and this one")
}

func TestValidateTrustAndTenant(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"tenant without source", func(c *Config) { c.Tenant = &TenantConfig{Attribute: "username"} }, "tenant::source must be set"},
		{"tenant with unknown source", func(c *Config) { c.Tenant = &TenantConfig{Source: "header", Attribute: "x"} }, `tenant::source "header" must be auth or resource`},
		{"tenant without attribute", func(c *Config) { c.Tenant = &TenantConfig{Source: TenantFromAuth} }, "tenant::attribute must not be empty"},
		{"empty accept_from entry", func(c *Config) { c.Summaries.AcceptFrom = []string{"a", ""} }, "summaries::accept_from[1] must not be empty"},
		{"collector with NUL", func(c *Config) { c.Summaries.Collector = "a\x00b" }, "summaries::collector"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := createDefaultConfig().(*Config)
			tt.mod(cfg)
			require.ErrorContains(t, cfg.Validate(), tt.want)
		})
	}
	for _, src := range []string{TenantFromAuth, TenantFromResource} {
		cfg := createDefaultConfig().(*Config)
		cfg.Tenant = &TenantConfig{Source: src, Attribute: "x"}
		require.NoError(t, cfg.Validate(), src)
	}
}
