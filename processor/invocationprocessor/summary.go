package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"encoding/binary"
	"slices"
	"strconv"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadata"
)

// costCurrency is the currency of invocation.cost; prices are in USD.
const costCurrency = "USD"

// summary is a snapshot of an invocation taken under the shard lock; it is
// turned into a span after the lock is released.
type summary struct {
	id             string // the ledger key (ledgerKey): tenant and invocation id
	status         string
	revision       int64
	traceID        pcommon.TraceID
	parentID       pcommon.SpanID
	start, end     uint64
	conversationID string
	agentName      string
	resource       map[string]any
	reasons        []string
	anomalies      []string
	links          []spanRef
	usage          usage
	afterIn        int64
	afterOut       int64
	modelCalls     int64
	backgroundJobs int64
	continuations  int64
	spans          int64
	traces         int64
	duplicates     int64
	timeToFinalMS  int64
	hasTimeToFinal bool
	cost           float64
	hasCost        bool
	// restored is the summary span as stored, for a summary made before a
	// restart and not yet delivered (storage.go); it is sent as is.
	restored *ptrace.ResourceSpans
}

func (inv *invocation) snapshot(status string, revision, now int64, cfg *ledgerConfig) summary {
	s := summary{
		id:             inv.ID,
		status:         status,
		revision:       revision,
		start:          inv.MinStart,
		end:            inv.LatestEnd,
		conversationID: inv.ConversationID,
		agentName:      inv.AgentName,
		resource:       inv.Resource,
		anomalies:      inv.anomalies(status == contract.StatusFinal),
		links:          slices.Clip(inv.ContinuationRoots), // only ever appended to
		usage:          inv.Usage,
		afterIn:        inv.AfterInput,
		afterOut:       inv.AfterOutput,
		modelCalls:     inv.ModelCalls,
		backgroundJobs: inv.BackgroundJobs,
		continuations:  inv.Continuations,
		spans:          inv.Indexed,
		traces:         int64(len(inv.Traces)),
		duplicates:     inv.Duplicates,
		cost:           inv.Cost,
		hasCost:        cfg.pricesActive,
	}
	if len(inv.Traces) > 0 {
		s.traceID = inv.Traces[0] // the first trace seen, until the root arrives
	}
	if status != contract.StatusFinal {
		s.reasons = inv.reasons(now, cfg)
	}
	if inv.RootArrived {
		s.traceID = inv.RootTraceID
		s.parentID = inv.RootSpanID
		s.start = inv.RootStart
		s.hasTimeToFinal = true
		if inv.LatestEnd > inv.RootEnd {
			s.timeToFinalMS = int64((inv.LatestEnd - inv.RootEnd) / 1e6)
		}
	}
	return s
}

// summarySpanID is deterministic per (invocation id, revision, status), so
// a re-sent summary is recognisable as the same one.
func summarySpanID(id string, revision int64, status string) pcommon.SpanID {
	// FNV-1a over id, NUL, the decimal revision, NUL, status; written out
	// so that it allocates nothing.
	h := uint64(14695981039346656037)
	write := func(s string) {
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= 1099511628211
		}
	}
	var buf [20]byte
	write(id)
	write("\x00")
	write(string(strconv.AppendInt(buf[:0], revision, 10)))
	write("\x00")
	write(status)
	if h == 0 {
		h = 1
	}
	var sid pcommon.SpanID
	binary.BigEndian.PutUint64(sid[:], h)
	return sid
}

// buildTraces turns summaries into spans carrying the root's resource
// attributes, so a trace UI files a summary under the agent's service, and
// the marker (trust.mark). Consecutive summaries with equal resources
// share one ResourceSpans: the summaries of one send, made from many
// shards, mostly come from one agent.
func buildTraces(sums []summary, t *trust) ptrace.Traces {
	td := ptrace.NewTraces()
	var spans ptrace.SpanSlice
	var resource map[string]any
	open := false // spans takes the next summary when its resource is resource
	for i := range sums {
		s := &sums[i]
		if s.restored != nil {
			rs := td.ResourceSpans().AppendEmpty()
			s.restored.CopyTo(rs)
			// Stored before a restart, perhaps by a version that did not
			// mark summaries: this collector is the one sending it.
			t.mark(rs.Resource().Attributes())
			open = false
			continue
		}
		if !open || !sameRaw(resource, s.resource) {
			rs := td.ResourceSpans().AppendEmpty()
			// FromRaw only fails for value types AsRaw never produces.
			_ = rs.Resource().Attributes().FromRaw(s.resource)
			t.mark(rs.Resource().Attributes())
			ss := rs.ScopeSpans().AppendEmpty()
			ss.Scope().SetName(metadata.ScopeName)
			spans, resource, open = ss.Spans(), s.resource, true
		}
		s.fill(spans.AppendEmpty())
	}
	return td
}

func (s *summary) fill(sp ptrace.Span) {
	sp.SetName(contract.SpanNameSummary)
	sp.SetKind(ptrace.SpanKindInternal)
	sp.SetTraceID(s.traceID)
	sp.SetSpanID(summarySpanID(s.id, s.revision, s.status))
	sp.SetParentSpanID(s.parentID)
	sp.SetStartTimestamp(pcommon.Timestamp(s.start))
	end := s.end
	if end < s.start {
		end = s.start
	}
	sp.SetEndTimestamp(pcommon.Timestamp(end))
	sp.Links().EnsureCapacity(len(s.links))
	for _, l := range s.links {
		sl := sp.Links().AppendEmpty()
		sl.SetTraceID(l.TraceID)
		sl.SetSpanID(l.SpanID)
	}

	a := sp.Attributes()
	tenant, id := parseLedgerKey(s.id)
	a.EnsureCapacity(s.attributeCount(tenant != ""))
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
	putStrings(a, contract.AttrIncompleteReasons, s.reasons)
	putStrings(a, contract.AttrAnomalies, s.anomalies)
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

// attributeCount is the number of attributes fill puts, so the map is
// allocated once at its size.
func (s *summary) attributeCount(hasTenant bool) int {
	// invocation.id, status, revision, the two string lists, five usage
	// sums, two after-result sums and six counts.
	n := 3 + 2 + numUsage + 2 + 6
	for _, has := range [...]bool{hasTenant, s.conversationID != "", s.agentName != "", s.hasTimeToFinal} {
		if has {
			n++
		}
	}
	if s.hasCost {
		n += 2
	}
	return n
}

func putStrings(a pcommon.Map, key string, vals []string) {
	sl := a.PutEmptySlice(key)
	sl.EnsureCapacity(len(vals))
	for _, v := range vals {
		sl.AppendEmpty().SetStr(v)
	}
}
