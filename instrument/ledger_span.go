package instrument

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/ledgerrule"
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
	id, role, session, agent string
	// modelCall: gen_ai.operation.name is a usage operation.
	modelCall bool
	// unattributed is the reason of an unattributed turn's root, or "".
	unattributed string
	// abandoned: the span carries invocation.followup.reason = abandoned.
	abandoned bool
	// interrupted: the span carries invocation.followup.reason =
	// interrupted; the jobs its followup links discharge are named
	// followup_interrupted (v0.7).
	interrupted bool
	// usageMismatch: the span carries invocation.usage.mismatch = true
	// (v0.8).
	usageMismatch bool
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
	// malformed has a bit per ledgerrule.Key whose value is malformed.
	malformed uint32
	// stamped: the span itself carries invocation.children equal to the
	// count the SpanProcessor passed (it stamps 0 at the span's start).
	stamped bool

	// unrecorded: the span's invocation.unrecorded is above 0 (or not a
	// non-negative int, the reading that fails closed); 0 or 1.
	unrecorded int
	// detached is the span's invocation.detached: 0 when absent,
	// childrenInvalid when it cannot be proven.
	detached int
}

// readFacts reads a span's facts through the contract's one reader
// (internal/ledgerrule), as the collector reads the exported span:
// children is the invocation.children the SpanProcessor counted
// (countAbsent when it counted none), which is what the exported span
// carries, so it is read in place of the attribute.
func readFacts(s sdktrace.ReadOnlySpan, children int, rule *ledgerrule.Config) spanFacts {
	f := spanFacts{children: countAbsent, followups: countAbsent}
	var r ledgerrule.SpanReader
	sessionSeen, agentSeen := false, false
	for _, kv := range s.Attributes() {
		if k, ok := ledgerrule.Lookup(string(kv.Key)); ok {
			if k == ledgerrule.KeyChildren {
				f.stamped = children >= 0 && kv.Value.Type() == attribute.INT64 && kv.Value.AsInt64() == int64(children)
				continue
			}
			r.Attr(k, ruleValue(kv.Value))
			continue
		}
		// Copied into summaries, not read by the rule: the first counts.
		switch kv.Key {
		case contract.AttrConversationID:
			if !sessionSeen {
				sessionSeen, f.session = true, kv.Value.AsString()
			}
		case contract.AttrAgentName:
			if !agentSeen {
				agentSeen, f.agent = true, kv.Value.AsString()
			}
		}
	}
	if children != countAbsent {
		r.Attr(ledgerrule.KeyChildren, ledgerrule.IntValue(int64(children)))
	}
	var rf ledgerrule.Facts
	r.Read(rule, &rf)
	if rf.Member {
		f.id = rf.InvocationID
	}
	f.role = roleName(rf.Role)
	f.modelCall = rf.ModelCall
	f.children = countOf(rf.Children)
	f.followups = countOf(rf.Followups)
	// v0.6 rules 3 and 4: unrecorded is 1 when the span declares any
	// unrecorded child or an unprovable count (failing closed), detached
	// 0 when absent.
	if rf.Unrecorded.State == ledgerrule.CountInvalid || rf.Unrecorded.N > 0 {
		f.unrecorded = 1
	}
	if rf.Detached.Declared() {
		f.detached = countOf(rf.Detached)
	}
	f.remote, f.late = rf.Remote, rf.LateChild
	if rf.Unattributed {
		f.unattributed = rf.UnattributedReason
		if f.unattributed == "" {
			f.unattributed = UnattributedUnknown
		}
	}
	f.abandoned = rf.Abandoned
	f.interrupted = rf.Interrupted
	f.usageMismatch = rf.UsageMismatch
	f.malformed = rf.Malformed
	if rf.ModelCall {
		f.hasUsage = rf.HasUsage()
		for i := range ledgerrule.NumUsage {
			if rf.UsageInvalid&(1<<i) != 0 {
				f.invalidUsage = append(f.invalidUsage, string(usageKeys[i]))
				continue
			}
			f.usage[i] = rf.Usage[i]
		}
	}
	f.failed = s.Status().Code == codes.Error
	return f
}

// countOf converts a count as the reader read it.
func countOf(c ledgerrule.Count) int {
	switch c.State {
	case ledgerrule.CountValid:
		return int(c.N)
	case ledgerrule.CountInvalid:
		return childrenInvalid
	}
	return countAbsent
}

// roleName is the contract's name of a role the rule tells apart, or "".
func roleName(r ledgerrule.Role) string {
	switch r {
	case ledgerrule.RoleRoot:
		return contract.RoleRoot
	case ledgerrule.RoleBackground:
		return contract.RoleBackground
	case ledgerrule.RoleContinuation:
		return contract.RoleContinuation
	case ledgerrule.RoleFollowupClosed:
		return contract.RoleFollowupClosed
	}
	return ""
}

// ruleValue converts an attribute value for the rule's reader. Slices
// carry no content: no rule attribute is a slice.
func ruleValue(v attribute.Value) ledgerrule.Value {
	switch v.Type() {
	case attribute.STRING:
		return ledgerrule.StringValue(v.AsString())
	case attribute.INT64:
		return ledgerrule.IntValue(v.AsInt64())
	case attribute.BOOL:
		return ledgerrule.BoolValue(v.AsBool())
	case attribute.FLOAT64:
		return ledgerrule.DoubleValue(v.AsFloat64())
	case attribute.INVALID:
		return ledgerrule.OtherValue(ledgerrule.KindEmpty)
	}
	return ledgerrule.OtherValue(ledgerrule.KindSlice)
}

// linkKind reads a link's invocation.link through the contract's reader:
// its kind, and whether it is malformed.
func linkKind(attrs []attribute.KeyValue) (ledgerrule.LinkKind, bool) {
	var r ledgerrule.LinkReader
	for _, kv := range attrs {
		if kv.Key == contract.AttrLink {
			r.Attr(ruleValue(kv.Value))
		}
	}
	return r.Kind()
}

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
	var r ledgerrule.SpanReader
	sessionSeen, agentSeen := false, false
	for _, kv := range attrs {
		if k, ok := ledgerrule.Lookup(string(kv.Key)); ok {
			r.Attr(k, ruleValue(kv.Value))
			continue
		}
		switch kv.Key {
		case contract.AttrConversationID:
			if !sessionSeen {
				sessionSeen, a.session = true, kv.Value.AsString()
			}
		case contract.AttrAgentName:
			if !agentSeen {
				agentSeen, a.agent = true, kv.Value.AsString()
			}
		}
	}
	var rf ledgerrule.Facts
	r.Read(startRule, &rf)
	if rf.Member {
		a.id = rf.InvocationID
	}
	a.role = roleName(rf.Role)
	if rf.Unattributed {
		a.unattributed = rf.UnattributedReason
		if a.unattributed == "" {
			a.unattributed = UnattributedUnknown
		}
	}
	a.lateChild = rf.LateChild
	return a
}

// startRule configures the reading at a span's start, which reads no
// counts or usage.
var startRule = ledgerrule.NewConfig(nil, 0)

// linkFacts is what a span's links say, checked before any of them
// discharges (rules 2 and 3).
type linkFacts struct {
	// malformed: a followup or consumed link to the span itself, or a followup and a
	// consumed link to the same target; such links discharge nothing.
	malformed bool
	// duplicate: some target is named by more than one followup link.
	duplicate bool
	// malformedKind: some link's invocation.link is malformed (v0.6 rule
	// 1); that link discharges nothing.
	malformedKind bool
}

// checkLinks inspects the followup and consumed links of span s.
func checkLinks(s sdktrace.ReadOnlySpan) linkFacts {
	var lf linkFacts
	links := s.Links()
	self := s.SpanContext().SpanID()
	for i, link := range links {
		kind, bad := linkKind(link.Attributes)
		if bad {
			lf.malformedKind = true
		}
		if kind != ledgerrule.LinkFollowup && kind != ledgerrule.LinkConsumed {
			continue
		}
		target := link.SpanContext.SpanID()
		if target == self {
			lf.malformed = true
		}
		for _, prev := range links[:i] {
			if prev.SpanContext.SpanID() != target {
				continue
			}
			switch prevKind, _ := linkKind(prev.Attributes); prevKind {
			case kind:
				if kind == ledgerrule.LinkFollowup {
					lf.duplicate = true
				}
			case ledgerrule.LinkFollowup, ledgerrule.LinkConsumed:
				lf.malformed = true
			}
		}
	}
	return lf
}
