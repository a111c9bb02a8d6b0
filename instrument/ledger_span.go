package instrument

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/contract"
)

// Counts of invocation.children and invocation.followups as spanFacts
// holds them.
const (
	// countAbsent: the span declares no count.
	countAbsent = -1
	// childrenInvalid: the span declares a count that cannot be proven
	// (not a non-negative integer, or larger than the per-invocation span
	// bound): the invocation can never be final (invalid_count).
	childrenInvalid = -2
)

// Usage attribute indexes in spanFacts.usage.
var usageKeys = [5]attribute.Key{
	contract.AttrUsageInputTokens, contract.AttrUsageOutputTokens,
	contract.AttrUsageCacheReadTokens, contract.AttrUsageCacheCreateTokens,
	contract.AttrUsageReasoningTokens,
}

// spanFacts is what the ledger reads from one ended span, in one pass over
// its attributes and outside the ledger's lock.
type spanFacts struct {
	id, role, op, session, agent string
	// unattributed is the reason of an unattributed turn's root, or "".
	unattributed string
	// abandoned: the span carries invocation.followup.reason = abandoned.
	abandoned bool
	// children and followups are the declared counts, countAbsent or
	// childrenInvalid.
	children, followups int
	remote, late        bool
	usage               [5]int64
	// hasUsage: the span carries input or output token usage (valid or
	// not): it is not missing usage (rule 5).
	hasUsage bool
	// invalidUsage lists usage keys whose value is not a non-negative
	// integer (rare; nil otherwise).
	invalidUsage []string
	// failed: the span's status is Error.
	failed bool
	// stamped: the span itself carries invocation.children equal to the
	// count the SpanProcessor passed (it stamps 0 at the span's start).
	stamped bool

	// --- contract v0.6 rules 3 and 4 (kept apart from the reader above,
	// which a shared reader replaces).
	// unrecorded: the span's invocation.unrecorded is above 0 (or not a
	// non-negative int, the reading that fails closed); 0 or 1.
	unrecorded int
	// detached is the span's invocation.detached: 0 when absent,
	// childrenInvalid when it cannot be proven.
	detached int
	// --- end v0.6
}

// readFacts reads a span's facts; children is the invocation.children the
// SpanProcessor counted (countAbsent or childrenInvalid otherwise), and
// maxCount bounds a provable count.
func readFacts(s sdktrace.ReadOnlySpan, children, maxCount int) spanFacts {
	f := spanFacts{children: children, followups: countAbsent}
	if f.children > maxCount {
		f.children = childrenInvalid
	}
	followupsSeen := false
	for _, kv := range s.Attributes() {
		switch kv.Key {
		case contract.AttrInvocationID:
			f.id = kv.Value.AsString()
		case contract.AttrRole:
			f.role = kv.Value.AsString()
		case contract.AttrOperationName:
			f.op = kv.Value.AsString()
		case contract.AttrConversationID:
			f.session = kv.Value.AsString()
		case contract.AttrAgentName:
			f.agent = kv.Value.AsString()
		case contract.AttrChildren:
			f.stamped = children >= 0 && kv.Value.Type() == attribute.INT64 && kv.Value.AsInt64() == int64(children)
		case contract.AttrFollowups:
			followupsSeen = true
			f.followups = childrenInvalid
			if kv.Value.Type() == attribute.INT64 && kv.Value.AsInt64() >= 0 && kv.Value.AsInt64() <= int64(maxCount) {
				f.followups = int(kv.Value.AsInt64())
			}
		case contract.AttrRemote:
			// A remote flag of the wrong type is taken as remote: waiting
			// for the settle time is the conservative reading.
			f.remote = kv.Value.Type() != attribute.BOOL || kv.Value.AsBool()
		case contract.AttrLateChild:
			// A flag of the wrong type reads as true: the child then
			// discharges nothing, the reading that fails closed.
			f.late = kv.Value.Type() != attribute.BOOL || kv.Value.AsBool()
		case contract.AttrUnattributed:
			f.unattributed = unattributedReason(kv.Value)
		case contract.AttrFollowupReason:
			f.abandoned = kv.Value.AsString() == contract.ReasonAbandoned
		// --- contract v0.6 rules 3 and 4.
		case contract.AttrUnrecorded:
			f.unrecorded = readUnrecorded(kv.Value)
		case contract.AttrDetached:
			f.detached = readDetached(kv.Value, maxCount)
		// --- end v0.6
		default:
			for i, k := range usageKeys {
				if kv.Key != k {
					continue
				}
				if i < 2 {
					f.hasUsage = true
				}
				if kv.Value.Type() == attribute.INT64 && kv.Value.AsInt64() >= 0 {
					f.usage[i] = kv.Value.AsInt64()
				} else {
					f.invalidUsage = append(f.invalidUsage, string(k))
				}
			}
		}
	}
	if f.role == contract.RoleBackground && !followupsSeen {
		// A job that does not say how many followups it promises cannot
		// be proven complete.
		f.followups = childrenInvalid
	}
	f.failed = s.Status().Code == codes.Error
	return f
}

// --- contract v0.6 rules 3 and 4: readers of invocation.unrecorded and
// invocation.detached, used by readFacts.

// readUnrecorded reads invocation.unrecorded: a value that is not a
// non-negative int reads as 1, so that the invocation fails closed
// (not_sampled). Any value above 0 means the same.
func readUnrecorded(v attribute.Value) int {
	if v.Type() == attribute.INT64 && v.AsInt64() == 0 {
		return 0
	}
	return 1
}

// readDetached reads invocation.detached: childrenInvalid for a value
// that is not a non-negative int of at most maxCount.
func readDetached(v attribute.Value, maxCount int) int {
	if v.Type() != attribute.INT64 || v.AsInt64() < 0 || v.AsInt64() > int64(maxCount) {
		return childrenInvalid
	}
	return int(v.AsInt64())
}

// --- end v0.6

// startAttrs is what the SpanProcessor reads from a span's attributes at
// its start, in one pass.
type startAttrs struct {
	// id is the invocation.id the span carries, or "".
	id, role, session, agent string
	// unattributed is the reason of an unattributed turn's root (a value
	// that is not a non-empty string reads as UnattributedUnknown), or "".
	unattributed string
	// lateChild: the span carries invocation.late_child = true (a flag of
	// the wrong type reads as true, as readFacts reads it at the end).
	lateChild bool
}

func readStartAttrs(attrs []attribute.KeyValue) startAttrs {
	var a startAttrs
	for _, kv := range attrs {
		switch kv.Key {
		case contract.AttrInvocationID:
			a.id = kv.Value.AsString()
		case contract.AttrRole:
			a.role = kv.Value.AsString()
		case contract.AttrConversationID:
			a.session = kv.Value.AsString()
		case contract.AttrAgentName:
			a.agent = kv.Value.AsString()
		case contract.AttrUnattributed:
			a.unattributed = unattributedReason(kv.Value)
		case contract.AttrLateChild:
			a.lateChild = kv.Value.Type() != attribute.BOOL || kv.Value.AsBool()
		}
	}
	return a
}

// linkFacts is what a span's links say, checked before any of them
// discharges (rules 2 and 3).
type linkFacts struct {
	// malformed: a followup link to the span itself, or a followup and a
	// consumed link to the same target; such links discharge nothing.
	malformed bool
	// duplicate: some target is named by more than one followup link.
	duplicate bool
}

// checkLinks inspects the followup and consumed links of span s.
func checkLinks(s sdktrace.ReadOnlySpan) linkFacts {
	var lf linkFacts
	links := s.Links()
	self := s.SpanContext().SpanID()
	for i, link := range links {
		kind := attrString(link.Attributes, contract.AttrLink)
		if kind != contract.LinkFollowup && kind != contract.LinkConsumed {
			continue
		}
		target := link.SpanContext.SpanID()
		if kind == contract.LinkFollowup && target == self {
			lf.malformed = true
		}
		for _, prev := range links[:i] {
			if prev.SpanContext.SpanID() != target {
				continue
			}
			switch attrString(prev.Attributes, contract.AttrLink) {
			case kind:
				if kind == contract.LinkFollowup {
					lf.duplicate = true
				}
			case contract.LinkFollowup, contract.LinkConsumed:
				lf.malformed = true
			}
		}
	}
	return lf
}

// unattributedReason reads invocation.unattributed: its string, or
// UnattributedUnknown for a value that is not a non-empty string (the
// turn is unattributed either way; only the reason is unknown).
func unattributedReason(v attribute.Value) string {
	if v.Type() == attribute.STRING && v.AsString() != "" {
		return v.AsString()
	}
	return UnattributedUnknown
}
