package otelcodex

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// hostConfig is a host's own -c options: its provider, pointed at the
// scripted model, and Codex kept offline. The Client's upstream is a dead
// port, so that only the host's base URL can reach the model.
func (h *harness) hostConfig() []string {
	var args []string
	for _, kv := range []string{`model_provider="host"`, `model_providers.host.name="host"`,
		`model_providers.host.base_url="` + h.srv.URL() + `/v1"`, `model_providers.host.wire_api="responses"`,
		`model_providers.host.env_key="OPENAI_API_KEY"`, "check_for_update_on_startup=false",
		"analytics.enabled=false", "features.plugins=false",
		`otel.exporter="none"`, `otel.trace_exporter="none"`, `otel.metrics_exporter="none"`} {
		args = append(args, "-c", kv)
	}
	return args
}

const deadUpstream = "http://127.0.0.1:1/v1"

// turnHeader records the X-Codex-Turn-Metadata of the requests an answer
// is given to.
type turnHeader struct {
	mu    sync.Mutex
	turns []string
}

func (th *turnHeader) wrap(answer func(scriptedmodel.Request) scriptedmodel.Step) func(scriptedmodel.Request) scriptedmodel.Step {
	return func(r scriptedmodel.Request) scriptedmodel.Step {
		var meta struct {
			TurnID string `json:"turn_id"`
		}
		_ = json.Unmarshal([]byte(r.Header.Get(headerTurnMetadata)), &meta)
		th.mu.Lock()
		th.turns = append(th.turns, meta.TurnID)
		th.mu.Unlock()
		return answer(r)
	}
}

// testExecDropIn: Exec runs `codex exec --json` as a host gave it, its
// output passed through: one invocation whose id is the turn id Codex's
// requests carry, whose session is the thread id exec printed, with the
// model's usage counted on the wire though the host named the endpoint.
func testExecDropIn(t *testing.T, h *harness) {
	var th turnHeader
	h.router.SetRules(
		rule("tool", asks("EXEC-DROPIN"), th.wrap(calls(scriptedmodel.ExecCommandCall("echo dropin-ok", 0)))),
		rule("after-tool", returns("exec_command", "dropin-ok"), th.wrap(says("it printed dropin-ok"))),
	)
	c, work := h.client(t, "exec_dropin", WithUpstream(deadUpstream))
	args := append(append([]string{"exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
		"-m", DefaultModel, "-C", work}, h.hostConfig()...), "EXEC-DROPIN: run echo")
	var stdout, stderr bytes.Buffer
	p, err := c.Exec(testCtx(t), args, Stdio{Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
	if code := p.ExitState().ExitCode(); code != 0 {
		t.Fatalf("exit %d; stderr %s", code, stderr.String())
	}
	thread := ""
	var types []string
	for _, line := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var ev execEvent
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("stdout line %q: %v", line, err)
		}
		types = append(types, ev.Type)
		if ev.Type == "thread.started" {
			thread = ev.ThreadID
		}
	}
	if thread == "" || types[len(types)-1] != "turn.completed" {
		t.Fatalf("events %v", types)
	}
	if len(th.turns) != 2 || th.turns[0] == "" || th.turns[1] != th.turns[0] {
		t.Fatalf("turn ids of the requests %q", th.turns)
	}
	sum := h.wait(t, c, th.turns[0])
	wantSummary(t, "exec", sum, contract.StatusFinal, nil, nil, 0, 0)
	checkUsage(t, "exec", sum, h.want([]string{"tool", "after-tool"}, nil))
	if sum.SessionID != thread {
		t.Errorf("session %q, want the thread %q", sum.SessionID, thread)
	}
	h.balance(t, thread)
}

// rpcHost is a test's JSON-RPC host of app-server through Exec.
type rpcHost struct {
	t      *testing.T
	in     io.WriteCloser
	mu     sync.Mutex
	nextID int
	waits  map[int]chan json.RawMessage
	notes  chan rpcMessage
}

func newRPCHost(t *testing.T, stdout io.Reader, stdin io.WriteCloser) *rpcHost {
	r := &rpcHost{t: t, in: stdin, waits: map[int]chan json.RawMessage{}, notes: make(chan rpcMessage, 4096)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			var msg rpcMessage
			if json.Unmarshal(sc.Bytes(), &msg) != nil {
				continue
			}
			if msg.Method != "" {
				r.notes <- msg
				continue
			}
			var id int
			_ = json.Unmarshal(msg.ID, &id)
			r.mu.Lock()
			ch := r.waits[id]
			r.mu.Unlock()
			if ch != nil {
				ch <- msg.Result
			}
		}
		close(r.notes)
	}()
	return r
}

func (r *rpcHost) call(method string, params any, result any) {
	r.t.Helper()
	r.mu.Lock()
	r.nextID++
	id := r.nextID
	ch := make(chan json.RawMessage, 1)
	r.waits[id] = ch
	r.mu.Unlock()
	r.send(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	select {
	case res := <-ch:
		if result != nil {
			if err := json.Unmarshal(res, result); err != nil {
				r.t.Fatalf("%s: %v", method, err)
			}
		}
	case <-time.After(time.Minute):
		r.t.Fatalf("%s: no response", method)
	}
}

func (r *rpcHost) send(msg any) {
	r.t.Helper()
	b, _ := json.Marshal(msg)
	if _, err := r.in.Write(append(b, '\n')); err != nil {
		r.t.Fatal(err)
	}
}

// until reads notifications until one of method satisfies ok.
func (r *rpcHost) until(method string, ok func(event) bool) {
	r.t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case msg, open := <-r.notes:
			if !open {
				r.t.Fatalf("app-server exited before %s", method)
			}
			if msg.Method == method && ok(readEvent(msg.Method, msg.Params)) {
				return
			}
		case <-timeout:
			r.t.Fatalf("no %s", method)
		}
	}
}

// turn starts a turn and waits for its turn/completed; it returns the
// turn id.
func (r *rpcHost) turn(thread, text string) string {
	r.t.Helper()
	var res struct {
		Turn turnInfo `json:"turn"`
	}
	r.call("turn/start", map[string]any{"threadId": thread, "input": []any{map[string]any{"type": "text", "text": text}}}, &res)
	if res.Turn.ID == "" {
		r.t.Fatal("turn/start returned no turn id")
	}
	r.until("turn/completed", func(ev event) bool { return ev.turnID == res.Turn.ID })
	return res.Turn.ID
}

// testAppServerDropIn: Exec passes a host's app-server JSON-RPC through;
// each turn/start is an invocation known by its turn id, in the session
// of its thread. A background command keeps the session owing work after
// it ends (Codex starts no turn, nor does Exec), until the host's next
// turn reads its exit: consumed_by that turn's invocation; both final.
func testAppServerDropIn(t *testing.T, h *harness) {
	c, work := h.client(t, "appserver_dropin", WithUpstream(deadUpstream))
	g := newGate(t, work, "a")
	h.router.SetRules(append(backgroundRules("BG-D", g.command("delta-done")), contRules...)...)
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	var stderr bytes.Buffer
	p, err := c.Exec(testCtx(t), append(h.hostConfig(), "app-server"), Stdio{Stdin: stdinR, Stdout: stdoutW, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		<-p.Exited()
		stdoutW.Close()
	}()
	t.Cleanup(func() {
		stdinW.Close()
		<-p.Exited()
		if t.Failed() {
			t.Logf("stderr: %s", stderr.String())
		}
	})
	host := newRPCHost(t, stdoutR, stdinW)
	host.call("initialize", map[string]any{"clientInfo": map[string]any{"name": "test-host", "version": "1"}}, nil)
	host.send(map[string]any{"jsonrpc": "2.0", "method": "initialized"})
	var started struct {
		Thread struct {
			ID string `json:"id"`
		} `json:"thread"`
	}
	host.call("thread/start", map[string]any{"cwd": work, "approvalPolicy": "never", "sandbox": "danger-full-access", "model": DefaultModel}, &started)
	thread := started.Thread.ID
	a := host.turn(thread, "BG-D: run it in the background")
	g.open(t)
	host.until("item/completed", func(ev event) bool { return ev.item.Type == "commandExecution" && ev.turnID == a })
	// The host reads each line before the Client does.
	waitUntil(t, "the command's end in the ledger", func() bool {
		st, err := c.Session(thread)
		return err == nil && len(st.OpenJobs) == 0
	})
	if st, _ := c.Session(thread); !st.OwesWork || len(st.ExpectedFollowups) != 1 {
		t.Errorf("state after the command ended, before a turn read it: %+v", st)
	}
	b := host.turn(thread, "The background command has finished: read its output.")
	if a == b {
		t.Fatalf("one turn id %s for two turns", a)
	}
	sa, sb := h.wait(t, c, a), h.wait(t, c, b)
	wantSummary(t, "first", sa, contract.StatusFinal, nil, nil, 1, 0)
	checkUsage(t, "first", sa, h.want([]string{"launch-BG-D", "after-launch-BG-D"}, nil))
	wantSummary(t, "second", sb, contract.StatusFinal, nil, nil, 0, 0)
	checkUsage(t, "second", sb, h.want([]string{"cont-poll", "cont-after"}, nil))
	if sa.SessionID != thread || sb.SessionID != thread {
		t.Errorf("sessions %q %q, want the thread %q", sa.SessionID, sb.SessionID, thread)
	}
	closed := h.p.spans(contract.SpanNameFollowupClosed, a)
	if len(closed) != 1 || attr(closed[0], contract.AttrFollowupReason).AsString() != contract.ReasonConsumedBy {
		t.Errorf("followup_closed spans of the first: %d", len(closed))
	}
	if st, _ := c.Session(thread); st.OwesWork {
		t.Errorf("state at the end: %+v", st)
	}
	stdinW.Close()
	<-p.Exited()
	h.balance(t, thread)
}
