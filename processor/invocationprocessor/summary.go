package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"encoding/binary"
	"github.com/agentledger/agentledger/internal/ledgerrule"
	"math/bits"
	"slices"
	"strconv"
	"sync"

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
	usage          ledgerrule.Usage
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
		s.traceID = pcommon.TraceID(inv.Traces[0]) // the first trace seen, until the root arrives
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
	for i := 0; i < len(sums); {
		s := &sums[i]
		if s.restored != nil {
			rs := td.ResourceSpans().AppendEmpty()
			s.restored.CopyTo(rs)
			// Stored before a restart, perhaps by a version that did not
			// mark summaries: this collector is the one sending it.
			t.mark(rs.Resource().Attributes())
			i++
			continue
		}
		// sums[i:j] share s's resource: their spans are allocated at once.
		j := i + 1
		for j < len(sums) && sums[j].restored == nil && sameRaw(s.resource, sums[j].resource) {
			j++
		}
		rs := td.ResourceSpans().AppendEmpty()
		// FromRaw only fails for value types AsRaw never produces.
		_ = rs.Resource().Attributes().FromRaw(s.resource)
		t.mark(rs.Resource().Attributes())
		ss := rs.ScopeSpans().AppendEmpty()
		ss.Scope().SetName(metadata.ScopeName)
		spans := ss.Spans()
		spans.EnsureCapacity(j - i)
		for ; i < j; i++ {
			sums[i].fill(spans.AppendEmpty())
		}
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

	// The keys come from a template with empty values, copied in one
	// allocation; the values are then set in the template's order. Put*
	// would search the map for each key before appending it.
	tenant, id := parseLedgerKey(s.id)
	present := s.present(tenant != "")
	a := sp.Attributes()
	summaryTemplate(present).CopyTo(a)
	rest := present
	for _, v := range a.All() {
		attr := summaryAttr(bits.TrailingZeros32(rest))
		rest &= rest - 1
		switch attr {
		case attrInvocationID:
			v.SetStr(id)
		case attrTenant:
			v.SetStr(tenant)
		case attrConversationID:
			v.SetStr(s.conversationID)
		case attrAgentName:
			v.SetStr(s.agentName)
		case attrStatus:
			v.SetStr(s.status)
		case attrRevision:
			v.SetInt(s.revision)
		case attrIncompleteReasons:
			setStrings(v, s.reasons)
		case attrAnomalies:
			setStrings(v, s.anomalies)
		case attrUsageInput:
			v.SetInt(s.usage.Input)
		case attrUsageOutput:
			v.SetInt(s.usage.Output)
		case attrUsageCacheRead:
			v.SetInt(s.usage.CacheRead)
		case attrUsageCacheCreation:
			v.SetInt(s.usage.CacheCreation)
		case attrUsageReasoning:
			v.SetInt(s.usage.Reasoning)
		case attrAfterInput:
			v.SetInt(s.afterIn)
		case attrAfterOutput:
			v.SetInt(s.afterOut)
		case attrModelCalls:
			v.SetInt(s.modelCalls)
		case attrBackgroundJobs:
			v.SetInt(s.backgroundJobs)
		case attrContinuations:
			v.SetInt(s.continuations)
		case attrSpans:
			v.SetInt(s.spans)
		case attrTraces:
			v.SetInt(s.traces)
		case attrDuplicates:
			v.SetInt(s.duplicates)
		case attrTimeToFinal:
			v.SetInt(s.timeToFinalMS)
		case attrCost:
			v.SetDouble(s.cost)
		case attrCostCurrency:
			v.SetStr(costCurrency)
		}
	}
}

// summaryAttr is one attribute of a summary span. A summary carries them
// in this order; the optional ones only when present (summary.present).
type summaryAttr uint8

const (
	attrInvocationID summaryAttr = iota
	attrTenant
	attrConversationID
	attrAgentName
	attrStatus
	attrRevision
	attrIncompleteReasons
	attrAnomalies
	attrUsageInput
	attrUsageOutput
	attrUsageCacheRead
	attrUsageCacheCreation
	attrUsageReasoning
	attrAfterInput
	attrAfterOutput
	attrModelCalls
	attrBackgroundJobs
	attrContinuations
	attrSpans
	attrTraces
	attrDuplicates
	attrTimeToFinal
	attrCost
	attrCostCurrency
	numSummaryAttrs
)

// summaryAttrKeys are the summary attributes' keys.
var summaryAttrKeys = [numSummaryAttrs]string{
	attrInvocationID:       contract.AttrInvocationID,
	attrTenant:             contract.AttrTenant,
	attrConversationID:     contract.AttrConversationID,
	attrAgentName:          contract.AttrAgentName,
	attrStatus:             contract.AttrStatus,
	attrRevision:           contract.AttrRevision,
	attrIncompleteReasons:  contract.AttrIncompleteReasons,
	attrAnomalies:          contract.AttrAnomalies,
	attrUsageInput:         contract.AttrUsageInputTokens,
	attrUsageOutput:        contract.AttrUsageOutputTokens,
	attrUsageCacheRead:     contract.AttrUsageCacheReadTokens,
	attrUsageCacheCreation: contract.AttrUsageCacheCreateTokens,
	attrUsageReasoning:     contract.AttrUsageReasoningTokens,
	attrAfterInput:         contract.AttrAfterResultInput,
	attrAfterOutput:        contract.AttrAfterResultOutput,
	attrModelCalls:         contract.AttrModelCalls,
	attrBackgroundJobs:     contract.AttrBackgroundJobs,
	attrContinuations:      contract.AttrContinuations,
	attrSpans:              contract.AttrSpans,
	attrTraces:             contract.AttrTraces,
	attrDuplicates:         contract.AttrDuplicateSpans,
	attrTimeToFinal:        contract.AttrTimeToFinalMS,
	attrCost:               contract.AttrCost,
	attrCostCurrency:       contract.AttrCostCurrency,
}

// optionalAttrs are the attributes a summary may lack; the others it
// always carries.
const optionalAttrs = 1<<attrTenant | 1<<attrConversationID | 1<<attrAgentName |
	1<<attrTimeToFinal | 1<<attrCost | 1<<attrCostCurrency

// present is the set of attributes fill puts, a bit per summaryAttr.
func (s *summary) present(hasTenant bool) uint32 {
	const always = (1<<numSummaryAttrs - 1) &^ optionalAttrs
	present := uint32(always)
	if hasTenant {
		present |= 1 << attrTenant
	}
	if s.conversationID != "" {
		present |= 1 << attrConversationID
	}
	if s.agentName != "" {
		present |= 1 << attrAgentName
	}
	if s.hasTimeToFinal {
		present |= 1 << attrTimeToFinal
	}
	if s.hasCost {
		present |= 1<<attrCost | 1<<attrCostCurrency
	}
	return present
}

// summaryTemplates holds, per set of optional attributes present, a map
// of the summary's keys in order with empty values; made on first use and
// only read after.
var summaryTemplates [1 << 5]struct {
	once sync.Once
	keys pcommon.Map
}

// summaryTemplate returns the template for the attributes in present.
func summaryTemplate(present uint32) pcommon.Map {
	// The optional attributes as five bits (cost and its currency go
	// together).
	i := 0
	for n, attr := range [...]summaryAttr{attrTenant, attrConversationID, attrAgentName, attrTimeToFinal, attrCost} {
		if present&(1<<attr) != 0 {
			i |= 1 << n
		}
	}
	t := &summaryTemplates[i]
	t.once.Do(func() {
		t.keys = pcommon.NewMap()
		t.keys.EnsureCapacity(bits.OnesCount32(present))
		for rest := present; rest != 0; rest &= rest - 1 {
			t.keys.PutEmpty(summaryAttrKeys[bits.TrailingZeros32(rest)])
		}
	})
	return t.keys
}

func setStrings(v pcommon.Value, vals []string) {
	sl := v.SetEmptySlice()
	sl.EnsureCapacity(len(vals))
	for _, s := range vals {
		sl.AppendEmpty().SetStr(s)
	}
}
