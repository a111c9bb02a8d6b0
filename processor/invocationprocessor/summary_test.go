package invocationprocessor

import (
	"fmt"
	"github.com/agentledger/agentledger/internal/ledgerrule"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
)

// putSummaryAttributes is the summary's attributes as the contract lists
// them, put one by one: the reference fill's template construction must
// match, key order included.
func putSummaryAttributes(s *summary, a pcommon.Map) {
	tenant, id := parseLedgerKey(s.id)
	a.PutStr(contract.AttrInvocationID, id)
	if tenant != "" {
		a.PutStr(contract.AttrTenant, tenant)
	}
	if s.conversationID != "" {
		a.PutStr(contract.AttrConversationID, s.conversationID)
	}
	if s.agentName != "" {
		a.PutStr(contract.AttrAgentName, s.agentName)
	}
	a.PutStr(contract.AttrStatus, s.status)
	a.PutInt(contract.AttrRevision, s.revision)
	for _, l := range []struct {
		key  string
		vals []string
	}{{contract.AttrIncompleteReasons, s.reasons}, {contract.AttrAnomalies, s.anomalies}} {
		sl := a.PutEmptySlice(l.key)
		for _, v := range l.vals {
			sl.AppendEmpty().SetStr(v)
		}
	}
	a.PutInt(contract.AttrUsageInputTokens, s.usage.Input)
	a.PutInt(contract.AttrUsageOutputTokens, s.usage.Output)
	a.PutInt(contract.AttrUsageCacheReadTokens, s.usage.CacheRead)
	a.PutInt(contract.AttrUsageCacheCreateTokens, s.usage.CacheCreation)
	a.PutInt(contract.AttrUsageReasoningTokens, s.usage.Reasoning)
	a.PutInt(contract.AttrAfterResultInput, s.afterIn)
	a.PutInt(contract.AttrAfterResultOutput, s.afterOut)
	a.PutInt(contract.AttrModelCalls, s.modelCalls)
	a.PutInt(contract.AttrBackgroundJobs, s.backgroundJobs)
	a.PutInt(contract.AttrContinuations, s.continuations)
	a.PutInt(contract.AttrSpans, s.spans)
	a.PutInt(contract.AttrTraces, s.traces)
	a.PutInt(contract.AttrDuplicateSpans, s.duplicates)
	if s.hasTimeToFinal {
		a.PutInt(contract.AttrTimeToFinalMS, s.timeToFinalMS)
	}
	if s.hasCost {
		a.PutDouble(contract.AttrCost, s.cost)
		a.PutStr(contract.AttrCostCurrency, costCurrency)
	}
}

// TestFillAttributesInContractOrder checks fill's attributes against
// putSummaryAttributes for every combination of optional attributes:
// the same keys in the same order, with the same types and values.
func TestFillAttributesInContractOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	strs := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("kind:%d", rng.IntN(100))
		}
		return out
	}
	for combo := range 1 << 5 {
		for round := range 4 {
			s := summary{
				id:             fmt.Sprintf("inv-%d-%d", combo, round),
				status:         []string{contract.StatusPending, contract.StatusFinal, contract.StatusIncomplete}[rng.IntN(3)],
				revision:       rng.Int64N(5),
				reasons:        strs(rng.IntN(3)),
				anomalies:      strs(rng.IntN(3)),
				usage:          ledgerrule.Usage{Input: rng.Int64(), Output: rng.Int64(), CacheRead: rng.Int64(), CacheCreation: rng.Int64(), Reasoning: rng.Int64()},
				afterIn:        rng.Int64(),
				afterOut:       rng.Int64(),
				modelCalls:     rng.Int64(),
				backgroundJobs: rng.Int64(),
				continuations:  rng.Int64(),
				spans:          rng.Int64(),
				traces:         rng.Int64(),
				duplicates:     rng.Int64(),
			}
			if combo&1 != 0 {
				s.id = ledgerKey("tenant-a", s.id)
			}
			if combo&2 != 0 {
				s.conversationID = "conv"
			}
			if combo&4 != 0 {
				s.agentName = "coder"
			}
			if combo&8 != 0 {
				s.hasTimeToFinal, s.timeToFinalMS = true, rng.Int64()
			}
			if combo&16 != 0 {
				s.hasCost, s.cost = true, rng.Float64()
			}
			got := ptrace.NewSpan()
			s.fill(got)
			want := pcommon.NewMap()
			putSummaryAttributes(&s, want)

			var gotKeys, wantKeys []string
			var gotVals, wantVals []any
			for k, v := range got.Attributes().All() {
				gotKeys = append(gotKeys, k)
				gotVals = append(gotVals, fmt.Sprintf("%s %v", v.Type(), v.AsRaw()))
			}
			for k, v := range want.All() {
				wantKeys = append(wantKeys, k)
				wantVals = append(wantVals, fmt.Sprintf("%s %v", v.Type(), v.AsRaw()))
			}
			require.Equal(t, wantKeys, gotKeys, "combination %05b", combo)
			require.Equal(t, wantVals, gotVals, "combination %05b", combo)
			require.True(t, want.Equal(got.Attributes()))
		}
	}
}
