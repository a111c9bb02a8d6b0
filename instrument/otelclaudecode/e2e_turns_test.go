package otelclaudecode

import (
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// testRetried: the model fails a request (HTTP 500), then cuts the
// retried stream after a few events; the CLI retries and the third
// attempt succeeds. The proxy sees all three attempts. The invocation is
// final with exactly the usage of the answer that completed, or, when a
// cut attempt's usage is unknown (it began: the provider may have billed
// it), incomplete with usage_missing; never final with other totals.
func testRetried(t *testing.T, h *harness) {
	attempt := 0
	h.router.SetRules(
		scriptedmodel.Rule{Name: "flaky", Match: asks("RETRY-ONE"), Answer: func(scriptedmodel.Request) scriptedmodel.Step {
			attempt++
			switch attempt {
			case 1:
				return scriptedmodel.Step{Status: 500}
			case 2:
				return scriptedmodel.Step{Text: "this stream is cut off here", CutAfter: 6}
			}
			return says("third time lucky")
		}},
	)
	r := h.run(t, testCtx(t), h.client(t, "retried"), "RETRY-ONE: answer eventually")
	if r.Result.Text != "third time lucky" {
		t.Errorf("result %+v", r.Result)
	}
	sum := h.wait(t, r)
	answered := h.router.Answered()
	if len(answered) != 3 {
		t.Fatalf("requests %v", h.router.Labels())
	}
	switch sum.Status {
	case contract.StatusFinal:
		u := sum.Usage
		a := answered[2].Usage
		if u.InputTokens != int64(a.InputTokens) || u.OutputTokens != int64(a.OutputTokens) {
			t.Errorf("final with %d/%d tokens, want the completed answer's %d/%d", u.InputTokens, u.OutputTokens, a.InputTokens, a.OutputTokens)
		}
	case contract.StatusIncomplete:
		if !slices.ContainsFunc(sum.Reasons, func(r string) bool { return strings.HasPrefix(r, contract.ReasonUsageMissing) }) {
			t.Errorf("incomplete without usage_missing: %v", sum.Reasons)
		}
	default:
		t.Errorf("status %s", sum.Status)
	}
	// No balance here: a cut attempt's usage is unknown by design (the
	// scripted model recorded what it would have reported).
	t.Logf("retried: %s %v", sum.Status, sum.Reasons)
}

// testPromptDuringTurn: a prompt written while the first prompt's turn
// runs a foreground tool is read by that turn (one result answers both).
// The requests after it answer the second prompt and are its usage; the
// first keeps the request that asked for the tool.
//
// With sameTextBefore, a prompt of the same text as the folded one was
// answered earlier in the session (issue 32): the text names only the
// prompt still waiting for its result, so each is exact and final.
func testPromptDuringTurn(t *testing.T, h *harness, sameTextBefore bool) {
	g := newGate(t, "mid")
	h.router.SetRules(
		rule("earlier", asks("PLAIN-M2"), says("answered the earlier one")),
		rule("fg", asks("FG-M1"), calls(scriptedmodel.BashCall(g.command("mid", 0), "Wait in the foreground", false))),
		rule("after", func(r scriptedmodel.Request) bool { return len(r.ToolResults()) > 0 }, says("answered both")),
	)
	name, queued := "prompt_during_turn", 2
	if sameTextBefore {
		name, queued = "prompt_during_turn_same_text", 3
	}
	p := h.start(t, h.client(t, name))
	var earlier Result
	if sameTextBefore {
		earlier = h.prompt(t, p, "PLAIN-M2: and another thing")
	}
	type answer struct {
		res Result
		err error
	}
	first := make(chan answer, 1)
	go func() {
		res, err := p.Prompt(testCtx(t), "FG-M1: wait in the foreground")
		first <- answer{res, err}
	}()
	recv(t, "foreground tool request", h.router.Answering("fg"))
	second := make(chan answer, 1)
	go func() {
		res, err := p.Prompt(testCtx(t), "PLAIN-M2: and another thing")
		second <- answer{res, err}
	}()
	// The CLI says it queued the second prompt (command_lifecycle) before
	// the tool ends, so the running turn reads it.
	h.mu.Lock()
	transcript := h.transcript
	h.mu.Unlock()
	waitUntil(t, "the CLI to queue the second prompt", func() bool {
		data, err := os.ReadFile(transcript)
		return err == nil && strings.Count(string(data), `"state":"queued"`) == queued
	})
	g.open(t)
	a1, a2 := recv(t, "first result", first), recv(t, "second result", second)
	if a1.err != nil || a2.err != nil {
		t.Fatal(a1.err, a2.err)
	}
	h.track(a1.res.InvocationID, a2.res.InvocationID)
	if a1.res.Text != "answered both" || a2.res.Text != "answered both" {
		t.Errorf("results %+v %+v", a1.res, a2.res)
	}
	answered := h.router.Answered()
	if sameTextBefore {
		answered = answered[1:]
		se := h.waitID(t, p, earlier.InvocationID)
		wantStatus(t, "earlier", se, contract.StatusFinal)
		checkUsage(t, "earlier", se, h.want([]string{"earlier"}, nil))
	}
	if len(answered) != 2 || !strings.Contains(answered[1].Text, "PLAIN-M2") {
		t.Fatalf("the running turn did not read the second prompt: %v", h.router.Labels())
	}
	sum1 := h.waitID(t, p, a1.res.InvocationID)
	wantStatus(t, "first", sum1, contract.StatusFinal)
	checkUsage(t, "first", sum1, h.want([]string{"fg"}, nil))
	sum2 := h.waitID(t, p, a2.res.InvocationID)
	wantStatus(t, "second", sum2, contract.StatusFinal)
	checkUsage(t, "second", sum2, h.want([]string{"after"}, nil))
	closeSession(t, p)
	h.balance(t, p.SessionID())
}

// testRetried529: the request of A's notification turn is answered 529
// (overloaded) once and retried by the CLI (issue 32, observation 4). The
// failed attempt and its retry are one model call: A is final with three
// calls, the retry's usage and none of the error's.
func testRetried529(t *testing.T, h *harness) {
	g := newGate(t, "overloaded")
	var mu sync.Mutex
	failed := false
	overloadedOnce := func(r scriptedmodel.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		if failed || !hasNotification(r) {
			return false
		}
		failed = true
		return true
	}
	h.router.SetRules(append([]scriptedmodel.Rule{
		{Name: "overloaded", Match: overloadedOnce, Answer: func(scriptedmodel.Request) scriptedmodel.Step {
			return scriptedmodel.Step{Status: 529}
		}},
	}, bgRules("BG-529", g.command("finished", 0))...)...)
	p := h.start(t, h.client(t, "retried_529"))
	a := h.prompt(t, p, "BG-529: start the job")
	g.open(t)
	sa := h.waitID(t, p, a.InvocationID)
	if _, n := h.router.Sum("overloaded"); n != 1 {
		t.Fatalf("no 529 answered: %v", h.router.Labels())
	}
	wantStatus(t, "A", sa, contract.StatusFinal)
	checkUsage(t, "A", sa, h.want([]string{"launch-BG-529", "after-launch-BG-529", "continuation"}, []string{"continuation"}))
	closeSession(t, p)
	checkDischargedOnce(t, h.p)
	h.balance(t, p.SessionID())
}
