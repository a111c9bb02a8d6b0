package summary

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/ledgerrule"
)

// putSummaryAttributes is the summary's attributes as the contract lists
// them, put one by one: the reference fill's template construction must
// match, key order included.
func putSummaryAttributes(s *Summary, a pcommon.Map) {
	tenant, id := SplitKey(s.ID)
	a.PutStr(contract.AttrInvocationID, id)
	if tenant != "" {
		a.PutStr(contract.AttrTenant, tenant)
	}
	if s.ConversationID != "" {
		a.PutStr(contract.AttrConversationID, s.ConversationID)
	}
	if s.AgentName != "" {
		a.PutStr(contract.AttrAgentName, s.AgentName)
	}
	a.PutStr(contract.AttrStatus, s.Status)
	a.PutInt(contract.AttrRevision, s.Revision)
	for _, l := range []struct {
		key  string
		vals []string
	}{{contract.AttrIncompleteReasons, s.Reasons}, {contract.AttrAnomalies, s.Anomalies}} {
		sl := a.PutEmptySlice(l.key)
		for _, v := range l.vals {
			sl.AppendEmpty().SetStr(v)
		}
	}
	a.PutInt(contract.AttrUsageInputTokens, s.Usage.Input)
	a.PutInt(contract.AttrUsageOutputTokens, s.Usage.Output)
	a.PutInt(contract.AttrUsageCacheReadTokens, s.Usage.CacheRead)
	a.PutInt(contract.AttrUsageCacheCreateTokens, s.Usage.CacheCreation)
	a.PutInt(contract.AttrUsageReasoningTokens, s.Usage.Reasoning)
	a.PutInt(contract.AttrAfterResultInput, s.AfterIn)
	a.PutInt(contract.AttrAfterResultOutput, s.AfterOut)
	a.PutInt(contract.AttrModelCalls, s.ModelCalls)
	a.PutInt(contract.AttrBackgroundJobs, s.BackgroundJobs)
	a.PutInt(contract.AttrContinuations, s.Continuations)
	a.PutInt(contract.AttrSpans, s.Spans)
	a.PutInt(contract.AttrTraces, s.Traces)
	a.PutInt(contract.AttrDuplicateSpans, s.Duplicates)
	if s.HasTimeToFinal {
		a.PutInt(contract.AttrTimeToFinalMS, s.TimeToFinalMS)
	}
	if s.HasCost {
		a.PutDouble(contract.AttrCost, s.Cost)
		a.PutStr(contract.AttrCostCurrency, CostCurrency)
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
			s := Summary{
				ID:             fmt.Sprintf("inv-%d-%d", combo, round),
				Status:         []string{contract.StatusPending, contract.StatusFinal, contract.StatusIncomplete}[rng.IntN(3)],
				Revision:       rng.Int64N(5),
				Reasons:        strs(rng.IntN(3)),
				Anomalies:      strs(rng.IntN(3)),
				Usage:          ledgerrule.Usage{Input: rng.Int64(), Output: rng.Int64(), CacheRead: rng.Int64(), CacheCreation: rng.Int64(), Reasoning: rng.Int64()},
				AfterIn:        rng.Int64(),
				AfterOut:       rng.Int64(),
				ModelCalls:     rng.Int64(),
				BackgroundJobs: rng.Int64(),
				Continuations:  rng.Int64(),
				Spans:          rng.Int64(),
				Traces:         rng.Int64(),
				Duplicates:     rng.Int64(),
			}
			if combo&1 != 0 {
				s.ID = "tenant-a\x00" + s.ID
			}
			if combo&2 != 0 {
				s.ConversationID = "conv"
			}
			if combo&4 != 0 {
				s.AgentName = "coder"
			}
			if combo&8 != 0 {
				s.HasTimeToFinal, s.TimeToFinalMS = true, rng.Int64()
			}
			if combo&16 != 0 {
				s.HasCost, s.Cost = true, rng.Float64()
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
