package otelcodex

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// TestCodex runs the scenarios against the real Codex CLI and the
// scripted model, then compares the real collector's summaries of every
// invocation with the ledger's.
func TestCodex(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name string
		f    func(*testing.T, *harness)
	}{
		{"exec_foreground", testExecForeground},
		{"exec_kills_background", testExecKillsBackground},
		{"exec_dropin", testExecDropIn},
		{"session_foreground", testSessionForeground},
		{"background_continuation", testBackgroundContinuation},
		{"second_prompt_meanwhile", testSecondPromptMeanwhile},
		{"consumed_by_second_prompt", testConsumedBySecondPrompt},
		{"host_continues", testHostContinues},
		{"appserver_dropin", testAppServerDropIn},
		{"close_while_running", testCloseWhileRunning},
	} {
		if !t.Run(tc.name, func(t *testing.T) { tc.f(t, h) }) {
			// Later scenarios would read the failed one's requests.
			t.FailNow()
		}
	}
	t.Run("collector", func(t *testing.T) { testCollector(t, h) })
}

// testExecForeground: `codex exec` runs a command in the foreground and
// answers: one invocation, final at its result, two model calls.
func testExecForeground(t *testing.T, h *harness) {
	h.router.SetRules(
		rule("tool", asks("EXEC-FG"), calls(scriptedmodel.ExecCommandCall("echo foreground-ok", 0))),
		rule("after-tool", returns("exec_command", "foreground-ok"), says("it printed foreground-ok")),
	)
	c, _ := h.client(t, "exec_foreground")
	r, err := c.Run(testCtx(t), "EXEC-FG: run echo")
	if err != nil {
		t.Fatalf("run: %v (calls %v)", err, h.router.Labels())
	}
	if r.Text != "it printed foreground-ok" || r.ThreadID == "" {
		t.Errorf("result %+v", r)
	}
	sum := h.wait(t, c, r.InvocationID)
	wantSummary(t, "run", sum, contract.StatusFinal, nil, nil, 0, 0)
	checkUsage(t, "run", sum, h.want([]string{"tool", "after-tool"}, nil))
	if n := len(h.p.spans("execute_tool exec_command", r.InvocationID)); n != 1 {
		t.Errorf("%d execute_tool spans", n)
	}
	h.balance(t, r.SessionID)
}

// testExecKillsBackground: a command `codex exec` leaves running in the
// background is killed when exec exits (verified by its pid), and
// nothing reports its end: its background shell closes interrupted, the
// invocation is final with followup_interrupted.
func testExecKillsBackground(t *testing.T, h *harness) {
	c, work := h.client(t, "exec_kills_background")
	pidFile := filepath.Join(work, "bg.pid")
	h.router.SetRules(
		rule("launch", asks("EXEC-BG"), calls(scriptedmodel.ExecCommandCall("echo $$ > "+pidFile+"; exec sleep 300", 300))),
		rule("after-launch", returns("exec_command", "Process running"), says("launched")),
	)
	r, err := c.Run(testCtx(t), "EXEC-BG: start a long command")
	if err != nil {
		t.Fatalf("run: %v (calls %v)", err, h.router.Labels())
	}
	sum := h.wait(t, c, r.InvocationID)
	wantSummary(t, "run", sum, contract.StatusFinal, nil, []string{contract.AnomalyFollowupInterrupted + ":background shell"}, 1, 0)
	checkUsage(t, "run", sum, h.want([]string{"launch", "after-launch"}, nil))
	checkDischargedOnce(t, h.p, r.InvocationID)
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// exec killed it (its process group) when it exited.
	waitUntil(t, "the background command killed", func() bool {
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	})
	h.balance(t, r.SessionID)
}

// testSessionForeground: a warm session's prompt with a foreground
// command, answered with the minimal stream Codex accepts (output items
// and response.completed with only id and usage).
func testSessionForeground(t *testing.T, h *harness) {
	minimal := func(f func(scriptedmodel.Request) scriptedmodel.Step) func(scriptedmodel.Request) scriptedmodel.Step {
		return func(r scriptedmodel.Request) scriptedmodel.Step {
			st := f(r)
			st.MinimalStream = true
			return st
		}
	}
	h.router.SetRules(
		rule("tool", asks("SESSION-FG"), minimal(calls(scriptedmodel.ExecCommandCall("echo session-ok", 0)))),
		rule("after-tool", returns("exec_command", "session-ok"), minimal(says("session-ok seen"))),
		rule("plain", asks("SESSION-PLAIN"), says("plain answer")),
	)
	c, _ := h.client(t, "session_foreground")
	s := h.start(t, c)
	a := h.prompt(t, s, "SESSION-FG: run echo")
	b := h.prompt(t, s, "SESSION-PLAIN: just answer")
	if a.Text != "session-ok seen" || b.Text != "plain answer" || a.TurnID == b.TurnID {
		t.Errorf("results %+v %+v", a, b)
	}
	sa, sb := h.wait(t, c, a.InvocationID), h.wait(t, c, b.InvocationID)
	wantSummary(t, "first", sa, contract.StatusFinal, nil, nil, 0, 0)
	wantSummary(t, "second", sb, contract.StatusFinal, nil, nil, 0, 0)
	checkUsage(t, "first", sa, h.want([]string{"tool", "after-tool"}, nil))
	checkUsage(t, "second", sb, h.want([]string{"plain"}, nil))
	if n := len(h.p.spans("execute_tool exec_command", a.InvocationID)); n != 1 {
		t.Errorf("%d execute_tool spans", n)
	}
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h.balance(t, s.SessionID())
}

// backgroundRules are the rules of a prompt holding word that starts the
// command cmd in the background, and of the continuation that collects it.
func backgroundRules(word, cmd string) []scriptedmodel.Rule {
	return []scriptedmodel.Rule{
		rule("launch-"+word, asks(word), calls(scriptedmodel.ExecCommandCall(cmd, 300))),
		rule("after-launch-"+word, func(r scriptedmodel.Request) bool {
			return returns("exec_command", "Process running")(r) && strings.Contains(r.LastUserText(), word)
		}, says("launched "+word)),
	}
}

var contRules = []scriptedmodel.Rule{
	rule("cont-poll", asks("has finished"), polls(5000)),
	rule("cont-after", returns("write_stdin", "Process exited"), says("collected")),
}

// testBackgroundContinuation: a prompt starts a command in the
// background; the caller gets its result while it runs (pending, owes
// work, a Wait shorter than the command returns pending); when it ends,
// the Session starts the continuation, which reads it with write_stdin.
// Then the invocation is final with the continuation's usage after its
// result.
func testBackgroundContinuation(t *testing.T, h *harness) {
	c, work := h.client(t, "background_continuation")
	g := newGate(t, work, "a")
	h.router.SetRules(append(backgroundRules("BG-A", g.command("alpha-done")), contRules...)...)
	s := h.start(t, c)
	a := h.prompt(t, s, "BG-A: run it in the background")
	if a.Text != "launched BG-A" {
		t.Errorf("result %+v", a)
	}
	st, err := s.State()
	if err != nil || !st.OwesWork || len(st.OpenJobs) != 1 {
		t.Errorf("state while the command runs: %+v %v", st, err)
	}
	// A caller whose patience ends before the command: pending.
	short, cancel := context.WithDeadline(context.Background(), time.Now())
	sum, err := c.Wait(short, a.InvocationID)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || sum.Status != contract.StatusPending {
		t.Errorf("impatient wait: %v %+v", err, sum)
	}
	g.open(t)
	sum = h.wait(t, c, a.InvocationID)
	wantSummary(t, "invocation", sum, contract.StatusFinal, nil, nil, 1, 1)
	checkUsage(t, "invocation", sum, h.want([]string{"launch-BG-A", "after-launch-BG-A", "cont-poll", "cont-after"}, []string{"cont-poll", "cont-after"}))
	checkDischargedOnce(t, h.p, a.InvocationID)
	waitUntil(t, "session owes nothing", func() bool {
		st, _ := s.State()
		return !st.OwesWork
	})
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h.balance(t, s.SessionID())
}

// testSecondPromptMeanwhile: a second prompt runs while the first's
// command runs; the command ends after it, and the continuation is the
// first invocation's.
func testSecondPromptMeanwhile(t *testing.T, h *harness) {
	c, work := h.client(t, "second_prompt_meanwhile")
	g := newGate(t, work, "a")
	h.router.SetRules(append(append(backgroundRules("BG-A", g.command("alpha-done")),
		rule("plain-B", asks("PLAIN-B"), says("B answered"))), contRules...)...)
	s := h.start(t, c)
	a := h.prompt(t, s, "BG-A: run it in the background")
	b := h.prompt(t, s, "PLAIN-B: meanwhile, answer this")
	sb := h.wait(t, c, b.InvocationID)
	wantSummary(t, "second", sb, contract.StatusFinal, nil, nil, 0, 0)
	checkUsage(t, "second", sb, h.want([]string{"plain-B"}, nil))
	g.open(t)
	sa := h.wait(t, c, a.InvocationID)
	wantSummary(t, "first", sa, contract.StatusFinal, nil, nil, 1, 1)
	checkUsage(t, "first", sa, h.want([]string{"launch-BG-A", "after-launch-BG-A", "cont-poll", "cont-after"}, []string{"cont-poll", "cont-after"}))
	checkDischargedOnce(t, h.p, a.InvocationID)
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h.balance(t, s.SessionID())
}

// testConsumedBySecondPrompt: the second prompt's model polls the first's
// command (write_stdin) and the command ends inside that poll: the second
// turn read its exit, so no continuation comes, and the first
// invocation's followup is closed consumed_by the second.
func testConsumedBySecondPrompt(t *testing.T, h *harness) {
	c, work := h.client(t, "consumed_by_second_prompt")
	g := newGate(t, work, "a")
	h.router.SetRules(append(backgroundRules("BG-A", g.command("alpha-done")),
		rule("poll-B", asks("POLL-B"), polls(20000)),
		rule("after-poll-B", returns("write_stdin", "Process exited"), says("B read it")),
	)...)
	s := h.start(t, c)
	a := h.prompt(t, s, "BG-A: run it in the background")
	answered := h.router.Answering("poll-B")
	done := make(chan Result, 1)
	go func() {
		r, err := s.Prompt(testCtx(t), "POLL-B: wait for that command")
		if err != nil {
			t.Errorf("prompt B: %v", err)
		}
		done <- r
	}()
	<-answered
	// Codex runs the write_stdin now (it waits up to 20 s for the
	// process); the command ends inside it.
	g.open(t)
	b := <-done
	if b.Text != "B read it" {
		t.Errorf("result %+v (calls %v)", b, h.router.Labels())
	}
	sa, sb := h.wait(t, c, a.InvocationID), h.wait(t, c, b.InvocationID)
	wantSummary(t, "first", sa, contract.StatusFinal, nil, nil, 1, 0)
	checkUsage(t, "first", sa, h.want([]string{"launch-BG-A", "after-launch-BG-A"}, nil))
	wantSummary(t, "second", sb, contract.StatusFinal, nil, nil, 0, 0)
	checkUsage(t, "second", sb, h.want([]string{"poll-B", "after-poll-B"}, nil))
	closed := h.p.spans(contract.SpanNameFollowupClosed, a.InvocationID)
	if len(closed) != 1 || attr(closed[0], contract.AttrFollowupReason).AsString() != contract.ReasonConsumedBy ||
		attr(closed[0], contract.AttrFollowupConsumer).AsString() != b.InvocationID {
		t.Errorf("followup_closed spans %v", closed)
	}
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h.balance(t, s.SessionID())
}

// testHostContinues: with ContinueByHost the Session starts nothing; the
// host is told of the completion and starts the continuation itself.
func testHostContinues(t *testing.T, h *harness) {
	completed := make(chan Completion, 1)
	c, work := h.client(t, "host_continues", WithContinuations(ContinueByHost),
		WithOnCompletion(func(_ *Session, c Completion) { completed <- c }))
	g := newGate(t, work, "a")
	h.router.SetRules(append(backgroundRules("BG-A", g.command("alpha-done")), contRules...)...)
	s := h.start(t, c)
	a := h.prompt(t, s, "BG-A: run it in the background")
	g.open(t)
	comp := <-completed
	if comp.InvocationID != a.InvocationID || comp.ProcessID == "" || comp.ExitCode == nil || *comp.ExitCode != 0 {
		t.Errorf("completion %+v", comp)
	}
	// Nobody continued yet: the followup is owed.
	if st, _ := s.State(); !st.OwesWork || len(st.ExpectedFollowups) != 1 {
		t.Errorf("state before the host continues: %+v", st)
	}
	r, err := s.Continue(testCtx(t), comp.CallID, DefaultContinueText(comp))
	if err != nil || r.InvocationID != a.InvocationID || r.Text != "collected" {
		t.Fatalf("continue: %+v %v", r, err)
	}
	if _, err := s.Continue(testCtx(t), comp.CallID, "again"); !errors.Is(err, ErrNotPending) {
		t.Errorf("second continue: %v", err)
	}
	sa := h.wait(t, c, a.InvocationID)
	wantSummary(t, "invocation", sa, contract.StatusFinal, nil, nil, 1, 1)
	checkUsage(t, "invocation", sa, h.want([]string{"launch-BG-A", "after-launch-BG-A", "cont-poll", "cont-after"}, []string{"cont-poll", "cont-after"}))
	checkDischargedOnce(t, h.p, a.InvocationID)
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	h.balance(t, s.SessionID())
}

// testCloseWhileRunning: closing the session's stdin ends app-server and
// the command it runs: the followup closes interrupted.
func testCloseWhileRunning(t *testing.T, h *harness) {
	c, work := h.client(t, "close_while_running")
	g := newGate(t, work, "a")
	pidFile := filepath.Join(work, "bg.pid")
	h.router.SetRules(backgroundRules("BG-A", "echo $$ > "+pidFile+"; "+g.command("never"))...)
	s := h.start(t, c)
	a := h.prompt(t, s, "BG-A: run it in the background")
	if err := s.Close(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the command killed with app-server", func() bool {
		b, err := os.ReadFile(pidFile)
		pid, perr := strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && perr == nil && errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	})
	sa := h.wait(t, c, a.InvocationID)
	wantSummary(t, "invocation", sa, contract.StatusFinal, nil, []string{contract.AnomalyFollowupInterrupted + ":background shell"}, 1, 0)
	checkUsage(t, "invocation", sa, h.want([]string{"launch-BG-A", "after-launch-BG-A"}, nil))
	checkDischargedOnce(t, h.p, a.InvocationID)
	h.balance(t, s.SessionID())
}
