package scriptedmodel_test

import (
	"encoding/json"
	"testing"

	"github.com/agentledger/agentledger/scriptedmodel"
)

// request builds a Request from an Anthropic messages body.
func request(t *testing.T, seq int, body string) scriptedmodel.Request {
	t.Helper()
	r := scriptedmodel.Request{Seq: seq, Raw: []byte(body)}
	if err := json.Unmarshal(r.Raw, &r.Body); err != nil {
		t.Fatal(err)
	}
	return r
}

// A notification turn of Claude Code: the conversation so far, then a
// user message whose text holds the notification.
const notificationBody = `{"messages":[
 {"role":"user","content":[{"type":"text","text":"BG start"}]},
 {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{}}]},
 {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"Command running in background with ID: b1.","is_error":false}]},
 {"role":"assistant","content":[{"type":"text","text":"launched"}]},
 {"role":"user","content":[{"type":"text","text":"<system-reminder>\n<task-notification>\n<task-id>b1</task-id>\n<tool-use-id>toolu_1</tool-use-id>\n<output-file>/tmp/x</output-file>\n<status>failed</status>\n<summary>Background command \"x\" failed (exit code 3)</summary>\n</task-notification>\n</system-reminder>"}]}]}`

func TestClaudeCodeContent(t *testing.T) {
	r := request(t, 1, notificationBody)
	if n := len(r.Blocks()); n != 5 {
		t.Errorf("%d blocks", n)
	}
	if nb := r.NewBlocks(); len(nb) != 1 || nb[0].Role != "user" {
		t.Errorf("new blocks %+v", nb)
	}
	if len(r.ToolResults()) != 0 {
		t.Error("tool results before the last assistant message counted as new")
	}
	ns := r.TaskNotifications()
	if len(ns) != 1 || ns[0] != (scriptedmodel.TaskNotification{TaskID: "b1", ToolUseID: "toolu_1", Status: "failed", Summary: `Background command "x" failed (exit code 3)`}) {
		t.Errorf("notifications %+v", ns)
	}
	tr := request(t, 2, `{"messages":[{"role":"user","content":"go"},{"role":"assistant","content":[{"type":"tool_use","id":"t9","name":"Bash","input":{}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"t9","content":[{"type":"text","text":"out"}],"is_error":true}]}]}`)
	if res := tr.ToolResults(); len(res) != 1 || res[0].ToolUseID != "t9" || !res[0].IsError || res[0].Text != "out" || tr.NewText() != "out" {
		t.Errorf("tool results %+v, new text %q", res, tr.NewText())
	}
	var in map[string]any
	call := scriptedmodel.BashCall("sleep 1", "Wait", true)
	if err := json.Unmarshal([]byte(call.Arguments), &in); err != nil || call.Name != "Bash" || in["run_in_background"] != true || in["command"] != "sleep 1" {
		t.Errorf("bash call %+v", call)
	}
	var fg map[string]any
	if err := json.Unmarshal([]byte(scriptedmodel.BashCall("ls", "List", false).Arguments), &fg); err != nil || len(fg) != 2 {
		t.Errorf("foreground bash call arguments %v", fg)
	}
}

func TestRouter(t *testing.T) {
	usage := func(seq int) scriptedmodel.Usage {
		return scriptedmodel.Usage{InputTokens: 10 * seq, OutputTokens: seq}
	}
	rt := scriptedmodel.NewRouter(usage,
		scriptedmodel.Rule{Name: "notified", Match: func(r scriptedmodel.Request) bool { return len(r.TaskNotifications()) > 0 },
			Answer: func(scriptedmodel.Request) scriptedmodel.Step {
				return scriptedmodel.Step{Text: "noted", Usage: scriptedmodel.Usage{InputTokens: 999}}
			}},
		scriptedmodel.Rule{Name: "broken", Match: func(r scriptedmodel.Request) bool { return r.Seq == 3 },
			Answer: func(scriptedmodel.Request) scriptedmodel.Step { return scriptedmodel.Step{Status: 500} }},
	)
	answered := rt.Answering("notified")
	st := rt.Respond(request(t, 1, notificationBody))
	select {
	case <-answered:
	default:
		t.Error("Answering not closed after the rule answered")
	}
	if st.Text != "noted" || st.Usage.InputTokens != 10 {
		t.Errorf("step %+v: the router's usage must replace the rule's", st)
	}
	if st := rt.Respond(request(t, 2, `{"messages":[{"role":"user","content":"hi"}]}`)); st.Text != "unrouted" {
		t.Errorf("unmatched request answered %+v", st)
	}
	if st := rt.Respond(request(t, 3, `{"messages":[{"role":"user","content":"hi"}]}`)); st.Status != 500 || st.Usage != (scriptedmodel.Usage{}) {
		t.Errorf("error step %+v", st)
	}
	if u, n := rt.Sum("notified", "unrouted", "broken"); n != 3 || u.InputTokens != 30 || u.OutputTokens != 3 {
		t.Errorf("sum %+v over %d", u, n)
	}
	if got := rt.Labels(); len(got) != 3 || got[0] != "1:notified" || got[1] != "2:unrouted" || got[2] != "3:broken" {
		t.Errorf("labels %v", got)
	}
	select {
	case <-rt.Answering("notified"):
	default:
		t.Error("Answering of a rule that already answered is not closed")
	}
	rt.SetRules()
	if len(rt.Answered()) != 0 {
		t.Error("SetRules kept the answered requests")
	}
}

// A request whose answer was decided by the previous rules (here held
// while the rules change) is not one of the new rules' answers: counting
// it would give the next scenario a request it never made.
func TestRouterAnswerOfEarlierRules(t *testing.T) {
	held, release := make(chan struct{}), make(chan struct{})
	rt := scriptedmodel.NewRouter(func(seq int) scriptedmodel.Usage { return scriptedmodel.Usage{InputTokens: seq} },
		scriptedmodel.Rule{Name: "held", Hold: func(scriptedmodel.Request) { close(held); <-release },
			Answer: func(scriptedmodel.Request) scriptedmodel.Step { return scriptedmodel.Step{Text: "late"} }})
	done := make(chan scriptedmodel.Step)
	go func() { done <- rt.Respond(request(t, 1, `{"messages":[{"role":"user","content":"hi"}]}`)) }()
	<-held
	rt.SetRules(scriptedmodel.Rule{Name: "next", Answer: func(scriptedmodel.Request) scriptedmodel.Step { return scriptedmodel.Step{} }})
	close(release)
	if st := <-done; st.Text != "late" || st.Usage.InputTokens != 1 {
		t.Errorf("the held request's answer %+v", st)
	}
	if got := rt.Labels(); len(got) != 0 {
		t.Errorf("answers of the new rules %v, want none", got)
	}
	rt.Respond(request(t, 2, `{"messages":[{"role":"user","content":"hi"}]}`))
	if got := rt.Labels(); len(got) != 1 || got[0] != "2:next" {
		t.Errorf("labels %v", got)
	}
}
