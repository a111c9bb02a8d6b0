package otelclaudecode

import (
	"encoding/json"
	"fmt"
	"strings"
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
