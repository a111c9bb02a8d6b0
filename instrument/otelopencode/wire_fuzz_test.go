package otelopencode

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// FuzzReadWireEvidence builds a chat completions request from the
// fuzzer's bytes (system, user, assistant and tool messages, string or
// part contents, with or without tools, the title agent's system prompt
// or another) and checks readWireEvidence against what the request
// carries by construction: the session headers, the tool call ids of the
// tool messages after the last assistant message, and a title request
// exactly when it has no tools and starts with the title agent's system
// prompt, with its last user message's text. Arbitrary bytes as a body
// never panic and read the same twice.
func FuzzReadWireEvidence(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7}, false, []byte(`{"messages":[]}`))
	f.Add([]byte{6, 0, 1, 1}, true, []byte(`{"messages":[{"role":"tool","tool_call_id":7}]}`))
	f.Fuzz(func(t *testing.T, plan []byte, tools bool, raw []byte) {
		if len(plan) > 300 || len(raw) > 1<<16 {
			return
		}
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", nil)
		req.Header.Set(headerSessionID, "ses_x")
		req.Header.Set(headerParentSessionID, "ses_p")
		if a, b := readWireEvidence(req, raw), readWireEvidence(req, raw); fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("not deterministic: %+v vs %+v", a, b)
		}
		var msgs []map[string]any
		var wantTools []string
		titleSystem := false
		lastUser, lastIsUser := "", false
		for i := 0; i+1 < len(plan); i += 2 {
			op, arg := plan[i]%7, int(plan[i+1])
			var m map[string]any
			switch op {
			case 0:
				m = map[string]any{"role": "assistant", "content": "ok"}
				wantTools = nil
			case 1, 2:
				text := fmt.Sprintf("prompt %d", arg)
				m = map[string]any{"role": "user", "content": text}
				if op == 2 {
					m["content"] = []map[string]any{{"type": "text", "text": text}}
				}
			case 3:
				id := fmt.Sprintf("call_%d", arg)
				m = map[string]any{"role": "tool", "tool_call_id": id, "content": "out"}
				wantTools = append([]string{id}, wantTools...)
			case 4, 5:
				text := "You are a helper."
				if op == 5 {
					text = titleSystemPrompt + " Write a title."
				}
				m = map[string]any{"role": "system", "content": text}
			case 6:
				m = map[string]any{"role": "tool", "content": "no id"}
			}
			if len(msgs) == 0 {
				titleSystem = op == 5
			}
			lastIsUser = op == 1 || op == 2
			if lastIsUser {
				lastUser = fmt.Sprintf("prompt %d", arg)
			}
			msgs = append(msgs, m)
		}
		body := map[string]any{"model": "m", "messages": msgs}
		if tools {
			body["tools"] = []map[string]any{{"type": "function"}}
		}
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		req = httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(b))
		req.Header.Set(headerSessionID, "ses_x")
		req.Header.Set(headerParentSessionID, "ses_p")
		ev := readWireEvidence(req, b)
		if ev.session != "ses_x" || ev.parent != "ses_p" {
			t.Errorf("session %q parent %q", ev.session, ev.parent)
		}
		// Tool results are read from the last message back to the last
		// assistant one.
		if !slices.Equal(ev.toolResults, wantTools) {
			t.Errorf("tool results %v, want %v\n%s", ev.toolResults, wantTools, b)
		}
		wantTitle := !tools && titleSystem && len(msgs) > 0
		if ev.title != wantTitle {
			t.Errorf("title %v, want %v\n%s", ev.title, wantTitle, b)
		}
		if wantTitle && lastIsUser && ev.lastUser != lastUser {
			t.Errorf("title's last user text %q, want %q", ev.lastUser, lastUser)
		}
		if wantTitle && !lastIsUser && ev.lastUser != "" {
			t.Errorf("title's last user text %q with no user message last", ev.lastUser)
		}
	})
}
