package otelcodex

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/testbin"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// subagentModel is a model of Codex 0.169.0's catalog that offers the
// multi-agent tools (multi_agent_version v2: the "collaboration"
// namespace with spawn_agent and wait_agent).
const subagentModel = "gpt-6-luna"

// TestCodexSubagents runs the subagent scenarios against the real Codex
// CLI and the scripted model, then compares the real collector's
// summaries with the ledger's.
func TestCodexSubagents(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name string
		f    func(*testing.T, *harness)
	}{
		{"subagent_waited", testSubagentWaited},
		{"subagent_outlives_turn", testSubagentOutlivesTurn},
		{"exec_subagent_waited", testExecSubagentWaited},
		{"subagent_nested", testSubagentNested},
		{"subagent_followup_task", testSubagentFollowupTask},
		{"subagent_second_prompt_meanwhile", testSubagentSecondPrompt},
		{"subagent_host_continues", testSubagentHostContinues},
		{"subagent_consumed_by_second_prompt", testSubagentConsumed},
		{"subagent_close_while_running", testSubagentCloseWhileRunning},
		{"exec_kills_subagent", testExecKillsSubagent},
	} {
		if !t.Run(tc.name, func(t *testing.T) { tc.f(t, h) }) {
			t.FailNow()
		}
	}
	t.Run("collector", func(t *testing.T) { testCollector(t, h) })
}

// fromSubagent matches the requests of a subagent's thread (their turn
// metadata names an agent other than the root).
func fromSubagent(r scriptedmodel.Request) bool {
	a := r.CodexAgent()
	return a != "" && a != "/root"
}

// deliversAnswer matches a request of the root thread that delivers a
// subagent's final answer.
func deliversAnswer(r scriptedmodel.Request) bool {
	return !fromSubagent(r) && len(r.FinalAnswers()) > 0
}

// subagentRules: the prompt holding word spawns a subagent (forked from
// the prompt's history when fork), then waits for it when wait; the
// subagent answers at once; a continuation (DefaultContinueText) reads
// the answer with wait_agent.
func subagentRules(word string, fork, wait bool) []scriptedmodel.Rule {
	after := says("spawned, not waiting")
	if wait {
		after = calls(scriptedmodel.WaitAgentCall(10000))
	}
	return []scriptedmodel.Rule{
		rule("child", fromSubagent, says("child result")),
		rule("answer", deliversAnswer, says("the child said: child result")),
		rule("continue", asks("has finished"), calls(scriptedmodel.WaitAgentCall(10000))),
		rule("spawn", asks(word), calls(scriptedmodel.SpawnAgentCall("task_1", "CHILD please work", fork))),
		rule("after-spawn", returns("spawn_agent", "/root/task_1"), after),
		rule("after-wait", returns("wait_agent", "Wait"), says("waited")),
	}
}

// testSubagentWaited: a warm session's prompt spawns a subagent and waits
// for it (wait_agent); the subagent's request carries its own thread and
// turn and the prompt's turn as parent_turn_id. The invocation is final
// with every request, the subagent's included, as one background
// subagent job that promises no followup.
func testSubagentWaited(t *testing.T, h *harness) {
	h.router.SetRules(subagentRules("SUB-WAIT", false, true)...)
	c, _ := h.client(t, "subagent_waited", WithModel(subagentModel))
	s := h.start(t, c)
	r := h.prompt(t, s, "SUB-WAIT: delegate to a subagent")
	sum := h.wait(t, c, r.InvocationID)
	wantSummary(t, "prompt", sum, contract.StatusFinal, nil, nil, 1, 0)
	var rules []string
	for _, a := range h.router.Answered() {
		rules = append(rules, a.Rule)
	}
	checkUsage(t, "prompt", sum, h.want(rules, nil))
	if _, n := h.router.Sum("child"); n != 1 {
		t.Errorf("%d child requests (%v)", n, h.router.Labels())
	}
	jobs := h.p.spans("background subagent", r.InvocationID)
	if len(jobs) != 1 {
		t.Fatalf("%d background subagent spans", len(jobs))
	}
	if got := attr(jobs[0], AttrAgentPath).AsString(); got != "/root/task_1" {
		t.Errorf("agent path %q", got)
	}
	// Its answer, read in the prompt's own turn, discharges it.
	checkDischargedOnce(t, h.p, r.InvocationID)
	// The job starts under the spawn_agent span when the parent's request
	// returning the spawn result reaches the proxy first, and under the
	// parent turn (the tool span's own parent) when the subagent's first
	// request wins the race (subagent.go: "a subagent turn no spawn result
	// announced"); under nothing else.
	if tools := h.p.spans("execute_tool spawn_agent", r.InvocationID); len(tools) != 1 {
		t.Errorf("%d spawn_agent spans, want 1", len(tools))
	} else if p := jobs[0].Parent().SpanID(); p != tools[0].SpanContext().SpanID() && p != tools[0].Parent().SpanID() {
		t.Errorf("the job's parent %s is neither the spawn_agent span %s nor its turn %s", p, tools[0].SpanContext().SpanID(), tools[0].Parent().SpanID())
	}
	if n := len(h.p.spans("chat "+subagentModel, r.InvocationID)); n != len(h.router.Answered()) {
		t.Errorf("%d model calls of the invocation, %d answered", n, len(h.router.Answered()))
	}
	if err := s.Close(testCtx(t)); err != nil {
		t.Error(err)
	}
	h.balance(t, s.SessionID())
}

// testSubagentOutlivesTurn: the prompt's turn ends right after the spawn
// (forked from its history), once the subagent's first request has
// arrived; that request is answered (a command) only after the caller has
// its result, so the subagent's second request starts after the result.
// Until the subagent's turn ends, the session owes work and the
// invocation is not final. Codex starts no turn for its answer: the
// Session starts the continuation (ContinueAuto), which reads it with
// wait_agent; the invocation is then final with the second request and
// the continuation's after the result.
func testSubagentOutlivesTurn(t *testing.T, h *harness) {
	arrived, release := make(chan struct{}), make(chan struct{})
	var once, freed sync.Once
	free := func() { freed.Do(func() { close(release) }) }
	t.Cleanup(free) // a held request must not outlive a failed test
	rules := append([]scriptedmodel.Rule{
		rule("child-after-tool", func(r scriptedmodel.Request) bool {
			return fromSubagent(r) && returns("exec_command", "child-ok")(r)
		}, says("child result")),
		{Name: "child", Match: fromSubagent, Answer: calls(scriptedmodel.ExecCommandCall("echo child-ok", 0)),
			Hold: func(scriptedmodel.Request) {
				once.Do(func() { close(arrived) })
				<-release
			}},
	}, subagentRules("SUB-LATE", true, false)[1:]...)
	for i := range rules {
		if rules[i].Name == "after-spawn" {
			rules[i].Hold = func(scriptedmodel.Request) { <-arrived }
		}
	}
	h.router.SetRules(rules...)
	c, _ := h.client(t, "subagent_outlives_turn", WithModel(subagentModel))
	s := h.start(t, c)
	r := h.prompt(t, s, "SUB-LATE: delegate and go")
	if r.Text != "spawned, not waiting" {
		t.Errorf("result %+v", r)
	}
	st, err := s.State()
	if err != nil {
		t.Fatal(err)
	}
	if !st.OwesWork {
		t.Errorf("session owes no work while the subagent runs: %+v", st)
	}
	if sum, ok := h.p.ledger().Summary(r.InvocationID); ok && sum.Status == contract.StatusFinal {
		t.Errorf("final while the subagent runs: %+v", sum)
	}
	free()
	sum := h.wait(t, c, r.InvocationID)
	wantSummary(t, "prompt", sum, contract.StatusFinal, nil, nil, 1, 1)
	late := []string{"child-after-tool", "continue", "answer"}
	checkUsage(t, "prompt", sum, h.want(append([]string{"spawn", "after-spawn", "child"}, late...), late))
	checkDischargedOnce(t, h.p, r.InvocationID)
	if n := len(h.p.spans("execute_tool exec_command", r.InvocationID)); n != 1 {
		t.Errorf("%d execute_tool exec_command spans (the subagent's command)", n)
	}
	if st, _ := s.State(); st.OwesWork {
		t.Errorf("session owes work after the subagent ended: %+v", st)
	}
	if err := s.Close(testCtx(t)); err != nil {
		t.Error(err)
	}
	h.balance(t, s.SessionID())
}

// testExecSubagentWaited: `codex exec` spawns a subagent and waits for
// it: every request is the run's, the subagent's under its job, which
// ends when the answer is delivered (no app-server events in exec).
func testExecSubagentWaited(t *testing.T, h *harness) {
	h.router.SetRules(subagentRules("EXEC-SUB", false, true)...)
	c, _ := h.client(t, "exec_subagent_waited", WithModel(subagentModel))
	r, err := c.Run(testCtx(t), "EXEC-SUB: delegate to a subagent")
	if err != nil {
		t.Fatalf("run: %v (calls %v)", err, h.router.Labels())
	}
	sum := h.wait(t, c, r.InvocationID)
	wantSummary(t, "run", sum, contract.StatusFinal, nil, nil, 1, 0)
	checkDischargedOnce(t, h.p, r.InvocationID)
	var rules []string
	for _, a := range h.router.Answered() {
		rules = append(rules, a.Rule)
	}
	checkUsage(t, "run", sum, h.want(rules, nil))
	if _, n := h.router.Sum("child"); n != 1 {
		t.Errorf("%d child requests (%v)", n, h.router.Labels())
	}
	if n := len(h.p.spans("background subagent", r.InvocationID)); n != 1 {
		t.Errorf("%d background subagent spans", n)
	}
	h.balance(t, r.SessionID)
}

// agentIs matches the requests of the agent named path.
func agentIs(path string) func(scriptedmodel.Request) bool {
	return func(r scriptedmodel.Request) bool { return r.CodexAgent() == path }
}

// answerFrom matches a request of agent that delivers the final answer of
// the agent named from.
func answerFrom(agent, from string) func(scriptedmodel.Request) bool {
	return func(r scriptedmodel.Request) bool {
		return r.CodexAgent() == agent && slices.Contains(r.FinalAnswers(), from)
	}
}

func both(a, b func(scriptedmodel.Request) bool) func(scriptedmodel.Request) bool {
	return func(r scriptedmodel.Request) bool { return a(r) && b(r) }
}

// testSubagentNested: a subagent spawns a subagent of its own and waits
// for it; the inner one's requests name the outer one's turn as their
// parent_turn_id. Both are jobs of the prompt's invocation, final with
// every request.
func testSubagentNested(t *testing.T, h *harness) {
	outer, inner := "/root/task_1", "/root/task_1/task_2"
	h.router.SetRules(
		rule("inner", agentIs(inner), says("inner result")),
		rule("outer-answer", answerFrom(outer, inner), says("outer result")),
		rule("outer-after-wait", both(agentIs(outer), returns("wait_agent", "Wait")), says("outer waited")),
		rule("outer-after-spawn", both(agentIs(outer), returns("spawn_agent", inner)), calls(scriptedmodel.WaitAgentCall(10000))),
		rule("outer", agentIs(outer), calls(scriptedmodel.SpawnAgentCall("task_2", "INNER work", false))),
		rule("answer", answerFrom("/root", outer), says("nested done")),
		rule("after-wait", both(agentIs("/root"), returns("wait_agent", "Wait")), says("waited")),
		rule("after-spawn", both(agentIs("/root"), returns("spawn_agent", outer)), calls(scriptedmodel.WaitAgentCall(10000))),
		rule("spawn", asks("SUB-NESTED"), calls(scriptedmodel.SpawnAgentCall("task_1", "OUTER work", false))),
	)
	c, _ := h.client(t, "subagent_nested", WithModel(subagentModel))
	s := h.start(t, c)
	r := h.prompt(t, s, "SUB-NESTED: delegate twice")
	sum := h.wait(t, c, r.InvocationID)
	var rules []string
	for _, a := range h.router.Answered() {
		rules = append(rules, a.Rule)
	}
	jobs := h.p.spans("background subagent", r.InvocationID)
	wantSummary(t, "prompt", sum, contract.StatusFinal, nil, nil, int64(len(jobs)), 0)
	checkUsage(t, "prompt", sum, h.want(rules, nil))
	checkDischargedOnce(t, h.p, r.InvocationID)
	if _, n := h.router.Sum("inner"); n != 1 {
		t.Errorf("%d inner requests (%v)", n, h.router.Labels())
	}
	paths := map[string]bool{}
	for _, j := range jobs {
		paths[attr(j, AttrAgentPath).AsString()] = true
	}
	if !paths[outer] || !paths[inner] {
		t.Errorf("jobs of %v (model calls %v)", paths, h.router.Labels())
	}
	if err := s.Close(testCtx(t)); err != nil {
		t.Error(err)
	}
	h.balance(t, s.SessionID())
}

// testSubagentSecondPrompt: a subagent the first prompt spawned is still
// working while a second prompt runs its own turn: the subagent's
// requests stay the first prompt's (its parent_turn_id), whatever runs
// when they come.
func testSubagentSecondPrompt(t *testing.T, h *harness) {
	arrived, release := make(chan struct{}), make(chan struct{})
	var once, freed sync.Once
	free := func() { freed.Do(func() { close(release) }) }
	t.Cleanup(free) // a held request must not outlive a failed test
	h.router.SetRules(
		rule("child-after-tool", both(fromSubagent, returns("exec_command", "child-ok")), says("child result")),
		scriptedmodel.Rule{Name: "child", Match: fromSubagent, Answer: calls(scriptedmodel.ExecCommandCall("echo child-ok", 0)),
			Hold: func(scriptedmodel.Request) {
				once.Do(func() { close(arrived) })
				<-release
			}},
		scriptedmodel.Rule{Name: "after-spawn", Match: returns("spawn_agent", "/root/task_1"), Answer: says("spawned"),
			Hold: func(scriptedmodel.Request) { <-arrived }},
		rule("spawn", asks("SUB-FIRST"), calls(scriptedmodel.SpawnAgentCall("task_1", "CHILD work", false))),
		rule("second", asks("SUB-SECOND"), says("second answer")),
		rule("answer", deliversAnswer, says("noted")),
		rule("continue", asks("has finished"), calls(scriptedmodel.WaitAgentCall(10000))),
	)
	c, _ := h.client(t, "subagent_second_prompt", WithModel(subagentModel))
	s := h.start(t, c)
	a := h.prompt(t, s, "SUB-FIRST: delegate")
	b := h.prompt(t, s, "SUB-SECOND: something else")
	sb := h.wait(t, c, b.InvocationID)
	wantSummary(t, "second", sb, contract.StatusFinal, nil, nil, 0, 0)
	checkUsage(t, "second", sb, h.want([]string{"second"}, nil))
	free()
	sa := h.wait(t, c, a.InvocationID)
	wantSummary(t, "first", sa, contract.StatusFinal, nil, nil, 1, 1)
	late := []string{"child-after-tool", "continue", "answer"}
	checkUsage(t, "first", sa, h.want(append([]string{"spawn", "after-spawn", "child"}, late...), late))
	checkDischargedOnce(t, h.p, a.InvocationID)
	if err := s.Close(testCtx(t)); err != nil {
		t.Error(err)
	}
	h.balance(t, s.SessionID())
}

// testSubagentCloseWhileRunning: the session is closed while a subagent
// runs a command: app-server ends, the command is gone (by its pid), and
// the subagent's job closes interrupted (followup_interrupted).
func testSubagentCloseWhileRunning(t *testing.T, h *harness) {
	c, work := h.client(t, "subagent_close_while_running", WithModel(subagentModel))
	pidFile := filepath.Join(work, "child.pid")
	arrived := make(chan struct{})
	var once sync.Once
	h.router.SetRules(
		scriptedmodel.Rule{Name: "child", Match: fromSubagent, Answer: calls(scriptedmodel.ExecCommandCall("echo $$ > "+pidFile+"; exec sleep 300", 30000)),
			Hold: func(scriptedmodel.Request) { once.Do(func() { close(arrived) }) }},
		rule("spawn", asks("SUB-CLOSE"), calls(scriptedmodel.SpawnAgentCall("task_1", "CHILD work", false))),
		// Answered once the subagent's request has come: it starts
		// before the result, so no usage is after it.
		scriptedmodel.Rule{Name: "after-spawn", Match: returns("spawn_agent", "/root/task_1"), Answer: says("spawned"),
			Hold: func(scriptedmodel.Request) { <-arrived }},
	)
	s := h.start(t, c)
	r := h.prompt(t, s, "SUB-CLOSE: delegate")
	var pid int
	waitUntil(t, "the subagent's command running", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	if !h.p.ledger().Session(s.SessionID()).OwesWork {
		t.Error("the session owes no work while the subagent runs")
	}
	if err := s.Close(testCtx(t)); err != nil {
		t.Error(err)
	}
	waitUntil(t, "the subagent's command killed", func() bool {
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	})
	sum := h.wait(t, c, r.InvocationID)
	wantSummary(t, "prompt", sum, contract.StatusFinal, nil, []string{contract.AnomalyFollowupInterrupted + ":background subagent"}, 1, 0)
	checkUsage(t, "prompt", sum, h.want([]string{"spawn", "after-spawn", "child"}, nil))
	checkDischargedOnce(t, h.p, r.InvocationID)
	h.balance(t, s.SessionID())
}

// testExecKillsSubagent: `codex exec` exits after its turn while a
// subagent runs a command: the command is gone (by its pid), and the
// subagent's job closes interrupted.
func testExecKillsSubagent(t *testing.T, h *harness) {
	c, work := h.client(t, "exec_kills_subagent", WithModel(subagentModel))
	pidFile := filepath.Join(work, "child.pid")
	h.router.SetRules(
		rule("child", fromSubagent, calls(scriptedmodel.ExecCommandCall("echo $$ > "+pidFile+"; exec sleep 300", 30000))),
		rule("spawn", asks("EXEC-SUB-KILL"), calls(scriptedmodel.SpawnAgentCall("task_1", "CHILD work", false))),
		// The prompt's turn ends once the subagent's command runs.
		scriptedmodel.Rule{Name: "after-spawn", Match: returns("spawn_agent", "/root/task_1"), Answer: says("spawned"),
			Hold: func(scriptedmodel.Request) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_ = testbin.Poll(ctx, 10*time.Millisecond, func() (bool, string, error) {
					b, err := os.ReadFile(pidFile)
					return err == nil && strings.HasSuffix(string(b), "\n"), "the subagent's command running", nil
				})
			}},
	)
	r, err := c.Run(testCtx(t), "EXEC-SUB-KILL: delegate")
	if err != nil {
		t.Fatalf("run: %v (calls %v)", err, h.router.Labels())
	}
	sum := h.wait(t, c, r.InvocationID)
	wantSummary(t, "run", sum, contract.StatusFinal, nil, []string{contract.AnomalyFollowupInterrupted + ":background subagent"}, 1, 0)
	var rules []string
	for _, a := range h.router.Answered() {
		rules = append(rules, a.Rule)
	}
	checkUsage(t, "run", sum, h.want(rules, nil))
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatalf("the subagent's command did not run: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the subagent's command killed", func() bool {
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	})
	h.balance(t, r.SessionID)
}

// testSubagentFollowupTask: after the subagent's answer the prompt sends
// it another task (followup_task), which starts a second turn of the same
// thread whose parent_turn_id is the prompt's turn: two subagent jobs of
// the prompt's invocation, final with every request.
func testSubagentFollowupTask(t *testing.T, h *harness) {
	answers := func(n int) func(scriptedmodel.Request) bool {
		return func(r scriptedmodel.Request) bool {
			if r.CodexAgent() != "/root" || len(r.FinalAnswers()) == 0 {
				return false
			}
			got := 0
			for _, it := range r.Items() {
				if it.Type == "agent_message" {
					got++
				}
			}
			return got == n
		}
	}
	h.router.SetRules(
		rule("child", fromSubagent, says("child result")),
		rule("first-answer", answers(1), calls(scriptedmodel.FollowupTaskCall("task_1", "MORE work"))),
		rule("second-answer", answers(2), says("both answers in")),
		rule("after-followup", returns("followup_task", ""), calls(scriptedmodel.WaitAgentCall(10000))),
		rule("spawn", asks("SUB-FOLLOWUP"), calls(scriptedmodel.SpawnAgentCall("task_1", "CHILD work", false))),
		rule("after-spawn", returns("spawn_agent", "/root/task_1"), calls(scriptedmodel.WaitAgentCall(10000))),
	)
	c, _ := h.client(t, "subagent_followup_task", WithModel(subagentModel))
	s := h.start(t, c)
	r := h.prompt(t, s, "SUB-FOLLOWUP: delegate twice to one agent")
	if r.Text != "both answers in" {
		t.Errorf("result %+v (model calls %v)", r, h.router.Labels())
	}
	sum := h.wait(t, c, r.InvocationID)
	wantSummary(t, "prompt", sum, contract.StatusFinal, nil, nil, 2, 0)
	checkDischargedOnce(t, h.p, r.InvocationID)
	var rules []string
	for _, a := range h.router.Answered() {
		rules = append(rules, a.Rule)
	}
	checkUsage(t, "prompt", sum, h.want(rules, nil))
	if _, n := h.router.Sum("child"); n != 2 {
		t.Errorf("%d child requests (%v)", n, h.router.Labels())
	}
	turns := map[string]bool{}
	for _, j := range h.p.spans("background subagent", r.InvocationID) {
		turns[attr(j, AttrTurnID).AsString()] = true
	}
	if len(turns) != 2 {
		t.Errorf("jobs of turns %v", turns)
	}
	if err := s.Close(testCtx(t)); err != nil {
		t.Error(err)
	}
	h.balance(t, s.SessionID())
}

// lateSubagent starts a session (ContinueByHost) whose prompt holding word
// spawns a subagent and ends its turn; the subagent answers once the
// returned release is called. Completions are sent on the channel.
func lateSubagent(t *testing.T, h *harness, name, word string, extra ...scriptedmodel.Rule) (*Client, *Session, Result, func(), <-chan Completion) {
	t.Helper()
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	rules := append([]scriptedmodel.Rule{
		{Name: "child", Match: fromSubagent, Answer: says("child result"), Hold: func(scriptedmodel.Request) {
			once.Do(func() { close(arrived) })
			<-release
		}},
		{Name: "after-spawn", Match: returns("spawn_agent", "/root/task_1"), Answer: says("spawned"),
			Hold: func(scriptedmodel.Request) { <-arrived }},
		rule("spawn", asks(word), calls(scriptedmodel.SpawnAgentCall("task_1", "CHILD work", false))),
	}, extra...)
	h.router.SetRules(rules...)
	done := make(chan Completion, 4)
	c, _ := h.client(t, name, WithModel(subagentModel), WithContinuations(ContinueByHost),
		WithOnCompletion(func(_ *Session, c Completion) { done <- c }))
	s := h.start(t, c)
	r := h.prompt(t, s, word+": delegate")
	var closeOnce sync.Once
	free := func() { closeOnce.Do(func() { close(release) }) }
	t.Cleanup(free) // a held request must not outlive a failed test
	return c, s, r, free, done
}

// testSubagentHostContinues: with ContinueByHost the host is told of the
// subagent's end (Completion.Agent) and starts its continuation with
// Session.Continue, which reads the answer: the continuation of the
// prompt's invocation.
func testSubagentHostContinues(t *testing.T, h *harness) {
	c, s, r, release, done := lateSubagent(t, h, "subagent_host_continues", "SUB-HOST",
		rule("answer", deliversAnswer, says("the child said: child result")),
		rule("continue", asks("has finished"), calls(scriptedmodel.WaitAgentCall(10000))))
	release()
	var comp Completion
	select {
	case comp = <-done:
	case <-testCtx(t).Done():
		t.Fatal("no completion")
	}
	if comp.Agent != "/root/task_1" || comp.InvocationID != r.InvocationID {
		t.Fatalf("completion %+v", comp)
	}
	if st, _ := s.State(); !st.OwesWork {
		t.Errorf("no work owed before the host continues: %+v", st)
	}
	cr, err := s.Continue(testCtx(t), comp.CallID, DefaultContinueText(comp))
	if err != nil {
		t.Fatalf("continue: %v (model calls %v)", err, h.router.Labels())
	}
	if cr.InvocationID != r.InvocationID || cr.Text != "the child said: child result" {
		t.Errorf("continuation %+v", cr)
	}
	sum := h.wait(t, c, r.InvocationID)
	wantSummary(t, "prompt", sum, contract.StatusFinal, nil, nil, 1, 1)
	late := []string{"continue", "answer"}
	checkUsage(t, "prompt", sum, h.want(append([]string{"spawn", "after-spawn", "child"}, late...), late))
	checkDischargedOnce(t, h.p, r.InvocationID)
	if err := s.Close(testCtx(t)); err != nil {
		t.Error(err)
	}
	h.balance(t, s.SessionID())
}

// testSubagentConsumed: the subagent ends after its prompt's turn; a
// second prompt's turn reads its answer (wait_agent): the first
// invocation's followup is closed consumed_by the second.
func testSubagentConsumed(t *testing.T, h *harness) {
	c, s, r, release, done := lateSubagent(t, h, "subagent_consumed", "SUB-CONSUMED",
		rule("answer", deliversAnswer, says("the child said: child result")),
		rule("second", asks("SUB-READ"), calls(scriptedmodel.WaitAgentCall(10000))))
	release()
	select {
	case <-done:
	case <-testCtx(t).Done():
		t.Fatal("no completion")
	}
	b := h.prompt(t, s, "SUB-READ: what did the subagent say?")
	if b.Text != "the child said: child result" {
		t.Errorf("second %+v (model calls %v)", b, h.router.Labels())
	}
	sa := h.wait(t, c, r.InvocationID)
	wantSummary(t, "first", sa, contract.StatusFinal, nil, nil, 1, 0)
	checkUsage(t, "first", sa, h.want([]string{"spawn", "after-spawn", "child"}, nil))
	checkDischargedOnce(t, h.p, r.InvocationID)
	closed := h.p.spans(contract.SpanNameFollowupClosed, r.InvocationID)
	if len(closed) != 1 || attr(closed[0], contract.AttrFollowupConsumer).AsString() != b.InvocationID {
		t.Errorf("followup_closed %v, want consumed_by %s", closed, b.InvocationID)
	}
	sb := h.wait(t, c, b.InvocationID)
	wantSummary(t, "second", sb, contract.StatusFinal, nil, nil, 0, 0)
	checkUsage(t, "second", sb, h.want([]string{"second", "answer"}, nil))
	if err := s.Close(testCtx(t)); err != nil {
		t.Error(err)
	}
	h.balance(t, s.SessionID())
}
