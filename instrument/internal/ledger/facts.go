package ledger

import (
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/ledgerrule"
)

// CountAbsent is a child count the SpanProcessor did not keep (the span
// was not tracked): the span's own invocation.children, if any, stands.
const CountAbsent = -1

// Facts is what the ledger reads from one ended span, in one pass over
// its attributes and links and outside the ledger's lock: the
// ledgerrule.Span its invocation's Graph reads, read by the contract's one
// reader (internal/ledgerrule) from the span as it is exported, and what
// the ledger keeps besides (session, agent).
type Facts struct {
	ledgerrule.Span
	// id is the span's invocation, "" when it is no member.
	id string
	// role is the contract's name of the role the rule reads, or "".
	role           string
	session, agent string
}

// Read reads, into f, an ended span's facts, outside the ledger's lock,
// for Apply: s as exported with counts.
func (l *Ledger) Read(f *Facts, s sdktrace.ReadOnlySpan, counts ExportCounts) {
	readFacts(f, s, counts, l.rule)
}

// Invocation is the invocation f's span is a member of, "" when none.
func (f *Facts) Invocation() string { return f.id }

// readFacts reads an ended span's facts as the collector reads the
// exported span: s with the counts the SpanProcessor exports on it
// (ExportCounts: keeps and added, which the exported span's attributes
// also come from).
func readFacts(f *Facts, s sdktrace.ReadOnlySpan, counts ExportCounts, rule *ledgerrule.Config) {
	*f = Facts{}
	var r ledgerrule.SpanReader
	sessionSeen, agentSeen := false, false
	attr := func(kv attribute.KeyValue) {
		if k, ok := ledgerrule.Lookup(string(kv.Key)); ok {
			r.Attr(k, ruleValue(kv.Value))
			return
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
	for _, kv := range s.Attributes() {
		if counts.Keeps(kv) {
			attr(kv)
		}
	}
	var buf [AddedMax]attribute.KeyValue
	for _, kv := range counts.Added(&buf) {
		attr(kv)
	}
	r.Read(rule, &f.Facts)
	if f.Member {
		f.id = f.InvocationID
	}
	f.role = roleName(f.Role)
	sc := s.SpanContext()
	f.Name = s.Name()
	f.Trace, f.ID = ledgerrule.TraceID(sc.TraceID()), ledgerrule.SpanID(sc.SpanID())
	if p := s.Parent(); p.IsValid() {
		// OTLP carries the parent's span ID alone, in the span's trace: so
		// the collector reads it, and so does the ledger.
		f.Parent = ledgerrule.SpanID(p.SpanID())
	}
	f.Start, f.End = unixNanos(s.StartTime()), unixNanos(s.EndTime())
	f.Failed = s.Status().Code == codes.Error
	// What the SDK's limits dropped is exported with the span (OTLP's
	// dropped counts): the collector reads it, and so does the ledger.
	f.Dropped.Attributes = ledgerrule.DroppedCount(s.DroppedAttributes())
	f.Dropped.Links = ledgerrule.DroppedCount(s.DroppedLinks())
	for _, l := range s.Links() {
		f.Dropped.LinkAttributes += ledgerrule.DroppedCount(l.DroppedAttributeCount)
		kind, bad := linkKind(l.Attributes)
		if bad {
			f.LinkMalformed = true
		}
		switch kind {
		case ledgerrule.LinkFollowup, ledgerrule.LinkConsumed, ledgerrule.LinkDetachedFrom:
			f.Links.Add(ledgerrule.Link{
				Trace: ledgerrule.TraceID(l.SpanContext.TraceID()), Span: ledgerrule.SpanID(l.SpanContext.SpanID()), Kind: kind,
			})
		}
	}
}

// unixNanos is t in Unix nanoseconds, 0 before 1970.
func unixNanos(t time.Time) uint64 {
	if n := t.UnixNano(); n > 0 {
		return uint64(n)
	}
	return 0
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
	case ledgerrule.RoleWake:
		return contract.RoleWake
	case ledgerrule.RoleUnrecorded:
		return contract.RoleUnrecorded
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

// StartAttrs is what the SpanProcessor reads from a span's attributes at
// its start, in one pass.
type StartAttrs struct {
	// ID is the invocation.id the span carries, or "".
	ID, Role, Session, Agent string
	// Unattributed is the reason of an unattributed turn's root (a value
	// that is not a non-empty string reads as UnattributedUnknown), or "".
	Unattributed string
	// LateChild: the span carries invocation.late_child = true (a flag of
	// the wrong type reads as true, as readFacts reads it at the end).
	LateChild bool
	// Operation is the span's gen_ai.operation.name at its start, when a
	// string.
	Operation string
	// Marked: the span carries invocation.id or invocation.role, whatever
	// their values (a value length limit may have cut them to "").
	Marked bool
}

// UnattributedUnknown is the reason of an unattributed turn's root that
// names none (instrument.UnattributedUnknown).
const UnattributedUnknown = "unknown"

// ReadStartAttrs reads a span's attributes at its start, in one pass.
// The rule's reader sees only the four keys whose facts a start needs
// (each key's facts depend on its own values alone), and reads nothing
// when none is there: most spans carry none at their start.
func ReadStartAttrs(attrs []attribute.KeyValue) StartAttrs {
	var a StartAttrs
	var r ledgerrule.SpanReader
	read := false
	sessionSeen, agentSeen := false, false
	for _, kv := range attrs {
		if k, ok := ledgerrule.Lookup(string(kv.Key)); ok {
			switch k {
			case ledgerrule.KeyInvocationID, ledgerrule.KeyRole:
				a.Marked = true
				r.Attr(k, ruleValue(kv.Value))
				read = true
			case ledgerrule.KeyUnattributed, ledgerrule.KeyLateChild:
				r.Attr(k, ruleValue(kv.Value))
				read = true
			case ledgerrule.KeyOperation:
				if a.Operation == "" && kv.Value.Type() == attribute.STRING {
					a.Operation = kv.Value.AsString()
				}
			}
			continue
		}
		switch kv.Key {
		case contract.AttrConversationID:
			if !sessionSeen {
				sessionSeen, a.Session = true, kv.Value.AsString()
			}
		case contract.AttrAgentName:
			if !agentSeen {
				agentSeen, a.Agent = true, kv.Value.AsString()
			}
		}
	}
	if !read {
		return a
	}
	a.read(&r)
	return a
}

// read sets the facts of a start that the rule's reader r found.
func (a *StartAttrs) read(r *ledgerrule.SpanReader) {
	var rf ledgerrule.Facts
	r.Read(startRule, &rf)
	if rf.Member {
		a.ID = rf.InvocationID
	}
	a.Role = roleName(rf.Role)
	if rf.Unattributed {
		a.Unattributed = rf.UnattributedReason
		if a.Unattributed == "" {
			a.Unattributed = UnattributedUnknown
		}
	}
	a.LateChild = rf.LateChild
}

// startRule configures the reading at a span's start, which reads no
// counts or usage.
var startRule = ledgerrule.NewConfig(nil, 0)

// IsModelCall reports whether operation op names a model call.
func (l *Ledger) IsModelCall(op string) bool { return op != "" && l.rule.IsUsageOperation(op) }
