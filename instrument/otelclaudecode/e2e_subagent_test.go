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
// stream-json output (no stream_event, no assistant line), yet the
// result's model_usage_since_last_result counts them. The invocation must
// then close incomplete (usage_missing), never final without them, with
// the exact difference on record; a background subagent is a job whose
// notification wakes a continuation like a shell's.
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
	id := r.Result.InvocationID
	// The calls the stream shows, plus the usage-less span that records
	// what it did not show. The CLI may read the subagent's notification
	// in a request of the prompt's own turn, before the prompt's result.
	after := h.afterFirstResult(t)
	w := want{status: contract.StatusIncomplete, unreported: 1, reasons: []string{contract.ReasonUsageMissing + ":chat unreported"}}
	for _, a := range h.router.Answered() {
		if a.Rule == "child" {
			continue
		}
		w.calls = append(w.calls, a.Seq)
		if after[a.Seq] {
			w.after = append(w.after, a.Seq)
		}
	}
	if background {
		// The notification wakes a continuation (with or without calls),
		// unless the CLI reads it in the request after the launch.
		w.jobs, w.continuations = 1, min(sum.Usage.Continuations, 1)
	}
	checkSummary(t, "the calls the stream shows", sum, w)
	if t.Failed() {
		t.Logf("model calls %v; after the first result %v", h.router.Labels(), after)
	}
	child, n := h.router.Sum("child")
	unreported := h.p.spans("chat unreported", id)
	if n != 1 || len(unreported) != 1 {
		t.Fatalf("%d child requests, unreported spans %v", n, unreported)
	}
	raw := []int64{int64(child.InputTokens - child.CacheReadTokens - child.CacheCreationTokens), int64(child.CacheReadTokens), int64(child.CacheCreationTokens), int64(child.OutputTokens)}
	var got []int64
	for _, k := range []string{".input_tokens", ".cache_read_input_tokens", ".cache_creation_input_tokens", ".output_tokens"} {
		got = append(got, attr(unreported[0], AttrUnexplainedPrefix+k).AsInt64())
	}
	if fmt.Sprint(got) != fmt.Sprint(raw) {
		t.Errorf("unexplained usage %v, want the child request's %v", got, raw)
	}
	jobs := h.p.spans("background subagent", id)
	if background {
		if len(jobs) != 1 {
			t.Errorf("jobs %v, usage %+v", jobs, sum.Usage)
		}
		checkDischargedOnce(t, h.p)
	} else if len(jobs) != 0 {
		t.Errorf("a foreground subagent made jobs %v", jobs)
	}
}
