package otelcodex

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
)

// The attribution of subagents' requests, on a mapper fed by hand with
// what Codex 0.169.0's requests and app-server's notifications carry
// (README.md, "Subagents").

// subMeta is the turn metadata of a subagent's request.
type subMeta struct{ agent, thread, turn, parentTurn, rootTurn string }

// subRequest is a request of a subagent's turn; its body names the same
// turn unless bodyTurn is set.
func subRequest(s subMeta, bodyTurn string, input ...map[string]any) wireReq {
	if bodyTurn == "" {
		bodyTurn = s.turn
	}
	if input == nil {
		input = []map[string]any{{"type": "agent_message", "author": "/root", "recipient": s.agent,
			"content": []any{map[string]any{"type": "input_text", "text": "Message Type: NEW_TASK\n"}}}}
	}
	body, _ := json.Marshal(map[string]any{"model": "gpt-6-luna", "stream": true,
		"client_metadata": map[string]any{"turn_id": bodyTurn}, "input": input})
	h, _ := json.Marshal(map[string]any{"agent_name": s.agent, "thread_id": s.thread, "turn_id": s.turn,
		"parent_thread_id": "th", "parent_turn_id": s.parentTurn, "root_turn_id": s.rootTurn,
		"thread_source": "subagent", "subagent_kind": "thread_spawn"})
	req := httptest.NewRequest(http.MethodPost, "/responses", nil)
	req.Header.Set(headerTurnMetadata, string(h))
	return wireReq{req, body}
}

// spawnResult is the parent's request (of turn) returning spawn_agent
// call id's result: the agent task_1 runs.
func spawnResult(turn, id string) wireReq {
	return request(turn, call(id, "spawn_agent", `{"task_name":"task_1","message":"go"}`),
		output(id, `{"task_name":"/root/task_1"}`))
}

// answer is a request of turn delivering the final answer of agent.
func answer(turn, agent string) wireReq {
	return request(turn, map[string]any{"type": "agent_message", "author": agent, "recipient": "/root",
		"content": []any{map[string]any{"type": "input_text", "text": "Message Type: FINAL_ANSWER\nTask name: /root\nSender: " + agent + "\nPayload:\nok"}}})
}

var child = subMeta{agent: "/root/task_1", thread: "cth", turn: "ct1", parentTurn: "t1", rootTurn: "t1"}

func summaryNow(t *testing.T, p *pipeline, id string) instrument.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := p.ledger().Wait(ctx, id)
	if err != nil {
		t.Fatalf("wait %s: %v %+v", id, err, s)
	}
	return s
}

func notFinal(t *testing.T, p *pipeline, id string) {
	t.Helper()
	if s, ok := p.ledger().Summary(id); ok && s.Status == contract.StatusFinal {
		t.Errorf("%s final: %+v", id, s)
	}
}

func TestSubagentAttributedByParentTurn(t *testing.T) {
	p := newPipeline(t, nil)
	m := p.mapper("s")
	_, a := prompt(m, "t1")
	ask(t, m, mustReq("t1"), "s1")
	ask(t, m, spawnResult("t1", "s1"))
	m.turnCompleted(turnInfo{ID: "t1", Status: "completed"})
	// Another prompt runs when the subagent's request comes: the request
	// is still A's, by its parent_turn_id.
	_, b := prompt(m, "t2")
	d := ask(t, m, subRequest(child, ""))
	if got := owner(d); got != a {
		t.Fatalf("subagent request owned by %s, want %s (B %s)", got, a, b)
	}
	if st := p.ledger().Session("s"); !st.OwesWork {
		t.Errorf("session owes no work while the subagent runs: %+v", st)
	}
	notFinal(t, p, a)
	m.event(event{kind: evTurnCompleted, turnID: "ct1", turn: turnInfo{ID: "ct1", Status: "completed"}})
	// Its answer waits in the mailbox: A owes the turn that reads it.
	notFinal(t, p, a)
	if got := m.takeCompletions(); len(got) != 1 || got[0].Agent != child.agent || got[0].InvocationID != a {
		t.Errorf("completions %+v", got)
	}
	// B's turn reads it (wait_agent): consumed_by B.
	ask(t, m, answer("t2", child.agent))
	m.turnCompleted(turnInfo{ID: "t2", Status: "completed"})
	sa := summaryNow(t, p, a)
	if sa.Status != contract.StatusFinal || sa.Usage.BackgroundJobs != 1 || sa.Usage.ModelCalls != 0 {
		// The proxy makes the model-call spans; here there are none.
		t.Errorf("A %+v", sa)
	}
	checkDischargedOnce(t, p, a)
	if n := len(p.spans(contract.SpanNameFollowupClosed, a)); n != 1 {
		t.Errorf("%d followup_closed spans (consumed_by B)", n)
	}
	jobs := p.spans("background subagent", a)
	tools := p.spans("execute_tool spawn_agent", a)
	if len(jobs) != 1 || len(tools) != 1 {
		t.Fatalf("%d jobs, %d spawn tool spans", len(jobs), len(tools))
	}
	if jobs[0].Parent().SpanID() != tools[0].SpanContext().SpanID() {
		t.Errorf("job not a child of the spawn_agent span")
	}
	if got := attr(jobs[0], AttrTurnID).AsString(); got != "ct1" {
		t.Errorf("job turn %q", got)
	}
	if sb := summaryNow(t, p, b); sb.Status != contract.StatusFinal || sb.Usage.BackgroundJobs != 0 {
		t.Errorf("B %+v", sb)
	}
}

func TestSubagentRequestBeforeSpawnResult(t *testing.T) {
	p := newPipeline(t, nil)
	m := p.mapper("s")
	_, a := prompt(m, "t1")
	ask(t, m, mustReq("t1"), "s1")
	// A forked subagent's first request repeats the parent's spawn call,
	// answered "aborted": not the subagent's tool.
	forked := subRequest(child, "", call("s1", "spawn_agent", `{"task_name":"task_1"}`), output("s1", "aborted"),
		map[string]any{"type": "agent_message", "author": "/root", "recipient": child.agent, "content": []any{}})
	if got := owner(ask(t, m, forked, "k1")); got != a {
		t.Fatalf("owned by %s", got)
	}
	if n := len(p.spans("execute_tool spawn_agent", "")); n != 0 {
		t.Errorf("the forked history made %d spawn tool spans", n)
	}
	ask(t, m, spawnResult("t1", "s1"))
	if n := len(p.spans("execute_tool spawn_agent", a)); n != 1 {
		t.Errorf("%d spawn tool spans", n)
	}
	// Its next request returns its own call k1.
	ask(t, m, subRequest(child, "", call("k1", "exec_command", `{"cmd":"true"}`), output("k1", "Process exited with code 0\nOutput:\n")))
	if n := len(p.spans("execute_tool exec_command", a)); n != 1 {
		t.Errorf("%d exec_command tool spans of the subagent", n)
	}
	m.event(event{kind: evItemCompleted, turnID: "t1", item: threadItem{Type: "subAgentActivity", Kind: "completed", ID: "subagent-completed-ct1"}})
	// A's own turn reads the answer: the followup is discharged there.
	ask(t, m, answer("t1", child.agent))
	m.turnCompleted(turnInfo{ID: "t1", Status: "completed"})
	if sa := summaryNow(t, p, a); sa.Status != contract.StatusFinal || sa.Usage.BackgroundJobs != 1 {
		t.Errorf("A %+v (one job, not a second from the late spawn result)", sa)
	}
	checkDischargedOnce(t, p, a)
}

func TestSubagentUnknownParentTurn(t *testing.T) {
	p := newPipeline(t, nil)
	m := p.mapper("s")
	_, a := prompt(m, "t1")
	s := child
	s.parentTurn, s.rootTurn = "t9", "t9"
	d := ask(t, m, subRequest(s, ""))
	if id := owner(d); id == a || unattributed(p, id) != UnattributedUnknownTurn {
		t.Errorf("owner %s reason %q", id, unattributed(p, id))
	}
}

func TestSubagentAmbiguous(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  func() wireReq
	}{
		{"header and body disagree", func() wireReq { return subRequest(child, "ct2") }},
		{"root turn is not the parent", func() wireReq {
			s := child
			s.rootTurn = "t2"
			return subRequest(s, "")
		}},
		{"spawned in another invocation", func() wireReq {
			s := child
			s.parentTurn, s.rootTurn = "t2", "t2"
			return subRequest(s, "")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPipeline(t, nil)
			m := p.mapper("s")
			_, a := prompt(m, "t1")
			ask(t, m, mustReq("t1"), "s1")
			ask(t, m, spawnResult("t1", "s1"))
			_, b := prompt(m, "t2")
			d := ask(t, m, tc.req())
			if id := owner(d); id == a || id == b || unattributed(p, id) != UnattributedAmbiguous {
				t.Fatalf("owner %s reason %q", id, unattributed(p, id))
			}
			if ambiguousSpans(p, a) < 1 {
				t.Errorf("A not kept from final")
			}
		})
	}
}

func TestSubagentEndedTurnRequest(t *testing.T) {
	p := newPipeline(t, nil)
	m := p.mapper("s")
	_, a := prompt(m, "t1")
	ask(t, m, subRequest(child, ""))
	m.subagentTurnCompleted("ct1")
	d := ask(t, m, subRequest(child, ""))
	if id := owner(d); id == a || unattributed(p, id) != UnattributedAmbiguous || ambiguousSpans(p, a) != 1 {
		t.Errorf("owner %s reason %q, %d ambiguous spans of A", id, unattributed(p, id), ambiguousSpans(p, a))
	}
}

// In a one-shot run every request is the run's: the subagents' too, under
// their jobs, which end when the parent reads their answer or, at exit,
// as their last response left them: done, or killed.
func TestSubagentOneShot(t *testing.T) {
	p := newPipeline(t, nil)
	m := p.mapper("run")
	ctx, inv := m.startPrompt(context.Background())
	m.fixed = ctx
	a := inv.ID()
	ask(t, m, mustReq("t1"), "s1", "s2")
	ask(t, m, request("t1", call("s1", "spawn_agent", `{"task_name":"task_1"}`), output("s1", `{"task_name":"/root/task_1"}`),
		call("s2", "spawn_agent", `{"task_name":"task_2"}`), output("s2", `{"task_name":"/root/task_2"}`),
		call("s3", "spawn_agent", `{"task_name":"task_3"}`), output("s3", `{"task_name":"/root/task_3"}`)))
	// task_1 answers and the parent reads it; task_2 answers, unread;
	// task_3 asks for a tool, and is killed.
	ask(t, m, subRequest(child, ""))
	ask(t, m, subRequest(subMeta{agent: "/root/task_2", thread: "c2", turn: "ct2", parentTurn: "t1", rootTurn: "t1"}, ""))
	ask(t, m, subRequest(subMeta{agent: "/root/task_3", thread: "c3", turn: "ct3", parentTurn: "t1", rootTurn: "t1"}, ""), "k3")
	ask(t, m, request("t1", map[string]any{"type": "agent_message", "author": "/root/task_1", "recipient": "/root",
		"content": []any{map[string]any{"type": "input_text", "text": "Message Type: FINAL_ANSWER\nTask name: /root\nSender: /root/task_1\nPayload:\nok"}}}))
	if n := len(p.spans("background subagent", a)); n != 1 {
		t.Errorf("%d jobs ended before exit, want task_1's", n)
	}
	inv.End()
	m.exit(false)
	s := summaryNow(t, p, a)
	if s.Status != contract.StatusFinal || s.Usage.BackgroundJobs != 3 ||
		len(s.Anomalies) != 1 || s.Anomalies[0] != contract.AnomalyFollowupInterrupted+":background subagent" {
		t.Errorf("summary %+v", s)
	}
	checkDischargedOnce(t, p, a)
	// task_2's unread answer closed session_closed, task_3 interrupted.
	reasons := map[string]int{}
	for _, c := range p.spans(contract.SpanNameFollowupClosed, a) {
		reasons[attr(c, contract.AttrFollowupReason).AsString()]++
	}
	if reasons[contract.ReasonSessionClosed] != 1 || reasons[contract.ReasonInterrupted] != 1 {
		t.Errorf("followups closed %v", reasons)
	}
}

func TestReadSubagentMeta(t *testing.T) {
	for _, tc := range []struct {
		header string
		ok     bool
	}{
		{`{"thread_id":"a","turn_id":"t","agent_name":"/root","root_turn_id":"t"}`, false},
		{`{"thread_id":"c","turn_id":"ct","agent_name":"/root/x","parent_turn_id":"t","thread_source":"subagent"}`, true},
		{`{"thread_source":"subagent"}`, true},
		{`not json`, false},
		{``, false},
	} {
		if _, ok := readSubagentMeta(tc.header); ok != tc.ok {
			t.Errorf("%s: ok %v", tc.header, ok)
		}
	}
}

// A spawned agent whose request never came: app-server's "completed" for
// its task name ends the job its spawn started.
func TestSubagentCompletedWithoutRequest(t *testing.T) {
	p := newPipeline(t, nil)
	m := p.mapper("s")
	_, a := prompt(m, "t1")
	ask(t, m, mustReq("t1"), "s1")
	ask(t, m, spawnResult("t1", "s1"))
	m.turnCompleted(turnInfo{ID: "t1", Status: "completed"})
	notFinal(t, p, a)
	m.event(event{kind: evItemCompleted, turnID: "t1", item: threadItem{Type: "subAgentActivity", Kind: "completed", ID: "subagent-completed-ct9", AgentPath: "/root/task_1"}})
	// Ended: its continuation is owed, as for any ended subagent turn.
	m.mu.Lock()
	jobs := m.nextContinuation("")
	if len(jobs) != 1 {
		t.Fatalf("%d pending", len(jobs))
	}
	_, cont, err := m.startContinuation(jobs)
	m.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	cont.End()
	if s := summaryNow(t, p, a); s.Status != contract.StatusFinal || s.Usage.BackgroundJobs != 1 || s.Usage.Continuations != 1 {
		t.Errorf("A %+v", s)
	}
}

// A request too large to read may have been an open subagent turn's.
func TestSubagentOversizedRequest(t *testing.T) {
	p := newPipeline(t, nil)
	m := p.mapper("s")
	_, a := prompt(m, "t1")
	ask(t, m, subRequest(child, ""))
	m.turnCompleted(turnInfo{ID: "t1", Status: "completed"})
	m.oversized()
	if n := ambiguousSpans(p, a); n != 1 {
		t.Errorf("%d ambiguous spans of A", n)
	}
}
