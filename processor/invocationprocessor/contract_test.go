package invocationprocessor

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/contract/fixtures"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// fixtureBase is the instant the fixtures' nanosecond offsets count from.
var fixtureBase = ts(0)

// fixtureTraces turns one fixture span into a batch of its own.
func fixtureTraces(s fixtures.Span) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "agent")
	span := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	span.SetTraceID(pcommon.TraceID(s.TraceID))
	span.SetSpanID(pcommon.SpanID(s.SpanID))
	span.SetParentSpanID(pcommon.SpanID(s.Parent))
	span.SetName(s.Name)
	switch s.Status {
	case fixtures.StatusOK:
		span.Status().SetCode(ptrace.StatusCodeOk)
	case fixtures.StatusError:
		span.Status().SetCode(ptrace.StatusCodeError)
	}
	span.SetStartTimestamp(fixtureBase + pcommon.Timestamp(s.StartNS))
	span.SetEndTimestamp(fixtureBase + pcommon.Timestamp(s.EndNS))
	fixtureAttrs(span.Attributes(), s.Attributes)
	span.SetDroppedAttributesCount(uint32(s.DroppedAttributes))
	span.SetDroppedLinksCount(uint32(s.DroppedLinks))
	for _, l := range s.Links {
		pl := span.Links().AppendEmpty()
		pl.SetTraceID(pcommon.TraceID(l.TraceID))
		pl.SetSpanID(pcommon.SpanID(l.SpanID))
		fixtureAttrs(pl.Attributes(), l.Attributes)
		pl.SetDroppedAttributesCount(uint32(l.DroppedAttributes))
	}
	return td
}

func fixtureAttrs(m pcommon.Map, attrs map[string]fixtures.Value) {
	for k, v := range attrs {
		fixtureValue(m.PutEmpty(k), v)
	}
}

func fixtureValue(dst pcommon.Value, v fixtures.Value) {
	switch v.Kind() {
	case fixtures.KindStr:
		dst.SetStr(v.Str())
	case fixtures.KindInt:
		dst.SetInt(v.Int())
	case fixtures.KindDouble:
		dst.SetDouble(v.Double())
	case fixtures.KindBool:
		dst.SetBool(v.Bool())
	case fixtures.KindArray:
		sl := dst.SetEmptySlice()
		for _, e := range v.Array() {
			fixtureValue(sl.AppendEmpty(), e)
		}
	}
}

// observed is an invocation's outcome as the processor shows it: its
// latest summary, or its open state when nothing closed it.
type observed struct {
	status      string
	revision    int64
	reasons     []string
	anomalies   []string
	usage       fixtures.Usage
	afterResult fixtures.AfterResult
}

func observedFromSpan(s ptrace.Span) observed {
	return observed{
		status:    strAttr(s, contract.AttrStatus),
		revision:  intAttr(s, contract.AttrRevision),
		reasons:   strsAttr(s, contract.AttrIncompleteReasons),
		anomalies: strsAttr(s, contract.AttrAnomalies),
		usage: fixtures.Usage{
			Input:         intAttr(s, contract.AttrUsageInputTokens),
			Output:        intAttr(s, contract.AttrUsageOutputTokens),
			CacheRead:     intAttr(s, contract.AttrUsageCacheReadTokens),
			CacheCreation: intAttr(s, contract.AttrUsageCacheCreateTokens),
			Reasoning:     intAttr(s, contract.AttrUsageReasoningTokens),
		},
		afterResult: fixtures.AfterResult{
			Input:  intAttr(s, contract.AttrAfterResultInput),
			Output: intAttr(s, contract.AttrAfterResultOutput),
		},
	}
}

// observe returns the invocation's outcome now: the latest final or
// incomplete summary, or, while it is open, a pending snapshot of its
// current state (a pending summary already emitted may be out of date).
func (h *harness) observe(id string) (observed, bool) {
	sums := h.of(id)
	for i := len(sums) - 1; i >= 0; i-- {
		if st := strAttr(sums[i], contract.AttrStatus); st != contract.StatusPending {
			return observedFromSpan(sums[i]), true
		}
	}
	s := h.p.shards[h.p.shardOf(id)]
	s.mu.Lock()
	defer s.mu.Unlock()
	inv, ok := s.invs[id]
	if !ok {
		return observed{}, false
	}
	td := summary.Build([]summary.Summary{inv.snapshot(contract.StatusPending, 0, h.clock.Now().UnixNano(), &h.p.rules)}, h.p.trust.mark)
	return observedFromSpan(td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)), true
}

// TestContractFixtures replays every shared contract case (the same cases
// the in-process ledger replays) and checks each expected outcome, and
// that no final summary is emitted before a moment that expects none.
func TestContractFixtures(t *testing.T) {
	cases, err := fixtures.Load()
	require.NoError(t, err)
	require.NotEmpty(t, cases)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			h := newHarness(t, 2, func(cfg *Config) {
				cfg.RemoteSettle = c.Config.RemoteSettle()
				cfg.OpenTimeout = c.Config.OpenTimeout()
			})
			start := h.clock.Now()
			check := func(when fixtures.When) {
				t.Helper()
				for _, want := range c.Expect {
					if want.Moment() != when {
						continue
					}
					got, ok := h.observe(want.Invocation)
					require.True(t, ok, "%s: invocation %s unknown", when, want.Invocation)
					if want.Status != fixtures.StatusFinal {
						for _, s := range h.of(want.Invocation) {
							require.NotEqual(t, contract.StatusFinal, strAttr(s, contract.AttrStatus),
								"%s: a final summary (revision %d) was emitted", when, intAttr(s, contract.AttrRevision))
						}
					}
					assert.Equal(t, string(want.Status), got.status, "%s: status (reasons %v)", when, got.reasons)
					if want.Revision != nil {
						assert.Equal(t, *want.Revision, got.revision, "%s: revision", when)
					}
					assert.Equal(t, sorted(want.Reasons), sorted(got.reasons), "%s: reasons", when)
					assert.Equal(t, sorted(want.Anomalies), sorted(got.anomalies), "%s: anomalies", when)
					assert.Equal(t, want.Usage, got.usage, "%s: usage", when)
					assert.Equal(t, want.AfterResult, got.afterResult, "%s: after-result usage", when)
				}
			}
			arrivals := c.Arrivals()
			for i, s := range c.Delivered() {
				if at := start.Add(arrivals[i]); at.After(h.clock.Now()) {
					h.advance(at.Sub(h.clock.Now()))
				}
				h.consume(fixtureTraces(s))
			}
			check(fixtures.WhenDelivered)
			h.advance(c.Config.RemoteSettle())
			check(fixtures.WhenSettled)
			h.advance(time.Nanosecond) // nothing is final on a timer alone
			check(fixtures.WhenSettled)
		})
	}
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	if out == nil {
		out = []string{}
	}
	slices.Sort(out)
	return out
}
