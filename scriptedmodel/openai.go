package scriptedmodel

import (
	"fmt"
	"net/http"
)

const createdAt = 1767225600 // fixed, so bodies are deterministic

func openAIError(w http.ResponseWriter, st Step) {
	typ, code := "server_error", "server_error"
	switch {
	case st.Status == http.StatusTooManyRequests:
		typ, code = "requests", "rate_limit_exceeded"
	case st.Status < 500:
		typ, code = "invalid_request_error", "invalid_request"
	}
	writeJSON(w, st.Status, map[string]any{"error": map[string]any{
		"message": st.errorMessage(), "type": typ, "param": nil, "code": code,
	}})
}

func (st Step) openAIUsage() map[string]any {
	u := st.Usage
	return map[string]any{
		"prompt_tokens":     u.InputTokens,
		"completion_tokens": u.OutputTokens,
		"total_tokens":      u.InputTokens + u.OutputTokens,
		"prompt_tokens_details": map[string]any{
			"cached_tokens": u.CacheReadTokens, "audio_tokens": 0,
		},
		"completion_tokens_details": map[string]any{
			"reasoning_tokens": u.ReasoningTokens, "audio_tokens": 0,
			"accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0,
		},
	}
}

func (st Step) chatFinish() string {
	if st.FinishReason != "" {
		return st.FinishReason
	}
	if len(st.ToolCalls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

func (s *Server) serveChat(w http.ResponseWriter, hr *http.Request) {
	r, st, ok := s.next(w, hr)
	if !ok {
		return
	}
	if st.Status >= 400 {
		openAIError(w, st)
		return
	}
	id := st.ID
	if id == "" {
		id = fmt.Sprintf("chatcmpl-scripted-%d", r.Seq)
	}
	model := st.model(r)
	if !r.Stream {
		msg := map[string]any{"role": "assistant", "content": nil, "refusal": nil, "annotations": []any{}}
		if st.Text != "" || len(st.ToolCalls) == 0 {
			msg["content"] = st.Text
		}
		if len(st.ToolCalls) > 0 {
			calls := make([]any, len(st.ToolCalls))
			for i, tc := range st.ToolCalls {
				calls[i] = map[string]any{
					"id": st.callID("call", r.Seq, i), "type": "function",
					"function": map[string]any{"name": tc.Name, "arguments": st.args(i)},
				}
			}
			msg["tool_calls"] = calls
		}
		body := map[string]any{
			"id": id, "object": "chat.completion", "created": createdAt, "model": model,
			"choices": []any{map[string]any{
				"index": 0, "message": msg, "logprobs": nil, "finish_reason": st.chatFinish(),
			}},
			"service_tier": "default", "system_fingerprint": "fp_scripted",
		}
		if !st.OmitUsage {
			body["usage"] = st.openAIUsage()
		}
		writeJSON(w, http.StatusOK, body)
		return
	}

	e := newSSE(w, st.CutAfter)
	chunk := func(delta map[string]any, finish any) map[string]any {
		c := map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": createdAt, "model": model,
			"service_tier": "default", "system_fingerprint": "fp_scripted",
			"choices": []any{map[string]any{
				"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish,
			}},
		}
		if r.IncludeUsage {
			c["usage"] = nil
		}
		return c
	}
	e.event("", chunk(map[string]any{"role": "assistant", "content": "", "refusal": nil}, nil))
	for _, piece := range chunks(st.Text) {
		e.event("", chunk(map[string]any{"content": piece}, nil))
	}
	for i, tc := range st.ToolCalls {
		e.event("", chunk(map[string]any{"tool_calls": []any{map[string]any{
			"index": i, "id": st.callID("call", r.Seq, i), "type": "function",
			"function": map[string]any{"name": tc.Name, "arguments": ""},
		}}}, nil))
		for _, piece := range chunks(st.args(i)) {
			e.event("", chunk(map[string]any{"tool_calls": []any{map[string]any{
				"index": i, "function": map[string]any{"arguments": piece},
			}}}, nil))
		}
	}
	e.event("", chunk(map[string]any{}, st.chatFinish()))
	if r.IncludeUsage && !st.OmitUsage {
		e.event("", map[string]any{
			"id": id, "object": "chat.completion.chunk", "created": createdAt, "model": model,
			"service_tier": "default", "system_fingerprint": "fp_scripted",
			"choices": []any{}, "usage": st.openAIUsage(),
		})
	}
	e.event("", "[DONE]")
}
