package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
)

// spanRole is a span's invocation.role, as far as the ledger tells roles
// apart.
type spanRole uint8

const (
	roleNone spanRole = iota // absent, not a string, or a role the ledger ignores
	roleRoot
	roleBackground
	roleContinuation
)

// factFlags records which facts a span has, and how they read.
type factFlags uint16

const (
	factRemote         factFlags = 1 << iota // invocation.remote set (a non-bool reads as set)
	factLateChild                            // invocation.late_child set (likewise)
	factUnattributed                         // invocation.unattributed present
	factConversationID                       // gen_ai.conversation.id present
	factAgentName                            // gen_ai.agent.name present
	factChildren                             // invocation.children present
	factFollowups                            // invocation.followups present
	factModelCall                            // gen_ai.operation.name is a usage operation
	factStatusError                          // the span's status is Error
	factAbandoned                            // invocation.followup.reason is abandoned
)

// Usage attributes, in the order of usageKeys.
const (
	usageInput = iota
	usageOutput
	usageCacheRead
	usageCacheCreation
	usageReasoning
	numUsage
)

// usageKeys are the summed usage attributes.
var usageKeys = [numUsage]string{
	contract.AttrUsageInputTokens,
	contract.AttrUsageOutputTokens,
	contract.AttrUsageCacheReadTokens,
	contract.AttrUsageCacheCreateTokens,
	contract.AttrUsageReasoningTokens,
}

// spanFacts is everything the ledger reads from one span, gathered in one
// pass over its attributes (readFacts) before the shard's lock is taken,
// so indexing under the lock scans no attribute map. Values are read as
// pcommon.Map.Get would: the first of repeated keys counts.
type spanFacts struct {
	invocationID string // empty: not a member
	name         string
	traceID      pcommon.TraceID
	spanID       pcommon.SpanID
	parent       pcommon.SpanID
	start, end   uint64

	role  spanRole
	flags factFlags
	// usagePresent and usageInt have bit i set when usageKeys[i] is
	// present, and an int; usage[i] is then its value.
	usagePresent, usageInt uint8
	usage                  [numUsage]int64
	// children and followups are the counts' values when present (read
	// with validCount under the lock, which knows max_spans).
	children, followups pcommon.Value

	// model is gen_ai.response.model, else gen_ai.request.model (strings
	// only); read only for model calls when prices are configured.
	model                                   string
	conversationID, agentName, unattributed string // as Value.AsString
}

// attribute keys readFacts looks at, as bits of its seen mask.
const (
	seenInvocationID = 1 << iota
	seenRole
	seenRemote
	seenLateChild
	seenUnattributed
	seenChildren
	seenFollowups
	seenOperation
	seenConversationID
	seenAgentName
	seenRequestModel
	seenResponseModel
	seenFollowupReason
	seenUsage // + index into usageKeys
)

// readFacts reads the span's facts. cfg says which operations are model
// calls and whether models are priced.
func readFacts(f *spanFacts, sp ptrace.Span, cfg *ledgerConfig) {
	*f = spanFacts{
		name:    sp.Name(),
		traceID: sp.TraceID(),
		spanID:  sp.SpanID(),
		parent:  sp.ParentSpanID(),
		start:   uint64(sp.StartTimestamp()),
		end:     uint64(sp.EndTimestamp()),
	}
	if sp.Status().Code() == ptrace.StatusCodeError {
		f.flags |= factStatusError
	}
	// seen marks the keys already read, so that the first of repeated
	// keys counts, as with pcommon.Map.Get.
	var seen uint32
	first := func(bit uint32) bool {
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	}
	var requestModel, responseModel string
	for k, v := range sp.Attributes().All() {
		switch k {
		case contract.AttrInvocationID:
			if first(seenInvocationID) && v.Type() == pcommon.ValueTypeStr {
				f.invocationID = v.Str()
			}
		case contract.AttrRole:
			if first(seenRole) && v.Type() == pcommon.ValueTypeStr {
				switch v.Str() {
				case contract.RoleRoot:
					f.role = roleRoot
				case contract.RoleBackground:
					f.role = roleBackground
				case contract.RoleContinuation:
					f.role = roleContinuation
				}
			}
		case contract.AttrRemote:
			if first(seenRemote) && flagValue(v) {
				f.flags |= factRemote
			}
		case contract.AttrLateChild:
			if first(seenLateChild) && flagValue(v) {
				f.flags |= factLateChild
			}
		case contract.AttrUnattributed:
			if first(seenUnattributed) {
				f.flags |= factUnattributed
				f.unattributed = v.AsString()
			}
		case contract.AttrChildren:
			if first(seenChildren) {
				f.flags |= factChildren
				f.children = v
			}
		case contract.AttrFollowupReason:
			if first(seenFollowupReason) && v.AsString() == contract.ReasonAbandoned {
				f.flags |= factAbandoned
			}
		case contract.AttrFollowups:
			if first(seenFollowups) {
				f.flags |= factFollowups
				f.followups = v
			}
		case contract.AttrOperationName:
			if first(seenOperation) && v.Type() == pcommon.ValueTypeStr {
				if _, ok := cfg.usageOps[v.Str()]; ok {
					f.flags |= factModelCall
				}
			}
		case contract.AttrConversationID:
			if first(seenConversationID) {
				f.flags |= factConversationID
				f.conversationID = v.AsString()
			}
		case contract.AttrAgentName:
			if first(seenAgentName) {
				f.flags |= factAgentName
				f.agentName = v.AsString()
			}
		case contract.AttrRequestModel:
			if first(seenRequestModel) && v.Type() == pcommon.ValueTypeStr {
				requestModel = v.Str()
			}
		case contract.AttrResponseModel:
			if first(seenResponseModel) && v.Type() == pcommon.ValueTypeStr {
				responseModel = v.Str()
			}
		case contract.AttrUsageInputTokens:
			if first(seenUsage << usageInput) {
				f.readUsage(usageInput, v)
			}
		case contract.AttrUsageOutputTokens:
			if first(seenUsage << usageOutput) {
				f.readUsage(usageOutput, v)
			}
		case contract.AttrUsageCacheReadTokens:
			if first(seenUsage << usageCacheRead) {
				f.readUsage(usageCacheRead, v)
			}
		case contract.AttrUsageCacheCreateTokens:
			if first(seenUsage << usageCacheCreation) {
				f.readUsage(usageCacheCreation, v)
			}
		case contract.AttrUsageReasoningTokens:
			if first(seenUsage << usageReasoning) {
				f.readUsage(usageReasoning, v)
			}
		}
	}
	f.model = responseModel
	if f.model == "" {
		f.model = requestModel
	}
}

func (f *spanFacts) readUsage(i int, v pcommon.Value) {
	f.usagePresent |= 1 << i
	if v.Type() == pcommon.ValueTypeInt {
		f.usageInt |= 1 << i
		f.usage[i] = v.Int()
	}
}

// flagValue reads a boolean marker the conservative way: present and not
// false means set (a mistyped marker must not relax a rule).
func flagValue(v pcommon.Value) bool {
	return v.Type() != pcommon.ValueTypeBool || v.Bool()
}

// has reports whether every flag in want is set.
func (f *spanFacts) has(want factFlags) bool { return f.flags&want == want }
