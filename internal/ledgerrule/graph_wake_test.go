package ledgerrule

import (
	"slices"
	"testing"

	"github.com/agentledger/agentledger/contract"
)

func wakeTestConfig() *GraphConfig { return &GraphConfig{MaxSpans: 100, Settle: 10} }

// TestWakeOwesItsTurn: a wake span whose turn has not arrived is an open
// obligation, running_turn:<wake name>, until the turn's span arrives;
// the invocation cannot close before, and the state keeps it.
func TestWakeOwesItsTurn(t *testing.T) {
	cfg := wakeTestConfig()
	var g Graph
	g.Init(1)
	tr := TraceID{1}
	root := Span{Name: "invoke_agent a", Trace: tr, ID: SpanID{1}, Facts: Facts{Member: true, Role: RoleRoot, Children: Count{CountValid, 0}}}
	g.Arrive(&root, 2, cfg)
	if o := g.Obligations(3, 0, cfg); !o.Closable() {
		t.Fatalf("root alone: %+v", o)
	}
	// A wake of a turn (a continuation, trace 2) that has not ended.
	wake := Span{Name: "wake_agent a", Trace: TraceID{2}, ID: SpanID{3}, Parent: SpanID{2}, Facts: Facts{Member: true, Role: RoleWake}}
	g.Arrive(&wake, 4, cfg)
	if o := g.Obligations(5, 0, cfg); o.Closable() {
		t.Fatalf("closable while the woken turn runs: %+v", o)
	}
	want := contract.ReasonRunningTurn + ":wake_agent a"
	if r := g.Reasons(5, cfg); !slices.Contains(r, want) {
		t.Errorf("reasons %v, want %s", r, want)
	}
	if owed := g.Owes(5, cfg); len(owed) != 1 || owed[0].Reason() != want {
		t.Errorf("Owes = %+v, want %s", owed, want)
	}
	// The state keeps the pending wake.
	var back Graph
	if _, err := back.DecodeState(g.AppendState(nil)); err != nil {
		t.Fatal(err)
	}
	if r := back.Reasons(5, cfg); !slices.Contains(r, want) {
		t.Errorf("decoded reasons %v, want %s", r, want)
	}
	cont := Span{Name: "continue_agent a", Trace: TraceID{2}, ID: SpanID{2}, Facts: Facts{Member: true, Role: RoleContinuation, Children: Count{CountValid, 1}}}
	for _, h := range []*Graph{&g, &back} {
		h.Arrive(&cont, 6, cfg)
		if o := h.Obligations(7, 0, cfg); !o.Closable() || len(h.Owes(7, cfg)) != 0 {
			t.Errorf("after the turn arrived: %+v, owes %+v", o, h.Owes(7, cfg))
		}
	}
}

// TestWakeAfterItsTurn: a wake delivered after its turn owes nothing.
func TestWakeAfterItsTurn(t *testing.T) {
	cfg := wakeTestConfig()
	var g Graph
	g.Init(1)
	root := Span{Name: "invoke_agent a", Trace: TraceID{1}, ID: SpanID{1}, Facts: Facts{Member: true, Role: RoleRoot, Children: Count{CountValid, 1}}}
	wake := Span{Name: "wake_agent a", Trace: TraceID{1}, ID: SpanID{3}, Parent: SpanID{1}, Facts: Facts{Member: true, Role: RoleWake}}
	g.Arrive(&root, 2, cfg)
	g.Arrive(&wake, 3, cfg)
	if o := g.Obligations(4, 0, cfg); !o.Closable() || len(g.Owes(4, cfg)) != 0 {
		t.Errorf("%+v owes %+v", o, g.Owes(4, cfg))
	}
}

// TestWakeTurnFromAnotherTraceIsNotTheTurn: a span with the turn's span
// ID in another trace does not end the running turn quietly: the
// invocation is never final (malformed_parentage).
func TestWakeTurnFromAnotherTraceIsNotTheTurn(t *testing.T) {
	cfg := wakeTestConfig()
	var g Graph
	g.Init(1)
	root := Span{Name: "invoke_agent a", Trace: TraceID{1}, ID: SpanID{1}, Facts: Facts{Member: true, Role: RoleRoot, Children: Count{CountValid, 0}}}
	wake := Span{Name: "wake_agent a", Trace: TraceID{2}, ID: SpanID{3}, Parent: SpanID{2}, Facts: Facts{Member: true, Role: RoleWake}}
	forged := Span{Name: "continue_agent a", Trace: TraceID{9}, ID: SpanID{2}, Facts: Facts{Member: true, Role: RoleContinuation, Children: Count{CountValid, 1}}}
	for i, s := range []*Span{&root, &wake, &forged} {
		g.Arrive(s, int64(2+i), cfg)
	}
	if o := g.Obligations(10, 0, cfg); o.Status() == contract.StatusFinal {
		t.Errorf("final with the turn forged in another trace: %+v, reasons %v", o, g.Reasons(10, cfg))
	}
}
