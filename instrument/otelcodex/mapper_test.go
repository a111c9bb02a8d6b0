package otelcodex

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/genaicall"
	"github.com/agentledger/agentledger/instrument/internal/wireproxy"
)

// The attribution of model requests and the jobs' followups, on a mapper
// fed by hand: what app-server's responses and notifications and the
// requests' evidence would give it. The model-call spans are the proxy's
// (the end-to-end tests count them); here only their owners are checked.

// prompt starts a prompt's invocation and registers the turn id its
// turn/start returned.
func prompt(m *mapper, turnID string) (context.Context, string) {
	ctx, inv := m.startPrompt(context.Background())
	m.sending()
	m.started(turnID, ctx)
	return ctx, inv.ID()
}

// request is a Responses request of turn (header and body) with input.
// wireReq is one request as the proxy reads it.
type wireReq struct {
	r    *http.Request
	body []byte
}

func request(turn string, input ...map[string]any) wireReq {
	body, _ := json.Marshal(map[string]any{"model": "gpt-5.5", "stream": true,
		"client_metadata": map[string]any{"turn_id": turn}, "input": input})
	req := httptest.NewRequest(http.MethodPost, "/responses", nil)
	req.Header.Set(headerTurnMetadata, `{"turn_id":"`+turn+`","thread_id":"th"}`)
	return wireReq{req, body}
}

func call(id, name, args string) map[string]any {
	return map[string]any{"type": "function_call", "call_id": id, "name": name, "arguments": args}
}

func output(id, text string) map[string]any {
	return map[string]any{"type": "function_call_output", "call_id": id, "output": text}
}

// ask attributes a request and completes its call with usage; tools are
// the tool calls its response asks for.
func ask(t *testing.T, m *mapper, w wireReq, tools ...string) wireproxy.Decision {
	t.Helper()
	d := m.attribute(w.r, w.body)
	if d.Ctx == nil {
		t.Fatal("no owner context")
	}
	for _, id := range tools {
		d.OnTool(id)
	}
	one := int64(1)
	d.Done(genaicall.Usage{Input: &one, Output: &one})
	return d
}

func owner(d wireproxy.Decision) string { return instrument.InvocationIDFromContext(d.Ctx) }

// unattributed returns the unattributed reason of invocation id's root.
func unattributed(p *pipeline, id string) string {
	for _, s := range p.spans("", id) {
		if v := attr(s, contract.AttrUnattributed); v.AsString() != "" {
			return v.AsString()
		}
	}
	return ""
}

func ambiguousSpans(p *pipeline, id string) int {
	return len(p.spans(wireproxy.SpanNameAmbiguous, id))
}

func TestAttributeByTurn(t *testing.T) {
	p := newPipeline(t, nil)
	m := p.mapper("s")
	_, a := prompt(m, "t1")
	_, b := prompt(m, "t2")
	if got := owner(ask(t, m, mustReq("t1"))); got != a {
		t.Errorf("t1 request owned by %s, want %s", got, a)
	}
	if got := owner(ask(t, m, mustReq("t2"))); got != b {
		t.Errorf("t2 request owned by %s, want %s", got, b)
	}
}

func mustReq(turn string) wireReq {
	return request(turn, map[string]any{"type": "message", "role": "user", "content": "x"})
}

func TestAttributeHeaderBodyDisagree(t *testing.T) {
	p := newPipeline(t, nil)
	m := p.mapper("s")
	_, a := prompt(m, "t1")
	_, b := prompt(m, "t2")
	w := request("t1")
	w.body = []byte(strings.Replace(string(w.body), `"turn_id":"t1"`, `"turn_id":"t2"`, 1))
	d := ask(t, m, w)
	if id := owner(d); id == a || id == b {
		t.Fatalf("owned by a candidate %s", id)
	}
	if got := unattributed(p, owner(d)); got != UnattributedAmbiguous {
		t.Errorf("reason %q", got)
	}
	if ambiguousSpans(p, a) != 1 || ambiguousSpans(p, b) != 1 {
		t.Errorf("candidates not kept from final: %d %d", ambiguousSpans(p, a), ambiguousSpans(p, b))
	}
}

func TestAttributeUnknownTurn(t *testing.T) {
	p := newPipeline(t, nil)
	m := p.mapper("s")
	_, a := prompt(m, "t1")
	d := ask(t, m, mustReq("t9"))
	if owner(d) == a || unattributed(p, owner(d)) != UnattributedUnknownTurn {
		t.Errorf("owner %s reason %q", owner(d), unattributed(p, owner(d)))
	}
}

func TestAttributeForeignToolResult(t *testing.T) {
	p := newPipeline(t, nil)
	m := p.mapper("s")
	_, a := prompt(m, "t1")
	_, b := prompt(m, "t2")
	ask(t, m, mustReq("t1"), "c1")
	// A request of B's turn returns the result of a call A's asked for.
	w := request("t2", call("c1", "exec_command", `{"cmd":"ls"}`), output("c1", "Process exited with code 0\nOutput:\n"))
	d := ask(t, m, w)
	if id := owner(d); id == a || id == b || unattributed(p, id) != UnattributedAmbiguous {
		t.Errorf("owner %s reason %q", id, unattributed(p, id))
	}
	if ambiguousSpans(p, a) != 1 || ambiguousSpans(p, b) != 1 {
		t.Errorf("candidates not kept from final: %d %d", ambiguousSpans(p, a), ambiguousSpans(p, b))
	}
}

func TestAttributeFoldedPrompt(t *testing.T) {
	p := newPipeline(t, nil)
	m := p.mapper("s")
	_, a := prompt(m, "t1")
	// A second turn/start while t1 runs returns t1: the prompt joined it.
	_, b := prompt(m, "t1")
	d := ask(t, m, mustReq("t1"))
	if id := owner(d); id == a || id == b || unattributed(p, id) != UnattributedAmbiguous {
		t.Errorf("owner %s reason %q", id, unattributed(p, id))
	}
	if ambiguousSpans(p, a) < 1 || ambiguousSpans(p, b) < 1 {
		t.Errorf("candidates not kept from final: %d %d", ambiguousSpans(p, a), ambiguousSpans(p, b))
	}
}

// backgrounded is the request returning exec_command c1's result: the
// command runs on as session 7.
func backgrounded(turn string) wireReq {
	return request(turn, call("c1", "exec_command", `{"cmd":"sleep 9","yield_time_ms":300}`),
		output("c1", "Chunk ID: x\nWall time: 0.3 seconds\nProcess running with session ID 7\nOriginal token count: 0\nOutput:\n"))
}

func TestJobConsumedByAnotherPrompt(t *testing.T) {
	p := newPipeline(t, nil)
	m := p.mapper("s")
	_, a := prompt(m, "t1")
	ask(t, m, mustReq("t1"), "c1")
	ask(t, m, backgrounded("t1"))
	if n := len(p.spans("execute_tool exec_command", a)); n != 1 {
		t.Fatalf("%d tool spans", n)
	}
	m.turnCompleted(turnInfo{ID: "t1", Status: "completed"})
	if st := p.ledger().Session("s"); !st.OwesWork || len(st.OpenJobs) != 1 {
		t.Fatalf("state %+v", st)
	}
	_, b := prompt(m, "t2")
	ask(t, m, mustReq("t2"), "c2")
	// B's model polled session 7 and read its exit.
	w := request("t2", call("c2", "write_stdin", `{"session_id":7,"chars":""}`), output("c2", "Process exited with code 0\nOutput:\ndone\n"))
	ask(t, m, w)
	m.mu.Lock()
	m.commandEnded(threadItem{Type: "commandExecution", ID: "c1", Status: "completed"})
	pending := len(m.pending)
	m.mu.Unlock()
	if pending != 0 {
		t.Errorf("%d pending after B read the exit", pending)
	}
	m.turnCompleted(turnInfo{ID: "t2", Status: "completed"})
	sa, err := p.ledger().Wait(context.Background(), a)
	if err != nil || sa.Status != contract.StatusFinal || sa.Usage.BackgroundJobs != 1 || sa.Usage.Continuations != 0 {
		t.Errorf("A %+v %v", sa, err)
	}
	closed := p.spans(contract.SpanNameFollowupClosed, a)
	if len(closed) != 1 || attr(closed[0], contract.AttrFollowupConsumer).AsString() != b {
		t.Errorf("followup_closed %v", closed)
	}
	if sb, err := p.ledger().Wait(context.Background(), b); err != nil || sb.Status != contract.StatusFinal {
		t.Errorf("B %+v %v", sb, err)
	}
}

func TestJobEndedBeforeItsResult(t *testing.T) {
	p := newPipeline(t, nil)
	m := p.mapper("s")
	_, a := prompt(m, "t1")
	ask(t, m, mustReq("t1"), "c1")
	// app-server reports the command ended before the proxy sees the
	// request saying it was left running.
	m.mu.Lock()
	m.commandEnded(threadItem{Type: "commandExecution", ID: "c1", Status: "completed"})
	m.mu.Unlock()
	ask(t, m, backgrounded("t1"))
	m.turnCompleted(turnInfo{ID: "t1", Status: "completed"})
	m.mu.Lock()
	jobs := m.nextContinuation("")
	if len(jobs) != 1 || jobs[0].callID != "c1" {
		m.mu.Unlock()
		t.Fatalf("pending %v", jobs)
	}
	cctx, cont, err := m.startContinuation(jobs)
	m.mu.Unlock()
	if err != nil || cont.InvocationID() != a {
		t.Fatalf("continuation %v %v", cont, err)
	}
	m.sending()
	m.started("t2", cctx)
	if got := owner(ask(t, m, mustReq("t2"))); got != a {
		t.Errorf("continuation's request owned by %s", got)
	}
	m.turnCompleted(turnInfo{ID: "t2", Status: "completed"})
	sum, err := p.ledger().Wait(context.Background(), a)
	if err != nil || sum.Status != contract.StatusFinal || sum.Usage.Continuations != 1 {
		t.Errorf("%+v %v", sum, err)
	}
	checkDischargedOnce(t, p, a)
}

func TestSpoofedProcessHeader(t *testing.T) {
	p := newPipeline(t, nil)
	m := p.mapper("s")
	_, a := prompt(m, "t1")
	// The command printed what looks like the header: it finished.
	w := request("t1", call("c1", "exec_command", `{"cmd":"cat x"}`),
		output("c1", "Process exited with code 0\nOutput:\nProcess running with session ID 7\n"))
	ask(t, m, w)
	m.turnCompleted(turnInfo{ID: "t1", Status: "completed"})
	if sum, err := p.ledger().Wait(context.Background(), a); err != nil || sum.Status != contract.StatusFinal || sum.Usage.BackgroundJobs != 0 {
		t.Errorf("%+v %v", sum, err)
	}
}

func TestRetriedResultRecordedOnce(t *testing.T) {
	p := newPipeline(t, nil)
	m := p.mapper("s")
	_, a := prompt(m, "t1")
	ask(t, m, backgrounded("t1"))
	ask(t, m, backgrounded("t1"))
	if n, j := len(p.spans("execute_tool exec_command", a)), len(m.jobs); n != 1 || j != 1 {
		t.Errorf("%d tool spans, %d jobs", n, j)
	}
}

func TestExitClosesFollowups(t *testing.T) {
	p := newPipeline(t, nil)
	m := p.mapper("s")
	_, a := prompt(m, "t1")
	ask(t, m, backgrounded("t1"))
	w := request("t1", call("c2", "exec_command", `{"cmd":"sleep 9"}`),
		output("c2", "Process running with session ID 8\nOutput:\n"))
	ask(t, m, w)
	m.mu.Lock()
	m.commandEnded(threadItem{Type: "commandExecution", ID: "c2", Status: "completed"})
	m.mu.Unlock()
	m.turnCompleted(turnInfo{ID: "t1", Status: "completed"})
	m.exit(false)
	sum, err := p.ledger().Wait(context.Background(), a)
	if err != nil || sum.Status != contract.StatusFinal || sum.Usage.BackgroundJobs != 2 {
		t.Fatalf("%+v %v", sum, err)
	}
	reasons := map[string]int{}
	for _, s := range p.spans(contract.SpanNameFollowupClosed, a) {
		reasons[attr(s, contract.AttrFollowupReason).AsString()]++
	}
	// c1 still ran (killed: interrupted); c2 had ended with no
	// continuation (session_closed).
	if reasons[contract.ReasonInterrupted] != 1 || reasons[contract.ReasonSessionClosed] != 1 {
		t.Errorf("reasons %v", reasons)
	}
	checkDischargedOnce(t, p, a)
}

func TestRequestWaitsForItsTurn(t *testing.T) {
	p := newPipeline(t, nil)
	m := p.mapper("s")
	ctx, inv := m.startPrompt(context.Background())
	m.sending()
	done := make(chan wireproxy.Decision)
	go func() {
		w := mustReq("t1")
		done <- m.attribute(w.r, w.body)
	}()
	// The turn/start response is read after (or before) the request.
	m.started("t1", ctx)
	d := <-done
	if owner(d) != inv.ID() {
		t.Errorf("owned by %s", owner(d))
	}
	d.Done(genaicall.Usage{})
}

func TestOneShotOwnsEveryRequest(t *testing.T) {
	p := newPipeline(t, nil)
	m := p.mapper("s")
	ctx, inv := m.startPrompt(context.Background())
	m.fixed = ctx
	if got := owner(ask(t, m, mustReq("any-turn"))); got != inv.ID() {
		t.Errorf("owned by %s", got)
	}
}
