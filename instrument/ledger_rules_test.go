package instrument

import (
	"fmt"
	"github.com/agentledger/agentledger/internal/ledgerrule"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// Tests of the v0.2 rules (CONTRACT.md, "Rules that close every path to a
// wrong final") on the in-process Ledger. Each tries to meet a count
// without the counted work and checks the ledger is never final then.

// TestRuleLateChildNeverDischarges (rule 1): root (children=1), tool T
// (children=1), an uncounted late child of T, and T's counted child (1000
// input tokens) withheld: in no arrival order is the invocation final
// before the counted child arrives, and it then has all 1000 tokens.
func TestRuleLateChildNeverDischarges(t *testing.T) {
	root, tool, late, counted := spanCtx(1, 1), spanCtx(1, 2), spanCtx(1, 3), spanCtx(1, 4)
	spans := []tracetest.SpanStub{
		rootStub(root, 1),
		toolStub(tool, root, 1),
		stub("late work", late, tool, 60, attribute.Bool(contract.AttrLateChild, true), attribute.Int(contract.AttrChildren, 0)),
	}
	permutations(len(spans), func(order []int) {
		sl := newStubLedger(t)
		for _, i := range order {
			sl.feed(spans[i])
			if s := sl.summary("inv"); s.Status != contract.StatusPending {
				t.Fatalf("order %v: %s with the counted child withheld (reasons %v)", order, s.Status, s.Reasons)
			}
		}
		s := sl.summary("inv")
		if !slices.Contains(s.Reasons, "missing_children:execute_tool shell") {
			t.Errorf("order %v: reasons %v", order, s.Reasons)
		}
		sl.feed(chatStub(counted, tool, 1000, 1))
		s = sl.summary("inv")
		wantStatus(t, s, contract.StatusFinal)
		if s.Usage.InputTokens != 1000 || !slices.Contains(s.Anomalies, "extra_children:execute_tool shell") {
			t.Errorf("order %v: summary %+v", order, s)
		}
	})
}

// TestRuleLateChildOfRemoteParent: under a remote parent a late child is
// not an anomaly (children may come from elsewhere), and still discharges
// nothing.
func TestRuleLateChildOfRemoteParent(t *testing.T) {
	root, tool, late := spanCtx(1, 1), spanCtx(1, 2), spanCtx(1, 3)
	sl := newStubLedger(t)
	rt := toolStub(tool, root, 1)
	rt.Attributes = append(rt.Attributes, attribute.Bool(contract.AttrRemote, true))
	sl.feed(stub("late work", late, tool, 60, attribute.Bool(contract.AttrLateChild, true)), rt, rootStub(root, 1))
	s := sl.summary("inv")
	wantStatus(t, s, contract.StatusPending, "missing_children:execute_tool shell")
	if len(s.Anomalies) != 0 {
		t.Errorf("anomalies %v", s.Anomalies)
	}
}

// TestRuleOneDischargePerSpan (rule 2): a continuation that names the
// same job twice discharges one of the job's two followups, whatever the
// order; a duplicate span discharges nothing.
func TestRuleOneDischargePerSpan(t *testing.T) {
	root, job, cont1, cont2 := spanCtx(1, 1), spanCtx(1, 2), spanCtx(2, 3), spanCtx(3, 4)
	twice := contStub(cont1, 0, linkTo(job, contract.LinkFollowup), linkTo(job, contract.LinkFollowup))
	spans := []tracetest.SpanStub{rootStub(root, 1), jobStub(job, root, 2), twice, twice}
	permutations(len(spans), func(order []int) {
		sl := newStubLedger(t)
		for _, i := range order {
			sl.feed(spans[i])
		}
		s := sl.summary("inv")
		wantStatus(t, s, contract.StatusPending, "open_followup:background shell")
		if !slices.Contains(s.Anomalies, contract.AnomalyDuplicateLink+":continue_agent a") {
			t.Errorf("order %v: anomalies %v", order, s.Anomalies)
		}
		second := contStub(cont2, 0, linkTo(job, contract.LinkFollowup))
		second.Name = "continue_agent b"
		sl.feed(second)
		wantStatus(t, sl.summary("inv"), contract.StatusFinal)
	})
}

// TestRuleMalformedInputFailsClosed (rule 3): each input makes a count
// look met without the counted span (the last span of each case is the
// malformed one); in every arrival order the ledger is never final once
// the malformed span arrived, and the reason names it.
func TestRuleMalformedInputFailsClosed(t *testing.T) {
	root := spanCtx(1, 1)
	selfRoot := rootStub(root, 1)
	selfRoot.Parent = root
	cycleRoot := rootStub(root, 1)
	cycleRoot.Parent = spanCtx(1, 2)
	cases := []struct {
		name   string
		spans  []tracetest.SpanStub
		reason []string
	}{{
		// A root that is its own parent counts itself as its one child.
		name:   "self parent",
		spans:  []tracetest.SpanStub{selfRoot},
		reason: []string{"malformed_parentage:invoke_agent a"},
	}, {
		// The root's count is met by a child whose parent id names the
		// root's span id in another trace.
		name: "parent in another trace",
		spans: []tracetest.SpanStub{rootStub(root, 1),
			chatStub(spanCtx(2, 3), trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{2}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled}), 1, 1)},
		reason: []string{"malformed_parentage:chat m"},
	}, {
		// The root and a tool are each other's parent and meet each
		// other's count.
		name:   "cycle",
		spans:  []tracetest.SpanStub{toolStub(spanCtx(1, 2), root, 1), cycleRoot},
		reason: []string{"malformed_parentage:execute_tool shell", "malformed_parentage:invoke_agent a"},
	}, {
		// A job that follows itself up.
		name: "self followup link",
		spans: []tracetest.SpanStub{rootStub(root, 1),
			withLinks(jobStub(spanCtx(1, 2), root, 1), linkTo(spanCtx(1, 2), contract.LinkFollowup))},
		reason: []string{"malformed_link:background shell"},
	}, {
		// A continuation that both follows up and consumes the job.
		name: "followup and consumed",
		spans: []tracetest.SpanStub{rootStub(root, 1), jobStub(spanCtx(1, 2), root, 1),
			contStub(spanCtx(2, 3), 0, linkTo(spanCtx(1, 2), contract.LinkFollowup), linkTo(spanCtx(1, 2), contract.LinkConsumed))},
		reason: []string{"malformed_link:continue_agent a"},
	}, {
		// A model call of another trace reuses the counted call's span id:
		// keyed by span id alone, one of the two calls' usage would be
		// dropped as a duplicate. The reason names the later arrival.
		name: "span id reused",
		spans: []tracetest.SpanStub{rootStub(root, 1), chatStub(spanCtx(1, 2), root, 1000, 1),
			renamed(chatStub(spanCtx(3, 2), trace.SpanContext{}, 5, 1), "chat reuser")},
		reason: []string{"span_id_reused:*"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			malformed := len(tc.spans) - 1
			permutations(len(tc.spans), func(order []int) {
				sl := newStubLedger(t)
				seen, closedBefore := false, false
				for _, i := range order {
					closedBefore = closedBefore || (!seen && sl.known() && sl.summary("inv").Status != contract.StatusPending)
					seen = seen || i == malformed
					sl.feed(tc.spans[i])
					if s := sl.summary("inv"); seen && !closedBefore && s.Status == contract.StatusFinal {
						t.Fatalf("order %v: final after %s", order, tc.spans[i].Name)
					}
				}
				if closedBefore {
					return // closed before the malformed span arrived: a late span
				}
				s := sl.summary("inv")
				for _, r := range tc.reason {
					if !slices.ContainsFunc(s.Reasons, func(got string) bool {
						prefix, wild := strings.CutSuffix(r, "*")
						return got == r || wild && strings.HasPrefix(got, prefix)
					}) {
						t.Fatalf("order %v: status %s reasons %v, want %v among them", order, s.Status, s.Reasons, tc.reason)
					}
				}
			})
		})
	}
}

// TestRuleMissingUsage (rule 5): a model call that did not fail and
// carries no usage makes the invocation incomplete; a failed call without
// usage is not missing usage; one usage attribute is enough.
func TestRuleMissingUsage(t *testing.T) {
	root, call := spanCtx(1, 1), spanCtx(1, 2)
	noUsage := stub("chat m", call, root, 40, attribute.String(contract.AttrOperationName, contract.OpChat), attribute.Int(contract.AttrChildren, 0))
	outOnly := stub("chat m", call, root, 40, attribute.String(contract.AttrOperationName, contract.OpChat),
		attribute.Int(contract.AttrChildren, 0), attribute.Int64(contract.AttrUsageOutputTokens, 3))
	for _, tc := range []struct {
		name    string
		call    tracetest.SpanStub
		status  Status
		reasons []string
	}{
		{"unset status", noUsage, contract.StatusIncomplete, []string{"usage_missing:chat m"}},
		{"ok status", withStatus(noUsage, codes.Ok), contract.StatusIncomplete, []string{"usage_missing:chat m"}},
		{"error status", withStatus(noUsage, codes.Error), contract.StatusFinal, nil},
		{"output only", outOnly, contract.StatusFinal, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, rootFirst := range []bool{true, false} {
				sl := newStubLedger(t)
				if rootFirst {
					sl.feed(rootStub(root, 1), tc.call)
				} else {
					sl.feed(tc.call, rootStub(root, 1))
				}
				s := sl.summary("inv")
				if s.Status != tc.status || !slices.Equal(s.Reasons, tc.reasons) {
					t.Errorf("root first %v: %s %v, want %s %v", rootFirst, s.Status, s.Reasons, tc.status, tc.reasons)
				}
			}
		})
	}
}

// TestRuleInvalidCounts: a count that cannot be proven never lets the
// invocation be final (CONTRACT.md, v0.1 clarifications): it stays
// pending, saying why, and closes incomplete at its open timeout, as in
// the collector (one rule, internal/ledgerrule).
func TestRuleInvalidCounts(t *testing.T) {
	root := spanCtx(1, 1)
	noFollowups := stub("background shell", spanCtx(1, 2), root, 150,
		attribute.String(contract.AttrRole, contract.RoleBackground), attribute.Int(contract.AttrChildren, 0))
	badChildren := stub("execute_tool shell", spanCtx(1, 2), root, 50, attribute.String(contract.AttrChildren, "1"))
	for _, tc := range []struct {
		span    tracetest.SpanStub
		reasons []string
	}{
		{noFollowups, []string{"invalid_count:background shell"}},
		{withAttr(jobStub(spanCtx(1, 2), root, 0), attribute.Int(contract.AttrFollowups, -1)), []string{"invalid_count:background shell"}},
		// A string where an int belongs is also malformed (v0.6 rule 1).
		{badChildren, []string{"invalid_count:execute_tool shell", "malformed_attribute:invocation.children on execute_tool shell"}},
	} {
		sl := newStubLedger(t)
		sl.feed(rootStub(root, 1), tc.span)
		wantStatus(t, sl.summary("inv"), contract.StatusPending, tc.reasons...)
		sl.clock.Advance(DefaultOpenTimeout)
		wantStatus(t, sl.summary("inv"), contract.StatusIncomplete, append([]string{contract.ReasonOpenTimeout}, tc.reasons...)...)
	}
}

func renamed(s tracetest.SpanStub, name string) tracetest.SpanStub {
	s.Name = name
	return s
}

func withLinks(s tracetest.SpanStub, links ...sdktrace.Link) tracetest.SpanStub {
	s.Links = append(s.Links, links...)
	return s
}

// withAttr replaces or adds an attribute.
func withAttr(s tracetest.SpanStub, kv attribute.KeyValue) tracetest.SpanStub {
	attrs := slices.Clone(s.Attributes)
	for i := range attrs {
		if attrs[i].Key == kv.Key {
			attrs[i] = kv
			s.Attributes = attrs
			return s
		}
	}
	s.Attributes = append(attrs, kv)
	return s
}

// TestSecondRootIsAnAnomaly: a second root span (another span ID) of one
// invocation is a member, reported extra_root as the collector does.
func TestSecondRootIsAnAnomaly(t *testing.T) {
	sl := newStubLedger(t)
	second := rootStub(spanCtx(2, 9), 0)
	second.Name = "invoke_agent b"
	sl.feed(rootStub(spanCtx(1, 1), 0), second)
	s := sl.summary("inv")
	if !slices.Contains(s.Anomalies, "extra_root:invoke_agent b") || s.Usage.Spans != 2 {
		t.Errorf("summary %+v", s)
	}
}

// TestAnomaliesAndFailuresBounded: distinct anomaly and failure entries
// per invocation are bounded as in the collector, and a cut list says so
// (anomalies_cut, reasons_cut); the invocation stays unprovable.
func TestAnomaliesAndFailuresBounded(t *testing.T) {
	sl := newStubLedger(t)
	root := spanCtx(1, 1)
	sl.feed(rootStub(root, 0))
	for i := range 200 {
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1}, SpanID: trace.SpanID{2, byte(i)}, TraceFlags: trace.FlagsSampled})
		// Late (after the final), without usage: a late_span anomaly and
		// a usage_missing reason each.
		call := stub(fmt.Sprintf("chat %d", i), sc, root, 40, attribute.String(contract.AttrOperationName, contract.OpChat))
		sl.feed(call)
	}
	s := sl.summary("inv")
	if len(s.Anomalies) > ledgerrule.MaxAnomalies+1 || len(s.Reasons) > ledgerrule.MaxAnomalies+2 || s.Status == contract.StatusFinal {
		t.Errorf("%d anomalies, %d reasons, status %s", len(s.Anomalies), len(s.Reasons), s.Status)
	}
	if !slices.Contains(s.Anomalies, contract.AnomalyAnomaliesCut) || !slices.Contains(s.Reasons, contract.ReasonReasonsCut) {
		t.Errorf("cut lists do not say so: %v, %v", s.Anomalies, s.Reasons)
	}
}

// TestRuleLateChildMistyped (rule 1): a late_child flag that is not a
// boolean reads as true: the child never discharges its parent's count;
// and it is malformed (v0.6 rule 1).
func TestRuleLateChildMistyped(t *testing.T) {
	root, tool := spanCtx(1, 1), spanCtx(1, 2)
	sl := newStubLedger(t)
	sl.feed(rootStub(root, 1), toolStub(tool, root, 1),
		stub("late work", spanCtx(1, 3), tool, 60, attribute.String(contract.AttrLateChild, "yes"), attribute.Int(contract.AttrChildren, 0)))
	wantStatus(t, sl.summary("inv"), contract.StatusPending,
		"missing_children:execute_tool shell", "malformed_attribute:invocation.late_child on late work")
}
