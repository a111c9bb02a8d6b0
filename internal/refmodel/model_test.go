package refmodel

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/contract/fixtures"
)

var testCfg = Config{MaxSpans: 100, UsageOperations: contract.DefaultUsageOperations, RemoteSettle: 2 * time.Second}

var epoch = time.Unix(1_700_000_000, 0)

func fromValue(v fixtures.Value) Value {
	switch v.Kind() {
	case fixtures.KindStr:
		return Str(v.Str())
	case fixtures.KindInt:
		return Int(v.Int())
	case fixtures.KindDouble:
		return Double(v.Double())
	case fixtures.KindBool:
		return Bool(v.Bool())
	case fixtures.KindArray:
		out := Value{Kind: KindSlice}
		for _, e := range v.Array() {
			out.Slice = append(out.Slice, fromValue(e))
		}
		return out
	}
	return Value{}
}

func fromAttrs(m map[string]fixtures.Value) []KeyValue {
	var out []KeyValue
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}) {
		out = append(out, KeyValue{k, fromValue(m[k])})
	}
	return out
}

func fromFixture(s fixtures.Span) Span {
	out := Span{
		TraceID: TraceID(s.TraceID), SpanID: SpanID(s.SpanID), ParentSpanID: SpanID(s.Parent),
		Name: s.Name, Error: s.Status == fixtures.StatusError,
		Start: epoch.Add(time.Duration(s.StartNS)), End: epoch.Add(time.Duration(s.EndNS)),
		Attributes:        fromAttrs(s.Attributes),
		DroppedAttributes: uint32(s.DroppedAttributes), DroppedLinks: uint32(s.DroppedLinks),
	}
	for _, l := range s.Links {
		out.Links = append(out.Links, Link{TraceID: TraceID(l.TraceID), SpanID: SpanID(l.SpanID), Attributes: fromAttrs(l.Attributes),
			DroppedAttributes: uint32(l.DroppedAttributes)})
	}
	return out
}

// TestFixtures replays every shared contract case: the model says final
// exactly when the case expects final, with its totals.
func TestFixtures(t *testing.T) {
	cases, err := fixtures.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			cfg := testCfg
			cfg.RemoteSettle = c.Config.RemoteSettle()
			var arrivals []Arrival
			times := c.Arrivals()
			for i, s := range c.Delivered() {
				arrivals = append(arrivals, Arrival{Span: fromFixture(s), At: epoch.Add(times[i])})
			}
			delivered := epoch.Add(times[len(times)-1])
			for _, o := range c.Expect {
				now := delivered
				if o.Moment() == fixtures.WhenSettled {
					now = now.Add(cfg.RemoteSettle)
				}
				v := Evaluate(cfg, arrivals, o.Invocation, now)
				if got, want := v.Anomalies, modelAnomalies(o.Anomalies); !slices.Equal(got, want) {
					t.Errorf("%s at %s: model anomalies %q, case %q", o.Invocation, o.Moment(), got, want)
				}
				if got, want := v.Final, o.Status == fixtures.StatusFinal; got != want {
					t.Fatalf("%s at %s: model final=%v (reasons %v), case wants %s %v", o.Invocation, o.Moment(), got, v.Reasons, o.Status, o.Reasons)
				}
				if v.Final {
					want := Totals{Input: o.Usage.Input, Output: o.Usage.Output, CacheRead: o.Usage.CacheRead, CacheCreation: o.Usage.CacheCreation, Reasoning: o.Usage.Reasoning, ModelCalls: v.Totals.ModelCalls}
					if v.Totals != want {
						t.Fatalf("%s: totals %+v, want %+v", o.Invocation, v.Totals, want)
					}
					continue
				}
				// Each finality reason the case names is one the model found
				// (once settled: a delivered outcome may describe a summary
				// emitted before the last span arrived).
				if o.Moment() != fixtures.WhenSettled {
					continue
				}
				for _, r := range o.Reasons {
					kind, _, _ := strings.Cut(r, ":")
					switch kind {
					case contract.ReasonOpenTimeout, contract.ReasonEvicted, contract.ReasonShutdown:
						continue
					}
					if _, ok := v.Reasons[kind]; !ok {
						t.Errorf("%s: case reason %q, model reasons %v", o.Invocation, r, v.Reasons)
					}
				}
			}
		})
	}
}

// modelAnomalies returns the followup_interrupted and usage_mismatch
// entries of anomalies, sorted: the kinds the model computes.
func modelAnomalies(anomalies []string) []string {
	var out []string
	for _, a := range anomalies {
		if strings.HasPrefix(a, contract.AnomalyFollowupInterrupted+":") || strings.HasPrefix(a, contract.AnomalyUsageMismatch+":") {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

// A tiny builder for hand-written cases.

func tr(n uint64) TraceID {
	var t TraceID
	binary.BigEndian.PutUint64(t[8:], n)
	return t
}

func id(n uint64) SpanID {
	var s SpanID
	binary.BigEndian.PutUint64(s[:], n)
	return s
}

func kv(k string, v Value) KeyValue { return KeyValue{k, v} }

func span(trace, sid, parent uint64, name string, attrs ...KeyValue) Span {
	s := Span{TraceID: tr(trace), SpanID: id(sid), Name: name, Start: epoch, End: epoch,
		Attributes: append([]KeyValue{kv(contract.AttrInvocationID, Str("p"))}, attrs...)}
	if parent != 0 {
		s.ParentSpanID = id(parent)
	}
	return s
}

func link(trace, sid uint64, kind string) Link {
	return Link{TraceID: tr(trace), SpanID: id(sid), Attributes: []KeyValue{kv(contract.AttrLink, Str(kind))}}
}

func root(children int64) Span {
	return span(1, 1, 0, "invoke_agent a", kv(contract.AttrRole, Str(contract.RoleRoot)), kv(contract.AttrChildren, Int(children)))
}

func chat(trace, sid, parent uint64, in int64) Span {
	return span(trace, sid, parent, "chat", kv(contract.AttrOperationName, Str(contract.OpChat)),
		kv(contract.AttrUsageInputTokens, Int(in)), kv(contract.AttrUsageOutputTokens, Int(1)))
}

func job(sid, parent uint64, followups Value) Span {
	return span(1, sid, parent, "background shell", kv(contract.AttrRole, Str(contract.RoleBackground)), kv(contract.AttrFollowups, followups))
}

func cont(trace, sid uint64, links ...Link) Span {
	s := span(trace, sid, 0, "continue_agent a", kv(contract.AttrRole, Str(contract.RoleContinuation)))
	s.Links = links
	return s
}

func at(spans ...Span) []Arrival {
	out := make([]Arrival, len(spans))
	for i, s := range spans {
		out[i] = Arrival{Span: s, At: epoch}
	}
	return out
}

func TestHandWritten(t *testing.T) {
	later := epoch.Add(time.Hour)
	withLinks := func(s Span, links ...Link) Span { s.Links = links; return s }
	manyLinks := func() []Link {
		var out []Link
		for i := range 3000 {
			out = append(out, link(1, uint64(1000+i), contract.LinkFollowup))
		}
		return out
	}
	tests := []struct {
		name     string
		cfg      func(*Config)
		spans    []Arrival
		final    bool
		input    int64
		kind     string // a reason kind the model must report when not final
		settleAt time.Time
	}{
		{name: "root and one call", spans: at(root(1), chat(1, 2, 1, 7)), final: true, input: 7},
		{name: "missing child", spans: at(root(2), chat(1, 2, 1, 7)), kind: contract.ReasonMissingChildren},
		{name: "duplicate does not discharge", spans: at(root(2), chat(1, 2, 1, 7), chat(1, 2, 1, 7)), kind: contract.ReasonMissingChildren},
		{name: "span id reused", spans: at(root(1), chat(1, 2, 1, 7), chat(2, 2, 0, 9)), kind: contract.ReasonSpanIDReused},
		{name: "repeated children, different values", spans: at(func() Span {
			r := root(2)
			r.Attributes = append(r.Attributes, kv(contract.AttrChildren, Int(1)))
			return r
		}(), chat(1, 2, 1, 7)), kind: contract.ReasonMalformedAttribute},
		{name: "repeated children, equal values", spans: at(func() Span {
			r := root(1)
			r.Attributes = append(r.Attributes, kv(contract.AttrChildren, Int(1)))
			return r
		}(), chat(1, 2, 1, 7)), final: true, input: 7},
		{name: "repeated usage, different values", spans: at(root(1), func() Span {
			c := chat(1, 2, 1, 100)
			c.Attributes = append(c.Attributes, kv(contract.AttrUsageInputTokens, Int(5)))
			return c
		}()), kind: contract.ReasonMalformedAttribute},
		{name: "role as an array", spans: at(root(1),
			span(1, 2, 1, "background shell", kv(contract.AttrRole, Value{Kind: KindSlice, Slice: []Value{Str("background")}}), kv(contract.AttrFollowups, Int(1)))),
			kind: contract.ReasonMalformedAttribute},
		{name: "followup discharged", spans: at(root(1), job(2, 1, Int(1)), cont(2, 3, link(1, 2, contract.LinkFollowup))), final: true},
		{name: "followup link in another trace", spans: at(root(1), job(2, 1, Int(1)), cont(2, 3, link(9, 2, contract.LinkFollowup))), kind: contract.ReasonMalformedLink},
		{name: "two links, one span, two followups", spans: at(root(1), job(2, 1, Int(2)),
			cont(2, 3, link(1, 2, contract.LinkFollowup), link(1, 2, contract.LinkFollowup))), kind: contract.ReasonOpenFollowup},
		{name: "followups not an int", spans: at(root(1), job(2, 1, Str("1")), cont(2, 3, link(1, 2, contract.LinkFollowup))), kind: contract.ReasonMalformedAttribute},
		{name: "unrecorded", spans: at(root(0), span(1, 2, 0, "x", kv(contract.AttrUnrecorded, Int(1)))), kind: contract.ReasonNotSampled},
		{name: "unrecorded declaration", spans: at(root(0), span(7, 7, 0, "chat late", kv(contract.AttrRole, Str(contract.RoleUnrecorded)),
			kv(contract.AttrChildren, Int(0)), kv(contract.AttrUnrecorded, Int(1)))), kind: contract.ReasonNotSampled},
		{name: "unrecorded declaration without its count", spans: at(root(0), span(7, 7, 0, "chat late", kv(contract.AttrRole, Str(contract.RoleUnrecorded)))),
			kind: contract.ReasonNotSampled},
		{name: "detached met", spans: at(withLinks(span(1, 1, 0, "invoke_agent a", kv(contract.AttrRole, Str(contract.RoleRoot)), kv(contract.AttrDetached, Int(1)))),
			withLinks(span(5, 5, 0, "new"), link(1, 1, contract.LinkDetachedFrom))), final: true},
		{name: "detached missing", spans: at(span(1, 1, 0, "invoke_agent a", kv(contract.AttrRole, Str(contract.RoleRoot)), kv(contract.AttrDetached, Int(1)))),
			kind: contract.ReasonMissingDetached},
		{name: "detached by a late span", spans: at(span(1, 1, 0, "invoke_agent a", kv(contract.AttrRole, Str(contract.RoleRoot)), kv(contract.AttrDetached, Int(1))),
			withLinks(span(5, 5, 0, "new", kv(contract.AttrLateChild, Bool(true))), link(1, 1, contract.LinkDetachedFrom))), kind: contract.ReasonMissingDetached},
		{name: "3000 links beyond the span bound", cfg: func(c *Config) { c.MaxSpans = 1000 }, spans: at(root(0), withLinks(span(1, 2, 0, "x"), manyLinks()...)), kind: KindSpanLimit},
		{name: "self parent", spans: at(root(1), chat(1, 2, 2, 7)), kind: contract.ReasonMalformedParentage},
		{name: "cycle", spans: at(root(0), chat(1, 2, 3, 7), chat(1, 3, 2, 7)), kind: contract.ReasonMalformedParentage},
		{name: "parent in another trace", spans: at(root(1), chat(2, 2, 1, 7)), kind: contract.ReasonMalformedParentage},
		{name: "late child does not discharge", spans: at(root(1), func() Span {
			c := chat(1, 2, 1, 7)
			c.Attributes = append(c.Attributes, kv(contract.AttrLateChild, Bool(true)))
			return c
		}()), kind: contract.ReasonMissingChildren},
		{name: "remote settles", spans: at(root(1), span(1, 2, 1, "tool", kv(contract.AttrRemote, Bool(true)))), settleAt: later, final: true},
		{name: "remote not settled", spans: at(root(1), span(1, 2, 1, "tool", kv(contract.AttrRemote, Str("yes")))), kind: contract.ReasonRemoteSettling},
		{name: "invocation id repeated", spans: at(func() Span {
			r := root(0)
			r.Attributes = append(r.Attributes, kv(contract.AttrInvocationID, Str("q")))
			return r
		}()), kind: contract.ReasonMalformedAttribute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testCfg
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			now := epoch
			if !tt.settleAt.IsZero() {
				now = tt.settleAt
			}
			v := Evaluate(cfg, tt.spans, "p", now)
			if v.Final != tt.final {
				t.Fatalf("final=%v, want %v (reasons %v)", v.Final, tt.final, v.Reasons)
			}
			if tt.final && v.Totals.Input != tt.input {
				t.Fatalf("input %d, want %d", v.Totals.Input, tt.input)
			}
			if !tt.final {
				if _, ok := v.Reasons[tt.kind]; !ok {
					t.Fatalf("reasons %v lack %s", v.Reasons, tt.kind)
				}
			}
		})
	}
}

// TestFollowupInterrupted: v0.7's anomaly names the background span whose
// followup a span with reason interrupted discharges, in either order,
// once per name, and nothing for other reasons or targets.
func TestFollowupInterrupted(t *testing.T) {
	closer := func(sid uint64, reason string, links ...Link) Span {
		s := span(uint64(10+sid), sid, 0, contract.SpanNameFollowupClosed,
			kv(contract.AttrRole, Str(contract.RoleFollowupClosed)), kv(contract.AttrFollowupReason, Str(reason)))
		s.Links = links
		return s
	}
	const want = contract.AnomalyFollowupInterrupted + ":background shell"
	tests := []struct {
		name  string
		spans []Arrival
		want  []string
	}{
		{"interrupted", at(root(1), job(2, 1, Int(1)), closer(3, contract.ReasonInterrupted, link(1, 2, contract.LinkFollowup))), []string{want}},
		{"interrupted before the job", at(closer(3, contract.ReasonInterrupted, link(1, 2, contract.LinkFollowup)), root(1), job(2, 1, Int(1))), []string{want}},
		{"session_closed", at(root(1), job(2, 1, Int(1)), closer(3, contract.ReasonSessionClosed, link(1, 2, contract.LinkFollowup))), nil},
		{"two closers, two jobs of one name", at(root(2), job(2, 1, Int(2)), job(4, 1, Int(1)),
			closer(3, contract.ReasonInterrupted, link(1, 2, contract.LinkFollowup)),
			closer(5, contract.ReasonInterrupted, link(1, 2, contract.LinkFollowup), link(1, 4, contract.LinkFollowup))), []string{want}},
		{"the job never arrives", at(root(0), closer(3, contract.ReasonInterrupted, link(1, 2, contract.LinkFollowup))), nil},
		{"the target is not a job", at(root(1), chat(1, 2, 1, 7), closer(3, contract.ReasonInterrupted, link(1, 2, contract.LinkFollowup))), nil},
		{"the link names another trace", at(root(1), job(2, 1, Int(1)), closer(3, contract.ReasonInterrupted, link(9, 2, contract.LinkFollowup))), nil},
		{"a consumed link", at(root(1), job(2, 1, Int(0)), closer(3, contract.ReasonInterrupted, link(1, 2, contract.LinkConsumed))), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Evaluate(testCfg, tt.spans, "p", epoch)
			if !slices.Equal(v.Anomalies, tt.want) {
				t.Errorf("anomalies %q, want %q (reasons %v)", v.Anomalies, tt.want, v.Reasons)
			}
		})
	}
}

// TestUsageMismatch: v0.8's anomaly names each member carrying
// invocation.usage.mismatch = true, once per name; false names nothing,
// and a value that is not one bool is malformed and names nothing.
func TestUsageMismatch(t *testing.T) {
	flagged := func(s Span, vs ...Value) Span {
		for _, v := range vs {
			s.Attributes = append(s.Attributes, kv(contract.AttrUsageMismatch, v))
		}
		return s
	}
	const onRoot = contract.AnomalyUsageMismatch + ":invoke_agent a"
	const onCont = contract.AnomalyUsageMismatch + ":continue_agent a"
	tests := []struct {
		name      string
		spans     []Arrival
		want      []string
		final     bool
		malformed bool
	}{
		{"root", at(flagged(root(0), Bool(true))), []string{onRoot}, true, false},
		{"root, true twice", at(flagged(root(0), Bool(true), Bool(true))), []string{onRoot}, true, false},
		{"false", at(flagged(root(0), Bool(false))), nil, true, false},
		{"root and continuation", at(flagged(root(1), Bool(true)), job(2, 1, Int(1)),
			flagged(cont(3, 3, link(1, 2, contract.LinkFollowup)), Bool(true))), []string{onCont, onRoot}, true, false},
		{"two continuations of one name", at(root(1), job(2, 1, Int(2)),
			flagged(cont(3, 3, link(1, 2, contract.LinkFollowup)), Bool(true)),
			flagged(cont(4, 4, link(1, 2, contract.LinkFollowup)), Bool(true))), []string{onCont}, true, false},
		{"a duplicate adds nothing", at(root(0), flagged(root(0), Bool(true))), nil, true, false},
		{"string", at(flagged(root(0), Str("true"))), nil, false, true},
		{"true then false", at(flagged(root(0), Bool(true), Bool(false))), nil, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := Evaluate(testCfg, tt.spans, "p", epoch)
			if !slices.Equal(v.Anomalies, tt.want) {
				t.Errorf("anomalies %q, want %q (reasons %v)", v.Anomalies, tt.want, v.Reasons)
			}
			if v.Final != tt.final {
				t.Errorf("final %v, want %v (reasons %v)", v.Final, tt.final, v.Reasons)
			}
			if _, got := v.Reasons[contract.ReasonMalformedAttribute]; got != tt.malformed {
				t.Errorf("malformed_attribute %v, want %v (reasons %v)", got, tt.malformed, v.Reasons)
			}
		})
	}
}
