package refmodel

import (
	"math"
	"slices"
	"sort"
	"time"

	"github.com/agentledger/agentledger/contract"
)

// Reason kinds the model reports besides the contract's own constants.
const (
	// KindInvalidCount is invalid_count (Clarifications).
	KindInvalidCount = "invalid_count"
	// KindSpanLimit is span_limit.
	KindSpanLimit = "span_limit"
)

// usageKeys are the five summed usage attributes, in Totals order.
var usageKeys = [5]string{
	contract.AttrUsageInputTokens,
	contract.AttrUsageOutputTokens,
	contract.AttrUsageCacheReadTokens,
	contract.AttrUsageCacheCreateTokens,
	contract.AttrUsageReasoningTokens,
}

// Invocations returns the invocation ids the delivered spans name, sorted.
func Invocations(arrivals []Arrival) []string {
	seen := map[string]bool{}
	for _, a := range arrivals {
		if id, ok, _ := invocationOf(a.Span); ok {
			seen[id] = true
		}
	}
	out := make([]string, 0, len(seen))
	for id := range seen {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// Evaluate returns the verdict on invocation id at now, given every span
// delivered so far in delivery order.
func Evaluate(cfg Config, arrivals []Arrival, id string, now time.Time) Verdict {
	inv := collect(cfg, arrivals, id)
	inv.judge(now)
	v := Verdict{Reasons: inv.reasons, Totals: inv.totals, Members: len(inv.members), Anomalies: inv.anomalies}
	v.Final = len(v.Reasons) == 0
	sort.Strings(v.Anomalies)
	return v
}

// count is the reading of a count attribute.
type count struct {
	present bool
	valid   bool
	n       int64
}

// linkFacts is the reading of one link.
type linkFacts struct {
	trace TraceID
	span  SpanID
	kind  string // "" when absent or malformed
}

// member is an indexed span of the invocation, as the rule reads it.
type member struct {
	span   Span
	at     time.Time
	role   string
	remote bool
	late   bool
	// interrupted: invocation.followup.reason is interrupted (v0.7).
	interrupted bool
	links       []linkFacts

	children, followups, detached, unrecorded count

	parent     *member // nil: nobody's child
	badParent  bool
	badLinks   bool
	descendant []*member
}

// invocation is one invocation's indexed spans and what was found.
type invocation struct {
	cfg       Config
	members   []*member
	byID      map[SpanID]*member
	named     map[SpanID]bool
	reasons   map[string][]string
	anomalies []string
	totals    Totals
}

func (inv *invocation) flag(kind, detail string) {
	if inv.reasons == nil {
		inv.reasons = map[string][]string{}
	}
	d := kind
	if detail != "" {
		d += ":" + detail
	}
	if !slices.Contains(inv.reasons[kind], d) {
		inv.reasons[kind] = append(inv.reasons[kind], d)
	}
}

// anomaly records "kind:detail" once.
func (inv *invocation) anomaly(kind, detail string) {
	if a := kind + ":" + detail; !slices.Contains(inv.anomalies, a) {
		inv.anomalies = append(inv.anomalies, a)
	}
}

// occurrences returns every value of key in attrs, in order.
func occurrences(attrs []KeyValue, key string) []Value {
	var out []Value
	for _, kv := range attrs {
		if kv.Key == key {
			out = append(out, kv.Value)
		}
	}
	return out
}

// read returns the first value of key, whether it is present, and whether
// it is well formed: of type want and not repeated with another value.
func read(attrs []KeyValue, key string, want Kind) (v Value, present, ok bool) {
	vs := occurrences(attrs, key)
	if len(vs) == 0 {
		return Value{}, false, true
	}
	ok = vs[0].Kind == want
	for _, w := range vs[1:] {
		if !w.Equal(vs[0]) {
			ok = false
		}
	}
	return vs[0], true, ok
}

// invocationOf returns the span's invocation id (v0.6 rule 1 and the
// package doc's reading of mixed types) and whether it is malformed.
func invocationOf(s Span) (id string, ok, malformed bool) {
	if s.Name == contract.SpanNameSummary {
		return "", false, false // never a member (v0.3 rule 1)
	}
	vs := occurrences(s.Attributes, contract.AttrInvocationID)
	for _, v := range vs {
		if v.Kind == KindStr {
			id, ok = v.Str, true
			break
		}
	}
	for _, v := range vs[min(1, len(vs)):] {
		if !v.Equal(vs[0]) {
			malformed = true
		}
	}
	return id, ok, malformed
}

// collect indexes the invocation's spans in delivery order: dedup by
// (trace, span), a span ID in another trace is span_id_reused and not
// indexed; then reads each member's rule attributes.
func collect(cfg Config, arrivals []Arrival, id string) *invocation {
	inv := &invocation{cfg: cfg, byID: map[SpanID]*member{}, named: map[SpanID]bool{}}
	for _, a := range arrivals {
		got, ok, malformed := invocationOf(a.Span)
		if !ok || got != id {
			continue
		}
		s := a.Span
		if prev, seen := inv.byID[s.SpanID]; seen {
			if prev.span.TraceID != s.TraceID {
				inv.flag(contract.ReasonSpanIDReused, s.Name)
			}
			continue // a duplicate discharges nothing
		}
		if malformed {
			inv.flag(contract.ReasonMalformedAttribute, contract.AttrInvocationID+" on "+s.Name)
		}
		m := inv.read(s)
		m.at = a.At
		inv.members = append(inv.members, m)
		inv.byID[s.SpanID] = m
		inv.named[s.SpanID] = true
		if s.ParentSpanID != (SpanID{}) {
			inv.named[s.ParentSpanID] = true
		}
		for _, l := range s.Links {
			if l.SpanID != (SpanID{}) && tracksTarget(l) {
				inv.named[l.SpanID] = true
			}
		}
	}
	return inv
}

func (inv *invocation) malformedAttr(key string, s Span) {
	inv.flag(contract.ReasonMalformedAttribute, key+" on "+s.Name)
}

// readCount reads an int count: valid when a well-formed integer between 0
// and max_spans_per_invocation.
func (inv *invocation) readCount(s Span, key string) count {
	v, present, ok := read(s.Attributes, key, KindInt)
	if !present {
		return count{}
	}
	if !ok {
		inv.malformedAttr(key, s)
		return count{present: true}
	}
	valid := v.Int >= 0 && v.Int <= int64(inv.cfg.MaxSpans)
	return count{present: true, valid: valid, n: v.Int}
}

// readBool reads a bool marker: a malformed one reads as true.
func (inv *invocation) readBool(s Span, key string) bool {
	v, present, ok := read(s.Attributes, key, KindBool)
	if !present {
		return false
	}
	if !ok {
		inv.malformedAttr(key, s)
		return true
	}
	return v.Bool
}

// readStr reads a string attribute: "" when absent or malformed.
func (inv *invocation) readStr(s Span, key string) (string, bool) {
	v, present, ok := read(s.Attributes, key, KindStr)
	if !present {
		return "", false
	}
	if !ok {
		inv.malformedAttr(key, s)
		return "", true
	}
	return v.Str, true
}

func (inv *invocation) read(s Span) *member {
	m := &member{span: s}
	m.role, _ = inv.readStr(s, contract.AttrRole)
	m.remote = inv.readBool(s, contract.AttrRemote)
	m.late = inv.readBool(s, contract.AttrLateChild) // v0.2 rule 1: not a bool reads as true
	m.children = inv.readCount(s, contract.AttrChildren)
	m.followups = inv.readCount(s, contract.AttrFollowups)
	m.detached = inv.readCount(s, contract.AttrDetached)
	m.unrecorded = inv.readCount(s, contract.AttrUnrecorded)
	if _, present := inv.readStr(s, contract.AttrUnattributed); present {
		inv.flag(contract.ReasonUnattributedWakeup, s.Name)
	}
	switch reason, _ := inv.readStr(s, contract.AttrFollowupReason); reason {
	case contract.ReasonAbandoned:
		inv.flag(contract.ReasonAbandonedFollowup, s.Name)
	case contract.ReasonInterrupted:
		m.interrupted = true
	}
	inv.readStr(s, contract.AttrFollowupConsumer)
	// v0.8: a well-formed true names the span; a malformed value is
	// malformed_attribute and names nothing.
	if v, present, ok := read(s.Attributes, contract.AttrUsageMismatch, KindBool); present && !ok {
		inv.malformedAttr(contract.AttrUsageMismatch, s)
	} else if v.Bool {
		inv.anomaly(contract.AnomalyUsageMismatch, s.Name)
	}
	inv.sdkLimits(s)
	op, _ := inv.readStr(s, contract.AttrOperationName)
	if op != "" && slices.Contains(inv.cfg.UsageOperations, op) {
		inv.modelCall(s)
	}
	for _, l := range s.Links {
		v, present, ok := read(l.Attributes, contract.AttrLink, KindStr)
		lf := linkFacts{trace: l.TraceID, span: l.SpanID}
		switch {
		case !present:
		case !ok:
			inv.malformedAttr(contract.AttrLink, s)
		default:
			lf.kind = v.Str
		}
		m.links = append(m.links, lf)
	}
	return m
}

// modelCall sums a model call's usage (v0.2 rule 5, v0.6 rule 1).
func (inv *invocation) modelCall(s Span) {
	inv.totals.ModelCalls++
	sums := [5]*int64{&inv.totals.Input, &inv.totals.Output, &inv.totals.CacheRead, &inv.totals.CacheCreation, &inv.totals.Reasoning}
	var present [5]bool
	for i, key := range usageKeys {
		vs := occurrences(s.Attributes, key)
		if len(vs) == 0 {
			continue
		}
		present[i] = true
		bad := false
		for _, v := range vs {
			if v.Kind != KindInt {
				inv.flag(contract.ReasonInvalidUsage, key+" on "+s.Name)
				bad = true
			} else if v.Int != vs[0].Int || vs[0].Kind != KindInt {
				inv.malformedAttr(key, s)
				bad = true
			}
		}
		if bad {
			continue
		}
		n := vs[0].Int
		if n < 0 || n > math.MaxInt64-*sums[i] {
			inv.flag(contract.ReasonInvalidUsage, key+" on "+s.Name)
			continue
		}
		*sums[i] += n
	}
	if !s.Error && !present[0] && !present[1] {
		inv.flag(contract.ReasonUsageMissing, s.Name)
	}
}

// tracksTarget reports whether a link names a span the invocation must
// keep track of: a well-formed followup or detached_from link, whose
// target's obligation it discharges. A consumed link names a span of
// another invocation, and a link of another or a malformed kind
// discharges nothing, so neither is held (v0.6 rule 5 counts the span IDs
// an invocation holds).
func tracksTarget(l Link) bool {
	vs := occurrences(l.Attributes, contract.AttrLink)
	if len(vs) == 0 || vs[0].Kind != KindStr {
		return false
	}
	for _, v := range vs[1:] {
		if !v.Equal(vs[0]) {
			return false
		}
	}
	return vs[0].Str == contract.LinkFollowup || vs[0].Str == contract.LinkDetachedFrom
}

// sdkLimits flags what the SDK's span limits took from a span (v0.14 SDK
// settings): dropped attributes, links or link attributes, and an id the
// instrumentation restored after a value length limit cut it
// (invocation.sdk_limit; a malformed or empty value names that limit).
func (inv *invocation) sdkLimits(s Span) {
	if s.DroppedAttributes > 0 {
		inv.flag(contract.ReasonSDKLimit, "attributes on "+s.Name)
	}
	if s.DroppedLinks > 0 {
		inv.flag(contract.ReasonSDKLimit, "links on "+s.Name)
	}
	for _, l := range s.Links {
		if l.DroppedAttributes > 0 {
			inv.flag(contract.ReasonSDKLimit, "link_attributes on "+s.Name)
		}
	}
	if occ := occurrences(s.Attributes, contract.AttrSDKLimit); len(occ) > 0 {
		what, _ := inv.readStr(s, contract.AttrSDKLimit)
		if what == "" {
			what = "attribute_value_length"
		}
		inv.flag(contract.ReasonSDKLimit, what+" on "+s.Name)
	}
	if inv.readBool(s, contract.AttrDoubleInstrumented) {
		inv.flag(contract.ReasonDoubleInstrumented, s.Name)
	}
}
