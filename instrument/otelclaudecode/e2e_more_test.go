package otelclaudecode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/internal/testbin"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// start starts a warm session that is stopped when the test ends.
func (h *harness) start(t *testing.T, c *Client) *Process {
	t.Helper()
	p, err := c.Start(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	stopAtEnd(t, p)
	return p
}

func (h *harness) prompt(t *testing.T, p *Process, text string) Result {
	t.Helper()
	res, err := p.Prompt(testCtx(t), text)
	if err != nil {
		t.Fatalf("prompt %q: %v (model calls %v)", text, err, h.router.Labels())
	}
	h.track(res.InvocationID)
	return res
}

func (h *harness) waitID(t *testing.T, p *Process, id string) instrument.Summary {
	t.Helper()
	sum, err := p.Wait(testCtx(t), id)
	if err != nil {
		t.Fatalf("wait %s: %v; summary %+v; model calls %v", id, err, sum, h.router.Labels())
	}
	return sum
}

// closeSession closes the CLI's input and waits for it to exit.
func closeSession(t *testing.T, p *Process) {
	t.Helper()
	if err := p.CloseInput(); err != nil {
		t.Fatal(err)
	}
	if err := p.WaitExit(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// jobEnded reports whether the session has a job whose span ended and
// whose notification no turn has read yet: the CLI posted it.
func jobEnded(p *Process) func() bool {
	return func() bool {
		st, _ := p.State()
		return len(st.ExpectedFollowups) > 0
	}
}

// testFailingShell: a shell that exits non-zero still wakes a
// continuation; its span records the failure.
func testFailingShell(t *testing.T, h *harness) {
	g := newGate(t, "fail")
	h.router.SetRules(bgRules("BG-FAIL", g.command("broken", 3))...)
	r := h.run(t, testCtx(t), h.client(t, "failing_shell"), "BG-FAIL: start the failing job")
	g.open(t)
	sum := h.wait(t, r)
	wantStatus(t, "invocation", sum, contract.StatusFinal)
	checkUsage(t, "invocation", sum, h.want([]string{"launch-BG-FAIL", "after-launch-BG-FAIL", "continuation"}, []string{"continuation"}))
	jobs := h.p.spans("background shell", r.Result.InvocationID)
	if len(jobs) != 1 || attr(jobs[0], AttrTaskStatus).AsString() != "failed" || jobs[0].Status().Code != codes.Error {
		t.Fatalf("background spans %v", jobs)
	}
	checkDischargedOnce(t, h.p)
	h.balance(t, r.Process.SessionID())
}

// testSeveralShells: two shells of one turn, released together. Claude
// Code reads notifications that arrive together in one request (with an
// empty result for the first), so there are one or two continuations; the
// count must equal the notification turns that made a request, and both
// followups must be discharged once.
func testSeveralShells(t *testing.T, h *harness) {
	g1, g2 := newGate(t, "one"), newGate(t, "two")
	h.router.SetRules(
		rule("launch", asks("BG-MANY"), calls(
			scriptedmodel.BashCall(g1.command("one", 0), "First job", true),
			scriptedmodel.BashCall(g2.command("two", 0), "Second job", true))),
		rule("after-launch", hasToolResult, says("launched both")),
		rule("continuation", hasNotification, says("noted")),
	)
	r := h.run(t, testCtx(t), h.client(t, "several_shells"), "BG-MANY: start two jobs")
	if st, _ := r.Process.State(); len(st.OpenJobs) != 2 {
		t.Errorf("open jobs at the result: %+v", st)
	}
	g1.open(t)
	g2.open(t)
	sum := h.wait(t, r)
	wantStatus(t, "invocation", sum, contract.StatusFinal)
	checkUsage(t, "invocation", sum, h.want([]string{"launch", "after-launch", "continuation"}, []string{"continuation"}))
	_, turns := h.router.Sum("continuation")
	if sum.Usage.BackgroundJobs != 2 || sum.Usage.Continuations != int64(turns) {
		t.Errorf("usage %+v, %d notification turns", sum.Usage, turns)
	}
	checkDischargedOnce(t, h.p)
	h.balance(t, r.Process.SessionID())
}

// testWarmSecondPrompt: a second prompt on the same CLI while the first
// prompt's shell runs. The second invocation is final at its result; the
// shell's notification turn, which comes after, belongs to the first.
func testWarmSecondPrompt(t *testing.T, h *harness) {
	g := newGate(t, "warm")
	h.router.SetRules(append(bgRules("BG-W1", g.command("warm", 0)),
		rule("second", asks("PLAIN-W2"), says("hello again")))...)
	p := h.start(t, h.client(t, "warm_second_prompt"))
	first := h.prompt(t, p, "BG-W1: start the job")
	second := h.prompt(t, p, "PLAIN-W2: just answer")
	if second.Text != "hello again" {
		t.Errorf("second result %+v", second)
	}
	sum2, _ := h.p.ledger().Summary(second.InvocationID)
	wantStatus(t, "second at its result", sum2, contract.StatusFinal)
	checkUsage(t, "second", sum2, h.want([]string{"second"}, nil))
	if st, _ := p.State(); !st.OwesWork {
		t.Errorf("session owes nothing while the first prompt's shell runs: %+v", st)
	}
	g.open(t)
	sum1 := h.waitID(t, p, first.InvocationID)
	wantStatus(t, "first", sum1, contract.StatusFinal)
	checkUsage(t, "first", sum1, h.want([]string{"launch-BG-W1", "after-launch-BG-W1", "continuation"}, []string{"continuation"}))
	if sum1.Usage.Continuations != 1 {
		t.Errorf("first usage %+v", sum1.Usage)
	}
	if n := len(h.p.spans("continue_agent "+DefaultAgent, second.InvocationID)); n != 0 {
		t.Errorf("%d continuations of the second invocation", n)
	}
	closeSession(t, p)
	if _, err := p.Prompt(testCtx(t), "after the input closed"); !errors.Is(err, ErrInputClosed) {
		t.Errorf("prompt after CloseInput: %v", err)
	}
	if sum2, _ = h.p.ledger().Summary(second.InvocationID); sum2.Revision != 1 {
		t.Errorf("second invocation revised after the continuation: %+v", sum2)
	}
	checkDischargedOnce(t, h.p)
	h.balance(t, p.SessionID())
}

// testNotificationWhileStreaming: the shell ends while the second
// prompt's only model request streams. The CLI keeps the notification for
// a turn of its own after that result: a continuation of the first
// invocation, after the second is final.
func testNotificationWhileStreaming(t *testing.T, h *harness) {
	g := newGate(t, "stream")
	var p *Process
	// Hold runs on the model server's goroutine: it must not end the test.
	hold := func(scriptedmodel.Request) {
		if err := os.WriteFile(string(g), nil, 0o644); err != nil {
			t.Error(err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := testbin.Poll(ctx, 20*time.Millisecond, func() (bool, string, error) {
			return jobEnded(p)(), "the shell's notification", nil
		}); err != nil {
			t.Error(err)
		}
	}
	h.router.SetRules(append(bgRules("BG-S1", g.command("streamed", 0)),
		scriptedmodel.Rule{Name: "slow", Match: asks("SLOW-S2"), Hold: hold,
			Answer: func(scriptedmodel.Request) scriptedmodel.Step { return says("slow answer") }})...)
	p = h.start(t, h.client(t, "notification_while_streaming"))
	first := h.prompt(t, p, "BG-S1: start the job")
	second := h.prompt(t, p, "SLOW-S2: think slowly")
	sum2 := h.waitID(t, p, second.InvocationID)
	wantStatus(t, "second", sum2, contract.StatusFinal)
	checkUsage(t, "second", sum2, h.want([]string{"slow"}, nil))
	sum1 := h.waitID(t, p, first.InvocationID)
	wantStatus(t, "first", sum1, contract.StatusFinal)
	checkUsage(t, "first", sum1, h.want([]string{"launch-BG-S1", "after-launch-BG-S1", "continuation"}, []string{"continuation"}))
	if sum1.Usage.Continuations != 1 {
		t.Errorf("first usage %+v", sum1.Usage)
	}
	closeSession(t, p)
	checkDischargedOnce(t, h.p)
	h.balance(t, p.SessionID())
}

// testConsumedByLaterPrompt: the shell ends while the second prompt's
// foreground tool runs; the CLI puts the notification into that turn's
// next request. The first invocation's followup is closed consumed_by the
// second, whose usage the folded request stays.
func testConsumedByLaterPrompt(t *testing.T, h *harness) {
	g1, g2 := newGate(t, "first"), newGate(t, "second")
	h.router.SetRules(append([]scriptedmodel.Rule{
		rule("fg", asks("FG-C2"), calls(scriptedmodel.BashCall(g2.command("second", 0), "Wait in the foreground", false))),
		rule("after-fg", func(r scriptedmodel.Request) bool {
			return len(r.ToolResults()) > 0 && strings.Contains(r.NewText(), "second")
		}, says("both done"))},
		bgRules("BG-C1", g1.command("first", 0))...)...)
	p := h.start(t, h.client(t, "notification_consumed"))
	first := h.prompt(t, p, "BG-C1: start the job")
	type answer struct {
		res Result
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := p.Prompt(testCtx(t), "FG-C2: wait in the foreground")
		done <- answer{res, err}
	}()
	recv(t, "foreground tool request", h.router.Answering("fg"))
	g1.open(t)
	waitUntil(t, "the first shell's notification", jobEnded(p))
	g2.open(t)
	a := recv(t, "second result", done)
	if a.err != nil {
		t.Fatal(a.err)
	}
	h.track(a.res.InvocationID)
	second := a.res
	after := h.router.Answered()
	folded := false
	for _, x := range after {
		if x.Rule == "after-fg" && strings.Contains(x.Text, "<task-notification>") {
			folded = true
		}
	}
	if !folded {
		t.Fatalf("the notification was not read by the second prompt's turn: %v", h.router.Labels())
	}
	sum1 := h.waitID(t, p, first.InvocationID)
	wantStatus(t, "first", sum1, contract.StatusFinal)
	checkUsage(t, "first", sum1, h.want([]string{"launch-BG-C1", "after-launch-BG-C1"}, nil))
	if sum1.Usage.Continuations != 0 {
		t.Errorf("first usage %+v", sum1.Usage)
	}
	sum2 := h.waitID(t, p, second.InvocationID)
	wantStatus(t, "second", sum2, contract.StatusFinal)
	checkUsage(t, "second", sum2, h.want([]string{"fg", "after-fg"}, nil))
	jobs := h.p.spans("background shell", first.InvocationID)
	if len(jobs) != 1 {
		t.Fatalf("jobs %v", jobs)
	}
	closed := h.p.linksTo(jobs[0].SpanContext(), contract.LinkFollowup, first.InvocationID)
	if len(closed) != 1 || closed[0].Name() != contract.SpanNameFollowupClosed ||
		attr(closed[0], contract.AttrFollowupReason).AsString() != contract.ReasonConsumedBy ||
		attr(closed[0], contract.AttrFollowupConsumer).AsString() != second.InvocationID {
		t.Errorf("followup of the first job: %v", closed)
	}
	if n := len(h.p.linksTo(jobs[0].SpanContext(), contract.LinkConsumed, second.InvocationID)); n != 1 {
		t.Errorf("%d consumed links from the second invocation", n)
	}
	closeSession(t, p)
	checkDischargedOnce(t, h.p)
	h.balance(t, p.SessionID())
}

// testInterrupted: the CLI is stopped (Interrupt, or its context done: a
// timeout) while the shell runs. Claude Code stops the shell and exits;
// the followup is closed as interrupted, so the invocation is final with
// what happened, never waiting for a turn that cannot come, and the
// reason is on record.
func testInterrupted(t *testing.T, h *harness, name string, stop func(*Run, context.CancelFunc) error) {
	g := newGate(t, "never")
	h.router.SetRules(bgRules("BG-STOP", g.command("never", 0))...)
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	r := h.run(t, ctx, h.client(t, name), "BG-STOP: start the endless job")
	if err := stop(r, cancel); err != nil {
		t.Fatal(err)
	}
	if err := r.Process.WaitExit(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	sum := h.waitID(t, r.Process, r.Result.InvocationID)
	wantStatus(t, "invocation", sum, contract.StatusFinal)
	checkUsage(t, "invocation", sum, h.want([]string{"launch-BG-STOP", "after-launch-BG-STOP"}, nil))
	jobs := h.p.spans("background shell", r.Result.InvocationID)
	if len(jobs) != 1 || jobs[0].Status().Code != codes.Error {
		t.Fatalf("background spans %v", jobs)
	}
	closed := h.p.linksTo(jobs[0].SpanContext(), contract.LinkFollowup, r.Result.InvocationID)
	if len(closed) != 1 || closed[0].Name() != contract.SpanNameFollowupClosed ||
		attr(closed[0], contract.AttrFollowupReason).AsString() != contract.ReasonInterrupted {
		t.Errorf("followup of the job: %v", closed)
	}
	// Final, and the summary says a job was killed (contract v0.7).
	if want := []string{contract.AnomalyFollowupInterrupted + ":background shell"}; fmt.Sprint(sum.Anomalies) != fmt.Sprint(want) {
		t.Errorf("anomalies %v, want %v", sum.Anomalies, want)
	}
	checkDischargedOnce(t, h.p)
	h.balance(t, r.Process.SessionID())
}

// testKilledDuringTurn: the CLI is killed while the prompt's model request
// streams. The prompt fails, its root and the request's span end with an
// error, and the invocation is not left open.
func testKilledDuringTurn(t *testing.T, h *harness) {
	arrived := make(chan struct{})
	var arrivedOnce sync.Once
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	h.router.SetRules(scriptedmodel.Rule{Name: "held", Match: asks("HOLD-K"),
		Hold: func(scriptedmodel.Request) {
			arrivedOnce.Do(func() { close(arrived) })
			<-release
		},
		Answer: func(scriptedmodel.Request) scriptedmodel.Step { return says("too late") }})
	p := h.start(t, h.client(t, "killed"))
	done := make(chan error, 1)
	var res Result
	go func() {
		var err error
		res, err = p.Prompt(testCtx(t), "HOLD-K: never answered")
		done <- err
	}()
	recv(t, "held request", arrived)
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	err := recv(t, "prompt error", done)
	if err == nil || !errors.Is(err, errInterrupted) {
		t.Fatalf("prompt of a killed CLI: %v", err)
	}
	h.track(res.InvocationID)
	sum := h.waitID(t, p, res.InvocationID)
	roots := h.p.spans("invoke_agent "+DefaultAgent, res.InvocationID)
	if len(roots) != 1 || roots[0].Status().Code != codes.Error {
		t.Errorf("root %v", roots)
	}
	// The request had reached the model when the CLI hung up: what it
	// billed is unknown, so its span has no usage and no error status
	// (contract, "How a model call ended"), and the invocation closes
	// incomplete with usage_missing, never final.
	for _, s := range h.p.spans("", res.InvocationID) {
		if !strings.HasPrefix(s.Name(), "chat ") {
			continue
		}
		ending := ""
		for _, kv := range s.Attributes() {
			if string(kv.Key) == contract.AttrResponseEnding {
				ending = kv.Value.AsString()
			}
			if strings.HasPrefix(string(kv.Key), "gen_ai.usage.") {
				t.Errorf("the killed request's span %s has %s", s.Name(), kv.Key)
			}
		}
		if ending != contract.EndingCallerClosed || s.Status().Code == codes.Error {
			t.Errorf("the killed request's span %s ended %q, status %v; want %s, not an error (not billed)", s.Name(), ending, s.Status().Code, contract.EndingCallerClosed)
		}
	}
	if sum.Status != contract.StatusIncomplete || !slices.ContainsFunc(sum.Reasons, func(r string) bool { return strings.HasPrefix(r, contract.ReasonUsageMissing) }) {
		t.Errorf("summary %+v, want incomplete with usage_missing", sum)
	}
	if _, err := p.Prompt(testCtx(t), "after the end"); err == nil {
		t.Error("a prompt to an exited CLI succeeded")
	}
	h.balance(t, p.SessionID())
}
