package otelclaudecode

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// agentCall is a call of Claude Code's Agent tool, which starts a
// subagent (in the background unless background is false).
func agentCall(prompt string, background bool) scriptedmodel.ToolCall {
	b, _ := json.Marshal(map[string]any{"description": "Do the child work", "prompt": prompt, "subagent_type": "claude", "run_in_background": background})
	return scriptedmodel.ToolCall{Name: "Agent", Arguments: string(b)}
}

// testSubagents: a subagent's model requests do not appear in the CLI's
// stream-json output, but they go through the model-wire proxy with the
// subagent's task id (X-Claude-Code-Agent-Id): the invocation is final
// with every request the scripted model answered, the subagent's
// included; a background subagent is a job whose notification wakes a
// continuation like a shell's (or is read in the prompt's own turn).
func testSubagents(t *testing.T, h *harness, background bool) {
	marker := fmt.Sprintf("AGENT-%v", background)
	rules := []scriptedmodel.Rule{
		rule("child", func(r scriptedmodel.Request) bool {
			return strings.Contains(r.NewText(), "CHILD") && len(r.ToolResults()) == 0
		}, says("child result")),
		rule("launch", asks(marker), calls(agentCall("CHILD please work", background))),
		// The subagent may end before the request after its launch: the
		// CLI then puts its notification into that request.
		rule("after-launch", func(r scriptedmodel.Request) bool { return len(r.ToolResults()) > 0 }, says("launched")),
		rule("continuation", hasNotification, says("noted")),
	}
	h.router.SetRules(rules...)
	name := "subagent_foreground"
	if background {
		name = "subagent_background"
	}
	r := h.run(t, testCtx(t), h.client(t, name), marker+": delegate")
	sum := h.wait(t, r)
	after := h.afterFirstResult(t)
	w := want{status: contract.StatusFinal}
	for _, a := range h.router.Answered() {
		w.calls = append(w.calls, a.Seq)
		if after[a.Seq] {
			w.after = append(w.after, a.Seq)
		}
	}
	if background {
		w.jobs, w.continuations = 1, min(sum.Usage.Continuations, 1)
	}
	checkSummary(t, "every request the model answered", sum, w)
	if t.Failed() {
		t.Logf("model calls %v; after the first result %v", h.router.Labels(), after)
	}
	if _, n := h.router.Sum("child"); n != 1 {
		t.Fatalf("%d child requests", n)
	}
	jobs := h.p.spans("background subagent", r.Result.InvocationID)
	if background {
		if len(jobs) != 1 {
			t.Errorf("jobs %v, usage %+v", jobs, sum.Usage)
		}
		checkDischargedOnce(t, h.p)
	} else if len(jobs) != 0 {
		t.Errorf("a foreground subagent made jobs %v", jobs)
	}
	h.balance(t, r.Process.SessionID())
}

// fromSubagent matches a request a subagent sent (its task id in
// X-Claude-Code-Agent-Id).
func fromSubagent(r scriptedmodel.Request) bool { return r.Header.Get(headerAgentID) != "" }

// testNestedShell (issue 32, observation 2): prompt A's background
// subagent starts a background shell of its own and ends its run; when
// the shell ends, the CLI runs the subagent again under the same task id
// to read the shell's notification, and then notifies the main session
// again. Every request of the chain is A's, and A is final only after
// the last of them. late opens the shell's gate only once the main
// session has read the subagent's first notification (the job of its
// first run is then settled and forgotten); else at once, racing it.
func testNestedShell(t *testing.T, h *harness, late bool) {
	g := newGate(t, "nested-shell")
	subWaiting := make(chan struct{})
	var once sync.Once
	h.router.SetRules(
		rule("sub-cont", func(r scriptedmodel.Request) bool { return fromSubagent(r) && hasNotification(r) }, says("sub done")),
		scriptedmodel.Rule{Name: "sub-after-launch", Match: func(r scriptedmodel.Request) bool {
			return fromSubagent(r) && hasToolResult(r) && strings.Contains(r.NewText(), "running in background")
		}, Answer: func(scriptedmodel.Request) scriptedmodel.Step {
			once.Do(func() { close(subWaiting) })
			return says("sub waiting")
		}},
		rule("sub-launch", func(r scriptedmodel.Request) bool {
			return fromSubagent(r) && strings.Contains(r.NewText(), "NESTWORK") && len(r.ToolResults()) == 0
		}, calls(scriptedmodel.BashCall(g.command("subshell", 0), "Sub job", true))),
		rule("launch-A", asks("NEST-A"), calls(agentCall("NESTWORK: start your own background job", true))),
		rule("after-launch-A", func(r scriptedmodel.Request) bool {
			return !fromSubagent(r) && len(r.ToolResults()) > 0 && strings.Contains(r.NewText(), "Async agent launched")
		}, says("A launched")),
		rule("cont-A", func(r scriptedmodel.Request) bool { return !fromSubagent(r) && hasNotification(r) }, says("A noted")),
	)
	p := h.start(t, h.client(t, "nested_shell"))
	a := h.prompt(t, p, "NEST-A: delegate in the background")
	recv(t, "the subagent's wait for its shell", subWaiting)
	if late {
		waitUntil(t, "the main session's turn for the subagent's first run", func() bool {
			_, n := h.router.Sum("cont-A")
			return n > 0
		})
	}
	g.open(t)
	waitUntil(t, "the subagent's second run", func() bool {
		_, n := h.router.Sum("sub-cont")
		return n > 0
	})
	sa := h.waitID(t, p, a.InvocationID)
	t.Logf("requests %v; A %s %+v", h.router.Labels(), sa.Status, sa.Usage)
	closeSession(t, p)
	wantStatus(t, "A", sa, contract.StatusFinal)
	var rules []string
	for _, x := range h.router.Answered() {
		rules = append(rules, x.Rule)
	}
	all := h.want(rules, nil)
	if got := sa.Usage; got.InputTokens != all.InputTokens || got.OutputTokens != all.OutputTokens || got.ModelCalls != all.ModelCalls {
		t.Errorf("A usage %+v, want every request's %+v", got, all)
	}
	for _, sp := range h.p.spans("", "") {
		if r := attr(sp, contract.AttrUnattributed).AsString(); r != "" {
			t.Errorf("unattributed invocation (%s): %s", r, sp.Name())
		}
	}
	h.balance(t, p.SessionID())
}

// firstUserText is the text of a request's first user message: the task
// a subagent's conversation started with.
func firstUserText(r scriptedmodel.Request) string {
	msgs, _ := r.Body["messages"].([]any)
	for _, x := range msgs {
		m, _ := x.(map[string]any)
		if m["role"] != "user" {
			continue
		}
		switch c := m["content"].(type) {
		case string:
			return c
		case []any:
			var b strings.Builder
			for _, y := range c {
				if blk, ok := y.(map[string]any); ok && blk["type"] == "text" {
					s, _ := blk["text"].(string)
					b.WriteString(s)
				}
			}
			return b.String()
		}
	}
	return ""
}

// conversation matches a subagent's requests whose task starts with
// marker.
func conversation(marker string, more func(scriptedmodel.Request) bool) func(scriptedmodel.Request) bool {
	return func(r scriptedmodel.Request) bool {
		return fromSubagent(r) && strings.Contains(firstUserText(r), marker) && more(r)
	}
}

// testThreeLevels (issue 32): prompt A's background subagent starts a
// background subagent of its own, which starts a background shell. Every
// request of the chain is A's, and A is final only after the last.
func testThreeLevels(t *testing.T, h *harness) {
	g := newGate(t, "three-levels")
	any := func(scriptedmodel.Request) bool { return true }
	h.router.SetRules(
		rule("s2-cont", conversation("LEVEL2", hasNotification), says("s2 done")),
		rule("s2-after", conversation("LEVEL2", hasToolResult), says("s2 waiting")),
		rule("s2-launch", conversation("LEVEL2", any), calls(scriptedmodel.BashCall(g.command("deep", 0), "Deep job", true))),
		rule("s1-cont", conversation("LEVEL1", hasNotification), says("s1 done")),
		rule("s1-after", conversation("LEVEL1", func(r scriptedmodel.Request) bool { return len(r.ToolResults()) > 0 }), says("s1 waiting")),
		rule("s1-launch", conversation("LEVEL1", any), calls(agentCall("LEVEL2: start a background job", true))),
		rule("launch-A", asks("NEST3-A"), calls(agentCall("LEVEL1: delegate in the background", true))),
		rule("after-launch-A", func(r scriptedmodel.Request) bool { return !fromSubagent(r) && len(r.ToolResults()) > 0 }, says("A launched")),
		rule("cont-A", func(r scriptedmodel.Request) bool { return !fromSubagent(r) && hasNotification(r) }, says("A noted")),
	)
	p := h.start(t, h.client(t, "three_levels"))
	a := h.prompt(t, p, "NEST3-A: delegate in the background")
	recv(t, "the deepest subagent's wait for its shell", h.router.Answering("s2-after"))
	g.open(t)
	waitUntil(t, "the deepest subagent's second run", func() bool {
		_, n := h.router.Sum("s2-cont")
		return n > 0
	})
	sa := h.waitID(t, p, a.InvocationID)
	t.Logf("requests %v; A %s %+v", h.router.Labels(), sa.Status, sa.Usage)
	closeSession(t, p)
	wantStatus(t, "A", sa, contract.StatusFinal)
	var rules []string
	for _, x := range h.router.Answered() {
		rules = append(rules, x.Rule)
	}
	all := h.want(rules, nil)
	if got := sa.Usage; got.InputTokens != all.InputTokens || got.OutputTokens != all.OutputTokens || got.ModelCalls != all.ModelCalls {
		t.Errorf("A usage %+v, want every request's %+v", got, all)
	}
	for _, sp := range h.p.spans("", "") {
		if r := attr(sp, contract.AttrUnattributed).AsString(); r != "" {
			t.Errorf("unattributed invocation (%s): %s", r, sp.Name())
		}
	}
	h.balance(t, p.SessionID())
}
