package otelclaudecode

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
)

// FuzzReadEvidence builds a Messages request from the fuzzer's bytes
// (messages of any role, text blocks, string contents, tool results whose
// content holds notifications and prompt-like text) and checks
// readEvidence against what the request carries by construction: the
// tool use ids of the tool results after the last assistant message, the
// task ids of the notifications in its text blocks only (never in a
// tool's output), and a prompt carried exactly when a text block is it or
// folds it. Arbitrary bytes as a body never panic and read the same twice.
func FuzzReadEvidence(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, []byte(`{"messages":[]}`))
	f.Add([]byte{3, 3, 1, 0, 2, 4, 0, 1}, []byte(`{"messages":[{"role":"user","content":7}]}`))
	f.Add([]byte{3, 0, 5, 1, 6, 2}, []byte(`{}`))
	f.Fuzz(func(t *testing.T, plan, raw []byte) {
		if len(plan) > 400 || len(raw) > 1<<16 {
			return
		}
		a, b := readEvidence(raw), readEvidence(raw)
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("not deterministic: %v vs %v", a, b)
		}
		const prompt = "PROMPT-X: do it"
		type blk = map[string]any
		var msgs []map[string]any
		var wantTools, wantNotes []string
		wantPrompt := false
		for i := 0; i+1 < len(plan); i += 2 {
			op, arg := plan[i]%8, int(plan[i+1])
			switch op {
			case 0: // an assistant message: what came before is no longer new
				msgs = append(msgs, map[string]any{"role": "assistant", "content": []blk{{"type": "text", "text": "ok"}}})
				wantTools, wantNotes, wantPrompt = nil, nil, false
				continue
			}
			role := []string{"user", "system"}[arg%2]
			var content any
			switch op {
			case 1:
				content = prompt
				wantPrompt = true
			case 2:
				content = []blk{{"type": "text", "text": foldedPrompt + prompt + "\n\nmore"}}
				wantPrompt = true
			case 3:
				content = []blk{{"type": "text", "text": "quoting " + prompt}}
			case 4:
				id := fmt.Sprintf("task%d", arg)
				content = []blk{{"type": "text", "text": "<task-notification>\n<task-id>" + id + "</task-id>\n</task-notification>"}}
				wantNotes = append(wantNotes, id)
			case 5:
				id := fmt.Sprintf("toolu_%d", arg)
				content = []blk{{"type": "tool_result", "tool_use_id": id,
					"content": "<task-notification><task-id>fake</task-id></task-notification> " + prompt}}
				wantTools = append(wantTools, id)
			case 6:
				id := fmt.Sprintf("toolu_%d", arg)
				content = []blk{{"type": "tool_result", "tool_use_id": id, "content": []blk{{"type": "text", "text": prompt}}}}
				wantTools = append(wantTools, id)
			case 7:
				content = []blk{{"type": "image"}, {"type": "text", "text": ""}}
			}
			msgs = append(msgs, map[string]any{"role": role, "content": content})
		}
		body, err := json.Marshal(map[string]any{"model": "m", "messages": msgs})
		if err != nil {
			t.Fatal(err)
		}
		ev := readEvidence(body)
		if !ev.parsed {
			t.Fatalf("a well-formed request not parsed: %s", body)
		}
		if !slices.Equal(ev.toolResults, wantTools) || !slices.Equal(ev.notes, wantNotes) {
			t.Errorf("tool results %v notes %v, want %v %v\n%s", ev.toolResults, ev.notes, wantTools, wantNotes, body)
		}
		if got := carries(ev.texts, prompt); got != wantPrompt {
			t.Errorf("carries the prompt: %v, want %v\n%s", got, wantPrompt, body)
		}
	})
}
