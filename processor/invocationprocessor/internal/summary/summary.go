package summary // import "github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"

import (
	"encoding/binary"
	"math/bits"
	"reflect"
	"strconv"
	"strings"
	"sync"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/ledgerrule"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadata"
)

// CostCurrency is the currency of invocation.cost; prices are in USD.
const CostCurrency = "USD"

// Summary is a snapshot of an invocation taken under the shard lock; it is
// turned into a span after the lock is released.
type Summary struct {
	ID             string // the ledger key (ledgerKey): tenant and invocation id
	Status         string
	Revision       int64
	TraceID        pcommon.TraceID
	ParentID       pcommon.SpanID
	Start, End     uint64
	ConversationID string
	AgentName      string
	Resource       map[string]any
	Reasons        []string
	Anomalies      []string
	Links          []SpanRef
	Usage          ledgerrule.Usage
	AfterIn        int64
	AfterOut       int64
	ModelCalls     int64
	BackgroundJobs int64
	Continuations  int64
	Spans          int64
	Traces         int64
	Duplicates     int64
	TimeToFinalMS  int64
	HasTimeToFinal bool
	Cost           float64
	HasCost        bool
	// Restored is the summary span as an earlier version stored it, for a
	// summary made before a restart and not yet delivered (the processor's
	// storage_summary.go); it is sent as is. A summary stored since is
	// stored as its fields and restored with them.
	Restored *ptrace.ResourceSpans
}

// SpanID is deterministic per (invocation id, revision, status), so
// a re-sent summary is recognisable as the same one.
func SpanIDOf(id string, revision int64, status string) pcommon.SpanID {
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

// Build turns summaries into spans carrying the root's resource
// attributes, so a trace UI files a summary under the agent's service, and
// mark, which sets the collector's marker (the processor's trust.mark). Consecutive summaries with equal resources
// share one ResourceSpans: the summaries of one send, made from many
// shards, mostly come from one agent.
func Build(sums []Summary, mark func(res pcommon.Map)) ptrace.Traces {
	td := ptrace.NewTraces()
	for i := 0; i < len(sums); {
		s := &sums[i]
		if s.Restored != nil {
			rs := td.ResourceSpans().AppendEmpty()
			s.Restored.CopyTo(rs)
			// Stored before a restart, perhaps by a version that did not
			// mark summaries: this collector is the one sending it.
			mark(rs.Resource().Attributes())
			i++
			continue
		}
		// sums[i:j] share s's resource: their spans are allocated at once.
		j := i + 1
		for j < len(sums) && sums[j].Restored == nil && sameRaw(s.Resource, sums[j].Resource) {
			j++
		}
		rs := td.ResourceSpans().AppendEmpty()
		res := rs.Resource().Attributes()
		// Room for the collector's marker too, which mark puts: Map.FromRaw
		// would make the attributes without it, and the marker grow them
		// again. FromRaw only fails for value types AsRaw never produces.
		res.EnsureCapacity(len(s.Resource) + 1)
		for k, v := range s.Resource {
			_ = res.PutEmpty(k).FromRaw(v)
		}
		mark(res)
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

func (s *Summary) fill(sp ptrace.Span) {
	sp.SetName(contract.SpanNameSummary)
	sp.SetKind(ptrace.SpanKindInternal)
	sp.SetTraceID(s.TraceID)
	sp.SetSpanID(SpanIDOf(s.ID, s.Revision, s.Status))
	sp.SetParentSpanID(s.ParentID)
	sp.SetStartTimestamp(pcommon.Timestamp(s.Start))
	end := s.End
	if end < s.Start {
		end = s.Start
	}
	sp.SetEndTimestamp(pcommon.Timestamp(end))
	sp.Links().EnsureCapacity(len(s.Links))
	for _, l := range s.Links {
		sl := sp.Links().AppendEmpty()
		sl.SetTraceID(l.TraceID)
		sl.SetSpanID(l.SpanID)
	}

	// The keys come from a template with empty values, copied in one
	// allocation; the values are then set in the template's order. Put*
	// would search the map for each key before appending it.
	tenant, id := SplitKey(s.ID)
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
			v.SetStr(s.ConversationID)
		case attrAgentName:
			v.SetStr(s.AgentName)
		case attrStatus:
			v.SetStr(s.Status)
		case attrRevision:
			v.SetInt(s.Revision)
		case attrIncompleteReasons:
			setStrings(v, s.Reasons)
		case attrAnomalies:
			setStrings(v, s.Anomalies)
		case attrUsageInput:
			v.SetInt(s.Usage.Input)
		case attrUsageOutput:
			v.SetInt(s.Usage.Output)
		case attrUsageCacheRead:
			v.SetInt(s.Usage.CacheRead)
		case attrUsageCacheCreation:
			v.SetInt(s.Usage.CacheCreation)
		case attrUsageReasoning:
			v.SetInt(s.Usage.Reasoning)
		case attrAfterInput:
			v.SetInt(s.AfterIn)
		case attrAfterOutput:
			v.SetInt(s.AfterOut)
		case attrModelCalls:
			v.SetInt(s.ModelCalls)
		case attrBackgroundJobs:
			v.SetInt(s.BackgroundJobs)
		case attrContinuations:
			v.SetInt(s.Continuations)
		case attrSpans:
			v.SetInt(s.Spans)
		case attrTraces:
			v.SetInt(s.Traces)
		case attrDuplicates:
			v.SetInt(s.Duplicates)
		case attrTimeToFinal:
			v.SetInt(s.TimeToFinalMS)
		case attrCost:
			v.SetDouble(s.Cost)
		case attrCostCurrency:
			v.SetStr(CostCurrency)
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
func (s *Summary) present(hasTenant bool) uint32 {
	const always = (1<<numSummaryAttrs - 1) &^ optionalAttrs
	present := uint32(always)
	if hasTenant {
		present |= 1 << attrTenant
	}
	if s.ConversationID != "" {
		present |= 1 << attrConversationID
	}
	if s.AgentName != "" {
		present |= 1 << attrAgentName
	}
	if s.HasTimeToFinal {
		present |= 1 << attrTimeToFinal
	}
	if s.HasCost {
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

// SpanRef names a span in another trace (continuation roots).
type SpanRef struct {
	TraceID pcommon.TraceID
	SpanID  pcommon.SpanID
}

// sameMap reports whether a and b are the same map (not equal contents).
func sameMap(a, b map[string]any) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// sameRaw reports whether a and b are the same map or hold the same
// scalar values; maps holding other values are only the same as
// themselves.
func sameRaw(a, b map[string]any) bool {
	if sameMap(a, b) {
		return true
	}
	if len(a) != len(b) {
		return false
	}
	for k, av := range a {
		bv, ok := b[k]
		if !ok {
			return false
		}
		switch av := av.(type) {
		case string:
			if bv, ok := bv.(string); !ok || av != bv {
				return false
			}
		case int64:
			if bv, ok := bv.(int64); !ok || av != bv {
				return false
			}
		case bool:
			if bv, ok := bv.(bool); !ok || av != bv {
				return false
			}
		case float64:
			if bv, ok := bv.(float64); !ok || av != bv {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// SplitKey splits a ledger key (the processor's ledgerKey: tenant, NUL,
// invocation id; the id alone without a tenant) into its two parts.
func SplitKey(key string) (tenant, id string) {
	i := strings.IndexByte(key, 0)
	if i < 0 {
		return "", key
	}
	return key[:i], key[i+1:]
}
