package ledgerrule

import (
	"slices"
	"testing"

	"github.com/agentledger/agentledger/contract"
)

// TestDeclarationNeverFinal: an unrecorded-span declaration (role
// unrecorded) makes its invocation not_sampled:<its name> whatever its
// count reads: 1 as the instrumentation writes it, 0, or absent (a
// processor on the way removed it); a span without the role and with a
// count of 0 does not.
func TestDeclarationNeverFinal(t *testing.T) {
	cfg := &GraphConfig{MaxSpans: 100}
	rc := testConfig()
	for _, tc := range []struct {
		name  string
		attrs []kv
		taint bool
	}{
		{"count 1", []kv{{contract.AttrRole, StringValue(contract.RoleUnrecorded)}, {contract.AttrUnrecorded, IntValue(1)}}, true},
		{"count 0", []kv{{contract.AttrRole, StringValue(contract.RoleUnrecorded)}, {contract.AttrUnrecorded, IntValue(0)}}, true},
		{"no count", []kv{{contract.AttrRole, StringValue(contract.RoleUnrecorded)}}, true},
		{"no role, count 0", []kv{{contract.AttrUnrecorded, IntValue(0)}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attrs := append([]kv{{contract.AttrInvocationID, StringValue("inv")}, {contract.AttrChildren, IntValue(0)}}, tc.attrs...)
			f := read(t, rc, attrs...)
			var g Graph
			g.Init(1)
			root := Span{Name: "invoke_agent a", Trace: TraceID{1}, ID: SpanID{1},
				Facts: read(t, rc, kv{contract.AttrInvocationID, StringValue("inv")}, kv{contract.AttrRole, StringValue(contract.RoleRoot)}, kv{contract.AttrChildren, IntValue(0)})}
			g.Arrive(&root, 1, cfg)
			decl := Span{Name: "chat late", Trace: TraceID{2}, ID: SpanID{2}, Facts: f}
			g.Arrive(&decl, 2, cfg)
			o := g.Obligations(3, 0, cfg)
			want := contract.ReasonNotSampled + ":chat late"
			if got := slices.Contains(g.Reasons(3, cfg), want); got != tc.taint || o.Tainted != tc.taint {
				t.Fatalf("reasons %v, tainted %v; want %s: %v", g.Reasons(3, cfg), o.Tainted, want, tc.taint)
			}
		})
	}
}
