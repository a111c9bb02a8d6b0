package main

import (
	"testing"

	"github.com/agentledger/agentledger/scriptedmodel"
)

func request(msgs ...map[string]any) scriptedmodel.Request {
	items := make([]any, len(msgs))
	for i, m := range msgs {
		items[i] = m
	}
	return scriptedmodel.Request{Body: map[string]any{"messages": items}}
}

func msg(role string, content any) map[string]any {
	return map[string]any{"role": role, "content": content}
}

func TestRespondRoutes(t *testing.T) {
	sys := msg("system", "you are opencode")
	cases := []struct {
		name string
		r    scriptedmodel.Request
		tool string
		text string
	}{
		{"launch", request(sys, msg("user", "background: count")), "task", ""},
		{"launch with parts", request(sys, msg("user", []any{map[string]any{"type": "text", "text": "Background please"}})), "task", ""},
		{"after the tool", request(sys, msg("user", "background: count"), msg("assistant", ""), msg("tool", "started")), "", "I started that in the background."},
		{"subagent", request(sys, msg("user", "[subagent] do the work")), "", "The subagent finished its work."},
		{"continuation", request(sys, msg("user", "background: count"), msg("assistant", "ok"), msg("user", `<task id="ses_1" state="completed">`)), "", "The background job finished; here is its result."},
		{"plain", request(sys, msg("user", "hello")), "", "Hello from the scripted model."},
	}
	for _, c := range cases {
		st := respond(c.r)
		var tool string
		if len(st.ToolCalls) == 1 {
			tool = st.ToolCalls[0].Name
		}
		if tool != c.tool || st.Text != c.text {
			t.Errorf("%s: tool %q text %q", c.name, tool, st.Text)
		}
	}
}
