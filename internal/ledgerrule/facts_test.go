package ledgerrule

import (
	"slices"
	"testing"

	"github.com/agentledger/agentledger/contract"
)

type kv struct {
	key string
	v   Value
}

func read(t testing.TB, cfg *Config, attrs ...kv) Facts {
	t.Helper()
	var r SpanReader
	for _, a := range attrs {
		if k, ok := Lookup(a.key); ok {
			r.Attr(k, a.v)
		}
	}
	var f Facts
	r.Read(cfg, &f)
	return f
}

func testConfig() *Config { return NewConfig(contract.DefaultUsageOperations, 1000) }

func TestLookupKnowsEveryKey(t *testing.T) {
	for k := Key(0); k < numKeys; k++ {
		got, ok := Lookup(k.String())
		if !ok || got != k {
			t.Errorf("Lookup(%q) = %v, %v", k.String(), got, ok)
		}
	}
	for _, name := range []string{"", "gen_ai.request.model", "invocation.tenant", "invocation.children.x"} {
		if _, ok := Lookup(name); ok {
			t.Errorf("Lookup(%q) knows it", name)
		}
	}
}

func TestReadWellFormed(t *testing.T) {
	f := read(t, testConfig(),
		kv{contract.AttrInvocationID, StringValue("inv")},
		kv{contract.AttrRole, StringValue(contract.RoleBackground)},
		kv{contract.AttrChildren, IntValue(2)},
		kv{contract.AttrFollowups, IntValue(1)},
		kv{contract.AttrRemote, BoolValue(false)},
		kv{contract.AttrLateChild, BoolValue(true)},
		kv{contract.AttrOperationName, StringValue(contract.OpChat)},
		kv{contract.AttrUsageInputTokens, IntValue(100)},
		kv{contract.AttrUsageOutputTokens, IntValue(5)},
	)
	if f.Malformed != 0 {
		t.Fatalf("Malformed = %b", f.Malformed)
	}
	if !f.Member || f.InvocationID != "inv" || f.Role != RoleBackground {
		t.Errorf("id/role: %+v", f)
	}
	if f.Children != (Count{CountValid, 2}) || f.Followups != (Count{CountValid, 1}) {
		t.Errorf("counts: %+v %+v", f.Children, f.Followups)
	}
	if f.Remote || !f.LateChild || !f.ModelCall || f.Usage[UsageInput] != 100 || f.Usage[UsageOutput] != 5 {
		t.Errorf("flags/usage: %+v", f)
	}
}

// The findings of issue 19: a repeated key with different values, and a
// rule attribute of the wrong type, are malformed, never absent.
func TestReadMalformed(t *testing.T) {
	cfg := testConfig()
	for _, tc := range []struct {
		name  string
		attrs []kv
		key   Key
		check func(Facts) bool
	}{
		{"children repeated 2 then 1", []kv{{contract.AttrChildren, IntValue(2)}, {contract.AttrChildren, IntValue(1)}},
			KeyChildren, func(f Facts) bool { return f.Children.State == CountInvalid }},
		{"role as array", []kv{{contract.AttrRole, OtherValue(KindSlice)}, {contract.AttrFollowups, IntValue(1)}},
			KeyRole, func(f Facts) bool { return f.Followups == Count{CountValid, 1} }},
		{"remote as string", []kv{{contract.AttrRemote, StringValue("false")}},
			KeyRemote, func(f Facts) bool { return f.Remote }},
		{"late_child repeated", []kv{{contract.AttrLateChild, BoolValue(false)}, {contract.AttrLateChild, BoolValue(true)}},
			KeyLateChild, func(f Facts) bool { return f.LateChild }},
		{"followups as double", []kv{{contract.AttrFollowups, DoubleValue(1)}},
			KeyFollowups, func(f Facts) bool { return f.Followups.State == CountInvalid }},
		{"id repeated", []kv{{contract.AttrInvocationID, StringValue("a")}, {contract.AttrInvocationID, StringValue("b")}},
			KeyInvocationID, func(f Facts) bool { return f.Member && f.InvocationID == "a" }},
		{"operation as int", []kv{{contract.AttrOperationName, IntValue(1)}},
			KeyOperation, func(f Facts) bool { return !f.ModelCall }},
		{"usage repeated 100 then 5", []kv{{contract.AttrOperationName, StringValue("chat")},
			{contract.AttrUsageInputTokens, IntValue(100)}, {contract.AttrUsageInputTokens, IntValue(5)}},
			KeyUsageInput, func(f Facts) bool { return f.Usage[UsageInput] == 100 }},
		{"unattributed as bool", []kv{{contract.AttrUnattributed, BoolValue(true)}},
			KeyUnattributed, func(f Facts) bool { return f.Unattributed }},
		{"followup reason as int", []kv{{contract.AttrFollowupReason, IntValue(0)}},
			KeyFollowupReason, func(Facts) bool { return true }},
		{"unrecorded as string", []kv{{contract.AttrUnrecorded, StringValue("1")}},
			KeyUnrecorded, func(f Facts) bool { return f.Unrecorded.State == CountInvalid }},
		{"detached repeated", []kv{{contract.AttrDetached, IntValue(1)}, {contract.AttrDetached, IntValue(0)}},
			KeyDetached, func(f Facts) bool { return f.Detached.State == CountInvalid }},
		{"usage mismatch as string", []kv{{contract.AttrUsageMismatch, StringValue("true")}},
			KeyUsageMismatch, func(f Facts) bool { return !f.UsageMismatch }},
		{"usage mismatch repeated true then false", []kv{{contract.AttrUsageMismatch, BoolValue(true)}, {contract.AttrUsageMismatch, BoolValue(false)}},
			KeyUsageMismatch, func(f Facts) bool { return !f.UsageMismatch }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := read(t, cfg, tc.attrs...)
			if f.Malformed != 1<<tc.key {
				t.Errorf("Malformed = %b, want only %s", f.Malformed, tc.key)
			}
			if !tc.check(f) {
				t.Errorf("conservative reading not applied: %+v", f)
			}
			reasons := MalformedReasons(nil, f.Malformed, "span x")
			want := "malformed_attribute:" + tc.key.String() + " on span x"
			if !slices.Equal(reasons, []string{want}) {
				t.Errorf("reasons = %q, want %q", reasons, want)
			}
		})
	}
}

// TestReadFollowupReason: the reasons with a rule of their own
// (abandoned, v0.5; interrupted, v0.7) are told apart, and a malformed
// reason is neither.
func TestReadFollowupReason(t *testing.T) {
	cfg := testConfig()
	for _, tc := range []struct {
		name                   string
		attrs                  []kv
		abandoned, interrupted bool
	}{
		{"abandoned", []kv{{contract.AttrFollowupReason, StringValue(contract.ReasonAbandoned)}}, true, false},
		{"interrupted", []kv{{contract.AttrFollowupReason, StringValue(contract.ReasonInterrupted)}}, false, true},
		{"interrupted twice", []kv{{contract.AttrFollowupReason, StringValue(contract.ReasonInterrupted)},
			{contract.AttrFollowupReason, StringValue(contract.ReasonInterrupted)}}, false, true},
		{"session_closed", []kv{{contract.AttrFollowupReason, StringValue(contract.ReasonSessionClosed)}}, false, false},
		{"interrupted then cancelled", []kv{{contract.AttrFollowupReason, StringValue(contract.ReasonInterrupted)},
			{contract.AttrFollowupReason, StringValue(contract.ReasonCancelled)}}, false, false},
		{"absent", nil, false, false},
	} {
		f := read(t, cfg, tc.attrs...)
		if f.Abandoned != tc.abandoned || f.Interrupted != tc.interrupted {
			t.Errorf("%s: Abandoned %v Interrupted %v, want %v %v", tc.name, f.Abandoned, f.Interrupted, tc.abandoned, tc.interrupted)
		}
	}
}

// TestReadUsageMismatch: invocation.usage.mismatch (v0.8) is a bool
// read as other rule attributes are: true (once or repeated) flags the
// span, false or absent does not, and a value that is not one bool is
// malformed and flags nothing.
func TestReadUsageMismatch(t *testing.T) {
	cfg := testConfig()
	for _, tc := range []struct {
		name      string
		attrs     []kv
		mismatch  bool
		malformed bool
	}{
		{"true", []kv{{contract.AttrUsageMismatch, BoolValue(true)}}, true, false},
		{"true twice", []kv{{contract.AttrUsageMismatch, BoolValue(true)}, {contract.AttrUsageMismatch, BoolValue(true)}}, true, false},
		{"false", []kv{{contract.AttrUsageMismatch, BoolValue(false)}}, false, false},
		{"absent", nil, false, false},
		{"int 1", []kv{{contract.AttrUsageMismatch, IntValue(1)}}, false, true},
		{"false then true", []kv{{contract.AttrUsageMismatch, BoolValue(false)}, {contract.AttrUsageMismatch, BoolValue(true)}}, false, true},
	} {
		f := read(t, cfg, tc.attrs...)
		if f.UsageMismatch != tc.mismatch || (f.Malformed == 1<<KeyUsageMismatch) != tc.malformed {
			t.Errorf("%s: UsageMismatch %v Malformed %b, want %v malformed %v", tc.name, f.UsageMismatch, f.Malformed, tc.mismatch, tc.malformed)
		}
	}
}

func TestReadRepeatSameValue(t *testing.T) {
	f := read(t, testConfig(),
		kv{contract.AttrChildren, IntValue(2)}, kv{contract.AttrChildren, IntValue(2)},
		kv{contract.AttrRole, StringValue("root")}, kv{contract.AttrRole, StringValue("root")})
	if f.Malformed != 0 || f.Children != (Count{CountValid, 2}) || f.Role != RoleRoot {
		t.Errorf("repeat of an equal value: %+v", f)
	}
	// Same number, different type: differs.
	f = read(t, testConfig(), kv{contract.AttrChildren, IntValue(1)}, kv{contract.AttrChildren, BoolValue(true)})
	if f.Malformed != 1<<KeyChildren {
		t.Errorf("int then bool: Malformed = %b", f.Malformed)
	}
}

func TestReadUsage(t *testing.T) {
	cfg := testConfig()
	// Not a model call: usage is not read, not even malformed.
	f := read(t, cfg, kv{contract.AttrUsageInputTokens, StringValue("x")}, kv{contract.AttrUsageInputTokens, IntValue(1)})
	if f.Malformed != 0 || f.UsagePresent != 0 {
		t.Errorf("usage read on a non-model call: %+v", f)
	}
	// The wrong type is invalid_usage, not malformed.
	f = read(t, cfg, kv{contract.AttrOperationName, StringValue("chat")}, kv{contract.AttrUsageInputTokens, StringValue("7")},
		kv{contract.AttrUsageOutputTokens, IntValue(-1)})
	if f.Malformed != 0 || f.UsageInvalid != 1<<UsageInput|1<<UsageOutput || !f.HasUsage() {
		t.Errorf("invalid usage: %+v", f)
	}
	// Missing usage.
	f = read(t, cfg, kv{contract.AttrOperationName, StringValue("embeddings")}, kv{contract.AttrUsageCacheReadTokens, IntValue(3)})
	if !f.MissingUsage(false) || f.MissingUsage(true) {
		t.Errorf("missing usage: %+v", f)
	}
}

func TestReadCounts(t *testing.T) {
	cfg := NewConfig(nil, 10)
	for _, tc := range []struct {
		v    Value
		want Count
	}{
		{IntValue(0), Count{CountValid, 0}},
		{IntValue(10), Count{CountValid, 10}},
		{IntValue(11), Count{CountInvalid, 0}},
		{IntValue(-1), Count{CountInvalid, 0}},
	} {
		if got := read(t, cfg, kv{contract.AttrChildren, tc.v}).Children; got != tc.want {
			t.Errorf("children %v: %+v, want %+v", tc.v, got, tc.want)
		}
	}
	f := read(t, cfg, kv{contract.AttrRole, StringValue("background")})
	if f.Followups.State != CountInvalid {
		t.Errorf("background without followups: %+v", f.Followups)
	}
}

func TestLinkReader(t *testing.T) {
	for _, tc := range []struct {
		vals      []Value
		kind      LinkKind
		malformed bool
	}{
		{nil, LinkNone, false},
		{[]Value{StringValue("followup")}, LinkFollowup, false},
		{[]Value{StringValue("followup"), StringValue("followup")}, LinkFollowup, false},
		{[]Value{StringValue("followup"), StringValue("consumed")}, LinkNone, true},
		{[]Value{OtherValue(KindSlice)}, LinkNone, true},
		{[]Value{StringValue("detached_from")}, LinkDetachedFrom, false},
		{[]Value{StringValue("launched_by")}, LinkLaunchedBy, false},
		{[]Value{StringValue("consumed")}, LinkConsumed, false},
		{[]Value{StringValue("other")}, LinkNone, false},
	} {
		var r LinkReader
		for _, v := range tc.vals {
			r.Attr(v)
		}
		kind, bad := r.Kind()
		if kind != tc.kind || bad != tc.malformed {
			t.Errorf("%v: %v %v, want %v %v", tc.vals, kind, bad, tc.kind, tc.malformed)
		}
	}
}

func TestObligationsStatus(t *testing.T) {
	final := Obligations{RootArrived: true}
	if final.Status() != contract.StatusFinal {
		t.Fatal("met obligations are not final")
	}
	for name, o := range map[string]Obligations{
		"no root":    {},
		"open":       {RootArrived: true, Open: 1},
		"unprovable": {RootArrived: true, Unprovable: true},
		"settling":   {RootArrived: true, Settling: true},
		"tainted":    {RootArrived: true, Tainted: true},
	} {
		if o.Status() != contract.StatusIncomplete {
			t.Errorf("%s: %s", name, o.Status())
		}
	}
	if (Obligations{RootArrived: true, Tainted: true}).Closable() != true {
		t.Error("a tainted invocation whose obligations are met is not closable")
	}
}
