package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"math"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/ledgerrule"
)

// spanRole is a span's invocation.role, as far as the ledger tells roles
// apart.
type spanRole uint8

const (
	roleNone spanRole = iota // absent, malformed, or a role the ledger ignores
	roleRoot
	roleBackground
	roleContinuation
)

// factFlags records which facts a span has, and how they read.
type factFlags uint16

const (
	factRemote         factFlags = 1 << iota // invocation.remote set (malformed reads as set)
	factLateChild                            // invocation.late_child set (likewise)
	factUnattributed                         // invocation.unattributed present
	factConversationID                       // gen_ai.conversation.id present
	factAgentName                            // gen_ai.agent.name present
	factModelCall                            // gen_ai.operation.name is a usage operation
	factStatusError                          // the span's status is Error
	factAbandoned                            // invocation.followup.reason is abandoned
	factInterrupted                          // invocation.followup.reason is interrupted
	factUsageMismatch                        // invocation.usage.mismatch is true
	factLinkMalformed                        // a link's invocation.link is malformed
)

// Usage attributes, in the order of usageKeys.
const (
	usageInput         = ledgerrule.UsageInput
	usageOutput        = ledgerrule.UsageOutput
	usageCacheRead     = ledgerrule.UsageCacheRead
	usageCacheCreation = ledgerrule.UsageCacheCreation
	usageReasoning     = ledgerrule.UsageReasoning
	numUsage           = ledgerrule.NumUsage
)

// usageKeys are the summed usage attributes.
var usageKeys = [numUsage]string{
	contract.AttrUsageInputTokens,
	contract.AttrUsageOutputTokens,
	contract.AttrUsageCacheReadTokens,
	contract.AttrUsageCacheCreateTokens,
	contract.AttrUsageReasoningTokens,
}

// linkFact is one span link the rule reads: its target, named by trace
// and span ID (CONTRACT.md v0.6 rule 2), and its kind.
type linkFact struct {
	traceID pcommon.TraceID
	spanID  pcommon.SpanID
	kind    ledgerrule.LinkKind
}

// spanFacts is everything the ledger reads from one span, gathered in one
// pass over its attributes and links before the shard's lock is taken, so
// indexing under the lock scans no attribute map. The rule attributes are
// read by ledgerrule's reader, the only decoding of them; replay after a
// restart feeds the journalled attributes to the same reader (factReader),
// repeats included, so live and replayed facts are the same.
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
	// present, and a non-negative int; usage[i] is then its value.
	usagePresent, usageInt uint8
	usage                  [numUsage]int64
	// children, followups, unrecorded and detached are the declared
	// counts, validated against max_spans_per_invocation.
	children, followups, unrecorded, detached ledgerrule.Count
	// malformed has a bit per ledgerrule.Key that is malformed.
	malformed uint32

	// links are the span's links that have a kind the rule reads
	// (followup, consumed, detached_from), in order; linkBuf holds the
	// first few without an allocation, so spanFacts is used in place
	// (through a pointer), never copied once read.
	links   []linkFact
	linkBuf [2]linkFact

	// model is gen_ai.response.model, else gen_ai.request.model (strings
	// only); read only for model calls when prices are configured.
	model                                   string
	conversationID, agentName, unattributed string // as Value.AsString
}

// has reports whether every flag in want is set.
func (f *spanFacts) has(want factFlags) bool { return f.flags&want == want }

// factReader turns one span into spanFacts: begin, then attr for each
// attribute and link/linkAttr for each link, then end. Both the live path
// (readFacts, over a ptrace.Span) and replay (decoder.facts, over the
// journal's stored form) drive it, so there is one reading.
type factReader struct {
	f                           *spanFacts
	rule                        ledgerrule.SpanReader
	link                        ledgerrule.LinkReader
	linkTrace                   pcommon.TraceID
	linkSpan                    pcommon.SpanID
	inLink                      bool
	requestModel, responseModel string
	seenConv, seenAgent         bool
	seenReq, seenResp           bool
}

// begin starts reading a span into f.
func (r *factReader) begin(f *spanFacts, name string, traceID pcommon.TraceID, spanID, parent pcommon.SpanID, start, end uint64, statusError bool) {
	*f = spanFacts{name: name, traceID: traceID, spanID: spanID, parent: parent, start: start, end: end}
	if statusError {
		f.flags |= factStatusError
	}
	r.f = f
	r.rule.Reset()
	r.inLink = false
	r.requestModel, r.responseModel = "", ""
	r.seenConv, r.seenAgent, r.seenReq, r.seenResp = false, false, false, false
}

// attr reads one span attribute.
func (r *factReader) attr(k string, v pcommon.Value) {
	if key, ok := ledgerrule.Lookup(k); ok {
		r.rule.Attr(key, ruleValue(v))
		return
	}
	// Attributes copied into summaries, not read by the rule: the first
	// of repeated keys counts.
	switch k {
	case contract.AttrConversationID:
		if !r.seenConv {
			r.seenConv = true
			r.f.flags |= factConversationID
			r.f.conversationID = v.AsString()
		}
	case contract.AttrAgentName:
		if !r.seenAgent {
			r.seenAgent = true
			r.f.flags |= factAgentName
			r.f.agentName = v.AsString()
		}
	case contract.AttrRequestModel:
		if !r.seenReq {
			r.seenReq = true
			if v.Type() == pcommon.ValueTypeStr {
				r.requestModel = v.Str()
			}
		}
	case contract.AttrResponseModel:
		if !r.seenResp {
			r.seenResp = true
			if v.Type() == pcommon.ValueTypeStr {
				r.responseModel = v.Str()
			}
		}
	}
}

// linkStart starts reading a link of the span.
func (r *factReader) linkStart(traceID pcommon.TraceID, spanID pcommon.SpanID) {
	r.linkEnd()
	r.inLink = true
	r.link = ledgerrule.LinkReader{}
	r.linkTrace, r.linkSpan = traceID, spanID
}

// linkAttr reads one attribute of the current link.
func (r *factReader) linkAttr(k string, v pcommon.Value) {
	if k == contract.AttrLink {
		r.link.Attr(ruleValue(v))
	}
}

// linkEnd finishes the current link, if any.
func (r *factReader) linkEnd() {
	if !r.inLink {
		return
	}
	r.inLink = false
	kind, malformed := r.link.Kind()
	if malformed {
		r.f.flags |= factLinkMalformed
	}
	switch kind {
	case ledgerrule.LinkFollowup, ledgerrule.LinkConsumed, ledgerrule.LinkDetachedFrom:
		f := r.f
		if f.links == nil {
			f.links = f.linkBuf[:0]
		}
		f.links = append(f.links, linkFact{traceID: r.linkTrace, spanID: r.linkSpan, kind: kind})
	}
}

// end finishes the span's facts; cfg says which operations are model
// calls and bounds the counts.
func (r *factReader) end(cfg *ledgerConfig) {
	r.linkEnd()
	f := r.f
	var rf ledgerrule.Facts
	r.rule.Read(cfg.rule, &rf)
	if rf.Member {
		f.invocationID = rf.InvocationID
	}
	switch rf.Role {
	case ledgerrule.RoleRoot:
		f.role = roleRoot
	case ledgerrule.RoleBackground:
		f.role = roleBackground
	case ledgerrule.RoleContinuation:
		f.role = roleContinuation
	}
	f.children, f.followups, f.unrecorded, f.detached = rf.Children, rf.Followups, rf.Unrecorded, rf.Detached
	f.malformed = rf.Malformed
	if rf.Remote {
		f.flags |= factRemote
	}
	if rf.LateChild {
		f.flags |= factLateChild
	}
	if rf.Unattributed {
		f.flags |= factUnattributed
		f.unattributed = rf.UnattributedReason
	}
	if rf.Abandoned {
		f.flags |= factAbandoned
	}
	if rf.Interrupted {
		f.flags |= factInterrupted
	}
	if rf.UsageMismatch {
		f.flags |= factUsageMismatch
	}
	if rf.ModelCall {
		f.flags |= factModelCall
		f.usagePresent = rf.UsagePresent
		f.usageInt = rf.UsagePresent &^ rf.UsageInvalid
		f.usage = rf.Usage
	}
	f.model = r.responseModel
	if f.model == "" {
		f.model = r.requestModel
	}
}

// ruleValue converts a pdata value for the rule's reader. Only scalars
// carry content; a slice, map or bytes value is of the wrong type for
// every rule attribute whatever it holds.
func ruleValue(v pcommon.Value) ledgerrule.Value {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		return ledgerrule.StringValue(v.Str())
	case pcommon.ValueTypeInt:
		return ledgerrule.IntValue(v.Int())
	case pcommon.ValueTypeBool:
		return ledgerrule.BoolValue(v.Bool())
	case pcommon.ValueTypeDouble:
		return ledgerrule.DoubleValue(v.Double())
	case pcommon.ValueTypeBytes:
		return ledgerrule.OtherValue(ledgerrule.KindBytes)
	case pcommon.ValueTypeSlice:
		return ledgerrule.OtherValue(ledgerrule.KindSlice)
	case pcommon.ValueTypeMap:
		return ledgerrule.OtherValue(ledgerrule.KindMap)
	}
	return ledgerrule.OtherValue(ledgerrule.KindEmpty)
}

// readFacts reads a live span's facts (every attribute in map order,
// repeats included, and every link).
func readFacts(f *spanFacts, sp ptrace.Span, cfg *ledgerConfig) {
	var r factReader
	r.begin(f, sp.Name(), sp.TraceID(), sp.SpanID(), sp.ParentSpanID(),
		uint64(sp.StartTimestamp()), uint64(sp.EndTimestamp()), sp.Status().Code() == ptrace.StatusCodeError)
	for k, v := range sp.Attributes().All() {
		r.attr(k, v)
	}
	links := sp.Links()
	for i := 0; i < links.Len(); i++ {
		l := links.At(i)
		r.linkStart(l.TraceID(), l.SpanID())
		for k, v := range l.Attributes().All() {
			r.linkAttr(k, v)
		}
	}
	r.end(cfg)
}

// count returns a declared count's value when it is provable.
func count(c ledgerrule.Count) (int32, bool) {
	if c.State != ledgerrule.CountValid || c.N > math.MaxInt32 {
		return 0, false
	}
	return int32(c.N), true
}
