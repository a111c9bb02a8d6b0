package otelcodex

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// FuzzReadSubagentMeta: whatever the header holds, the reader never
// panics, calls a request a subagent's only when the header is a JSON
// object naming a parent turn or the subagent thread source, and reads
// its fields as the header says them.
func FuzzReadSubagentMeta(f *testing.F) {
	f.Add(`{"agent_name":"/root/task_1","thread_id":"c","turn_id":"ct","parent_thread_id":"p","parent_turn_id":"t","root_turn_id":"t","thread_source":"subagent","subagent_kind":"thread_spawn"}`)
	f.Add(`{"agent_name":"/root","thread_id":"p","turn_id":"t","root_turn_id":"t"}`)
	f.Add(`{"thread_source":"subagent","parent_turn_id":3}`)
	f.Add(`[`)
	f.Fuzz(func(t *testing.T, header string) {
		meta, ok := readSubagentMeta(header)
		var m struct {
			AgentName    string `json:"agent_name"`
			TurnID       string `json:"turn_id"`
			ParentTurnID string `json:"parent_turn_id"`
			RootTurnID   string `json:"root_turn_id"`
			ThreadSource string `json:"thread_source"`
		}
		if json.Unmarshal([]byte(header), &m) != nil {
			if ok {
				t.Fatalf("a subagent's from an unreadable header: %+v", meta)
			}
			return
		}
		if want := m.ParentTurnID != "" || m.ThreadSource == "subagent"; ok != want {
			t.Fatalf("ok %v, want %v", ok, want)
		}
		if ok && (meta.agent != m.AgentName || meta.turnID != m.TurnID || meta.parentTurnID != m.ParentTurnID || meta.rootTurnID != m.RootTurnID) {
			t.Fatalf("read %+v from %s", meta, header)
		}
	})
}

// FuzzFinalAnswers: whatever a request body holds, the reader never
// panics and names only authors of FINAL_ANSWER agent messages the body
// holds.
func FuzzFinalAnswers(f *testing.F) {
	f.Add([]byte(`{"input":[{"type":"function_call","call_id":"c","name":"wait_agent"},{"type":"function_call_output","call_id":"c","output":"{}"},{"type":"agent_message","author":"/root/task_1","recipient":"/root","content":[{"type":"input_text","text":"Message Type: FINAL_ANSWER\nPayload:\nok"}]}]}`))
	f.Add([]byte(`{"input":[{"type":"agent_message","author":"/root","content":[{"type":"input_text","text":"Message Type: NEW_TASK\n"}]}]}`))
	f.Add([]byte(`{"input":"text"}`))
	f.Add([]byte(`{"input":[{"type":"agent_message","author":3}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		got := finalAnswers(body)
		if len(got) == 0 {
			return
		}
		var req struct {
			Input []struct {
				Type    string `json:"type"`
				Author  string `json:"author"`
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"input"`
		}
		if json.Unmarshal(body, &req) != nil {
			t.Fatalf("answers %v from an unreadable body", got)
		}
		var authors []string
		for _, it := range req.Input {
			if it.Type == "agent_message" && len(it.Content) > 0 && strings.HasPrefix(it.Content[0].Text, "Message Type: FINAL_ANSWER\n") {
				authors = append(authors, it.Author)
			}
		}
		for _, a := range got {
			if a == "" || !slices.Contains(authors, a) {
				t.Fatalf("answer of %q is not a FINAL_ANSWER author of the body (%v)", a, authors)
			}
		}
	})
}
