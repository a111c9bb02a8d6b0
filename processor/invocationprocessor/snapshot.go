package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

func (inv *invocation) snapshot(status string, revision, now int64, cfg *ledgerConfig) summary.Summary {
	s := summary.Summary{
		ID:             inv.ID,
		Status:         status,
		Revision:       revision,
		Start:          inv.MinStart,
		End:            inv.LatestEnd,
		ConversationID: inv.ConversationID,
		AgentName:      inv.AgentName,
		Resource:       inv.Resource,
		Anomalies:      inv.anomalies(status == contract.StatusFinal),
		Links:          slices.Clip(inv.ContinuationRoots), // only ever appended to
		Usage:          inv.Usage,
		AfterIn:        inv.AfterInput,
		AfterOut:       inv.AfterOutput,
		ModelCalls:     inv.ModelCalls,
		BackgroundJobs: inv.BackgroundJobs,
		Continuations:  inv.Continuations,
		Spans:          inv.Indexed,
		Traces:         int64(len(inv.Traces)),
		Duplicates:     inv.Duplicates,
		Cost:           inv.Cost,
		HasCost:        cfg.pricesActive,
	}
	if len(inv.Traces) > 0 {
		s.TraceID = pcommon.TraceID(inv.Traces[0]) // the first trace seen, until the root arrives
	}
	if status != contract.StatusFinal {
		s.Reasons = inv.reasons(now, cfg)
	}
	if inv.RootArrived {
		s.TraceID = inv.RootTraceID
		s.ParentID = inv.RootSpanID
		s.Start = inv.RootStart
		s.HasTimeToFinal = true
		if inv.LatestEnd > inv.RootEnd {
			s.TimeToFinalMS = int64((inv.LatestEnd - inv.RootEnd) / 1e6)
		}
	}
	return s
}
