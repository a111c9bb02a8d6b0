package otelcodex

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/genaitest"
)

// TestExecTurnEndAfterExport: the turn.completed line Exec passes on is
// handled after the turn's root was exported (the exporter's own schedule
// is an hour away), and names the turn's invocation (turn_id); the SDK
// reads the rest of the event as before.
func TestExecTurnEndAfterExport(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	bsp := sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithBatchTimeout(time.Hour))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(instrument.NewSpanProcessor(bsp)))
	defer tp.Shutdown(context.Background())
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(self, WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	x := &Process{c: c, mode: modeExec, m: newMapper(c.tracer, c.tracker, c.cfg.agent, "", c.cfg.turnSync)}
	const turn, thread = "019b0000-aaaa-7bbb-8ccc-000000000001", "019b0000-aaaa-7bbb-8ccc-0000000000ff"
	h := http.Header{}
	h.Set(headerTurnMetadata, `{"turn_id":"`+turn+`","thread_id":"`+thread+`"}`)
	x.startRoot(h)
	in := []byte(`{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":0,"output_tokens":3}}` + "\n")
	edit := x.line(in)
	var roots []string
	for _, s := range exp.GetSpans() {
		for _, a := range s.Attributes {
			if a.Key == contract.AttrInvocationID && s.Name == "invoke_agent "+DefaultAgent {
				roots = append(roots, a.Value.AsString())
			}
		}
	}
	if len(roots) != 1 {
		t.Fatalf("roots exported when the line was handled: %q, want the turn's", roots)
	}
	if edit == nil {
		t.Fatal("no edit for turn.completed")
	}
	out := edit(in)
	var ev struct {
		Type   string         `json:"type"`
		TurnID string         `json:"turn_id"`
		Usage  map[string]int `json:"usage"`
	}
	if err := json.Unmarshal(out, &ev); err != nil || out[len(out)-1] != '\n' {
		t.Fatalf("edited %q: %v", out, err)
	}
	if ev.Type != "turn.completed" || ev.TurnID != roots[0] || ev.TurnID != turn || ev.Usage["output_tokens"] != 3 {
		t.Fatalf("edited %q: want turn_id %s and the event unchanged", out, roots[0])
	}
	if x.line([]byte(`{"type":"item.completed","item":{"type":"agent_message","text":"hi"}}`)) != nil {
		t.Fatal("an edit for an event that ends no turn")
	}
}

func TestWithTurnID(t *testing.T) {
	for in, want := range map[string]string{
		`{"type":"turn.failed"}`: `{"type":"turn.failed","turn_id":"t-1"}`,
		`{}` + "\n":              `{"turn_id":"t-1"}` + "\n",
		`{"type":"turn.completed","turn_id":"x"}`: `{"type":"turn.completed","turn_id":"x"}`,
		`not json`: `not json`,
	} {
		if got := string(withTurnID("t-1")([]byte(in))); got != want {
			t.Errorf("withTurnID(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAppServerTurnCompletedAfterExport: app-server's turn/completed
// notification is handled after the turn's root was exported.
func TestAppServerTurnCompletedAfterExport(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	bsp := sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithBatchTimeout(time.Hour))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(instrument.NewSpanProcessor(bsp)))
	defer tp.Shutdown(context.Background())
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(self, WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	x := &Process{c: c, mode: modeAppServer, m: newMapper(c.tracer, c.tracker, c.cfg.agent, "", c.cfg.turnSync), starts: map[string]string{}}
	const turn = "019b0000-aaaa-7bbb-8ccc-000000000002"
	x.request([]byte(`{"id":7,"method":"turn/start","params":{"threadId":"th-1","input":[]}}`))
	if x.line([]byte(`{"id":7,"result":{"turn":{"id":"`+turn+`","status":"inProgress","items":[]}}}`)) != nil {
		t.Fatal("an edit for a response")
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("%d spans exported before the turn completed", n)
	}
	if x.line([]byte(`{"method":"turn/completed","params":{"threadId":"th-1","turn":{"id":"`+turn+`","status":"completed","items":[]}}}`)) != nil {
		t.Fatal("an edit for app-server's notification")
	}
	var roots int
	for _, s := range exp.GetSpans() {
		for _, a := range s.Attributes {
			if a.Key == contract.AttrInvocationID && a.Value.AsString() == turn && !s.Parent.IsValid() {
				roots++
			}
		}
	}
	if roots != 1 {
		t.Fatalf("%d roots of the turn exported when turn/completed was handled, want 1 (%d spans)", roots, len(exp.GetSpans()))
	}
}

// TestWakeExportedAtOnce: a turn Codex starts by itself (here a model
// request of a turn the Client never saw start: an unattributed turn)
// exports its wake span through the Client's flush, not on the
// exporter's schedule, an hour away; the proxy's decision does not wait
// for it.
func TestWakeExportedAtOnce(t *testing.T) {
	tp, exp := genaitest.WakeProvider(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(self, WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	m := newMapper(c.tracer, c.tracker, c.cfg.agent, "", c.cfg.turnSync)
	d := ask(t, m, request("019b0000-aaaa-7bbb-8ccc-0000000000aa", map[string]any{"type": "message", "role": "user", "content": "nobody asked"}))
	id := owner(d)
	if w := exp.WaitWake(t); w.Invocation != id || id == "" {
		t.Fatalf("wake of %q exported, want the unattributed turn %q", w.Invocation, id)
	}
}
