package scriptedmodel

import (
	"encoding/json"
	"fmt"
	"net/http"
)

func anthropicError(w http.ResponseWriter, st Step) {
	typ := "api_error"
	switch {
	case st.Status == http.StatusTooManyRequests:
		typ = "rate_limit_error"
	case st.Status == 529:
		typ = "overloaded_error"
	case st.Status == http.StatusNotFound:
		typ = "not_found_error"
	case st.Status < 500:
		typ = "invalid_request_error"
	}
	w.Header().Set("request-id", "req_scripted")
	writeJSON(w, st.Status, map[string]any{
		"type": "error", "error": map[string]any{"type": typ, "message": st.errorMessage()},
		"request_id": "req_scripted",
	})
}

// anthropicUsage renders u the Anthropic way: input_tokens excludes the
// cache-read and cache-creation tokens.
func (st Step) anthropicUsage(output int) map[string]any {
	u := st.Usage
	return map[string]any{
		"input_tokens":                u.InputTokens - u.CacheReadTokens - u.CacheCreationTokens,
		"cache_creation_input_tokens": u.CacheCreationTokens,
		"cache_read_input_tokens":     u.CacheReadTokens,
		"cache_creation":              map[string]any{"ephemeral_5m_input_tokens": u.CacheCreationTokens, "ephemeral_1h_input_tokens": 0},
		"output_tokens":               output,
		"output_tokens_details":       map[string]any{"thinking_tokens": min(output, u.ReasoningTokens)},
		"service_tier":                "standard",
		"server_tool_use":             nil,
	}
}

func (st Step) stopReason() string {
	if st.FinishReason != "" {
		return st.FinishReason
	}
	if len(st.ToolCalls) > 0 {
		return "tool_use"
	}
	return "end_turn"
}

func (st Step) anthropicBlocks(seq int) []map[string]any {
	var blocks []map[string]any
	if st.Text != "" || len(st.ToolCalls) == 0 {
		blocks = append(blocks, map[string]any{"type": "text", "text": st.Text, "citations": nil})
	}
	for i, tc := range st.ToolCalls {
		var input any = map[string]any{}
		_ = json.Unmarshal([]byte(st.args(i)), &input)
		blocks = append(blocks, map[string]any{"type": "tool_use", "id": st.callID("toolu", seq, i), "name": tc.Name, "input": input})
	}
	return blocks
}

func (s *Server) serveMessages(w http.ResponseWriter, hr *http.Request) {
	r, st, ok := s.next(w, hr)
	if !ok {
		return
	}
	if st.Status >= 400 {
		anthropicError(w, st)
		return
	}
	id := st.ID
	if id == "" {
		id = fmt.Sprintf("msg_scripted_%d", r.Seq)
	}
	model := st.model(r)
	blocks := st.anthropicBlocks(r.Seq)
	w.Header().Set("request-id", fmt.Sprintf("req_scripted_%d", r.Seq))
	if !r.Stream {
		msg := map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": model,
			"content": blocks, "stop_reason": st.stopReason(), "stop_sequence": nil,
		}
		if !st.OmitUsage {
			msg["usage"] = st.anthropicUsage(st.Usage.OutputTokens)
		}
		writeJSON(w, http.StatusOK, msg)
		return
	}

	e := newSSE(w, st.CutAfter)
	start := map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil,
	}
	if !st.OmitUsage {
		// Like the real API, message_start has the input usage and an
		// output count of 1; message_delta has the final counts.
		start["usage"] = st.anthropicUsage(min(1, st.Usage.OutputTokens))
	}
	e.event("message_start", map[string]any{"type": "message_start", "message": start})
	for i, b := range blocks {
		switch b["type"] {
		case "text":
			e.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "text", "text": "", "citations": nil}})
			if i == 0 {
				e.event("ping", map[string]any{"type": "ping"})
			}
			for _, piece := range chunks(st.Text) {
				e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "text_delta", "text": piece}})
			}
		case "tool_use":
			e.event("content_block_start", map[string]any{"type": "content_block_start", "index": i,
				"content_block": map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}})
			args, _ := json.Marshal(b["input"])
			for _, piece := range chunks(string(args)) {
				e.event("content_block_delta", map[string]any{"type": "content_block_delta", "index": i,
					"delta": map[string]any{"type": "input_json_delta", "partial_json": piece}})
			}
		}
		e.event("content_block_stop", map[string]any{"type": "content_block_stop", "index": i})
	}
	delta := map[string]any{
		"type":  "message_delta",
		"delta": map[string]any{"stop_reason": st.stopReason(), "stop_sequence": nil},
	}
	if !st.OmitUsage {
		u := st.Usage
		delta["usage"] = map[string]any{
			"input_tokens":                u.InputTokens - u.CacheReadTokens - u.CacheCreationTokens,
			"cache_creation_input_tokens": u.CacheCreationTokens,
			"cache_read_input_tokens":     u.CacheReadTokens,
			"output_tokens":               u.OutputTokens,
			"output_tokens_details":       map[string]any{"thinking_tokens": u.ReasoningTokens},
			"server_tool_use":             nil,
		}
	}
	e.event("message_delta", delta)
	e.event("message_stop", map[string]any{"type": "message_stop"})
}
