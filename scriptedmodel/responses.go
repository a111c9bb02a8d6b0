package scriptedmodel

import (
	"fmt"
	"net/http"
)

func (st Step) responsesUsage() map[string]any {
	u := st.Usage
	return map[string]any{
		"input_tokens":          u.InputTokens,
		"input_tokens_details":  map[string]any{"cached_tokens": u.CacheReadTokens},
		"output_tokens":         u.OutputTokens,
		"output_tokens_details": map[string]any{"reasoning_tokens": u.ReasoningTokens},
		"total_tokens":          u.InputTokens + u.OutputTokens,
	}
}

// responseObject renders the Responses API's response object with the
// given status and output items.
func (st Step) responseObject(id, model, status string, output []any, withUsage bool) map[string]any {
	o := map[string]any{
		"id": id, "object": "response", "created_at": createdAt, "status": status,
		"background": false, "error": nil, "incomplete_details": nil, "instructions": nil,
		"max_output_tokens": nil, "model": model, "output": output,
		"parallel_tool_calls": true, "previous_response_id": nil,
		"reasoning":    map[string]any{"effort": nil, "summary": nil},
		"service_tier": "default", "store": true, "temperature": 1.0,
		"text":        map[string]any{"format": map[string]any{"type": "text"}},
		"tool_choice": "auto", "tools": []any{}, "top_p": 1.0, "truncation": "disabled",
		"usage": nil, "user": nil, "metadata": map[string]any{},
	}
	if withUsage && !st.OmitUsage {
		o["usage"] = st.responsesUsage()
	}
	return o
}

func (st Step) responsesItems(seq int) (msg map[string]any, calls []map[string]any) {
	if st.Text != "" || len(st.ToolCalls) == 0 {
		msg = map[string]any{
			"type": "message", "id": fmt.Sprintf("msg_scripted_%d", seq), "status": "completed",
			"role": "assistant", "content": []any{map[string]any{
				"type": "output_text", "text": st.Text, "annotations": []any{}, "logprobs": []any{},
			}},
		}
	}
	for i, tc := range st.ToolCalls {
		c := map[string]any{
			"type": "function_call", "id": fmt.Sprintf("fc_scripted_%d_%d", seq, i),
			"call_id": st.callID("call", seq, i), "name": tc.Name, "arguments": st.args(i),
			"status": "completed",
		}
		if tc.Namespace != "" {
			c["namespace"] = tc.Namespace
		}
		calls = append(calls, c)
	}
	return msg, calls
}

func (s *Server) serveResponses(w http.ResponseWriter, hr *http.Request) {
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
		id = fmt.Sprintf("resp_scripted_%d", r.Seq)
	}
	model := st.model(r)
	msg, calls := st.responsesItems(r.Seq)
	var output []any
	if msg != nil {
		output = append(output, msg)
	}
	for _, c := range calls {
		output = append(output, c)
	}
	if !r.Stream {
		writeJSON(w, http.StatusOK, st.responseObject(id, model, "completed", output, true))
		return
	}

	e := newSSE(w, st.CutAfter)
	seqNo := 0
	if st.MinimalStream {
		for i, it := range output {
			e.event("response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": i, "item": it})
		}
		done := map[string]any{"id": id}
		if !st.OmitUsage {
			done["usage"] = st.responsesUsage()
		}
		e.event("response.completed", map[string]any{"type": "response.completed", "response": done})
		return
	}
	emit := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = seqNo
		seqNo++
		e.event(typ, fields)
	}
	emit("response.created", map[string]any{"response": st.responseObject(id, model, "in_progress", []any{}, false)})
	emit("response.in_progress", map[string]any{"response": st.responseObject(id, model, "in_progress", []any{}, false)})
	idx := 0
	if msg != nil {
		itemID := msg["id"]
		added := map[string]any{"type": "message", "id": itemID, "status": "in_progress", "role": "assistant", "content": []any{}}
		emit("response.output_item.added", map[string]any{"output_index": idx, "item": added})
		emit("response.content_part.added", map[string]any{"item_id": itemID, "output_index": idx, "content_index": 0,
			"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}, "logprobs": []any{}}})
		for _, piece := range chunks(st.Text) {
			emit("response.output_text.delta", map[string]any{"item_id": itemID, "output_index": idx, "content_index": 0, "delta": piece, "logprobs": []any{}})
		}
		emit("response.output_text.done", map[string]any{"item_id": itemID, "output_index": idx, "content_index": 0, "text": st.Text, "logprobs": []any{}})
		emit("response.content_part.done", map[string]any{"item_id": itemID, "output_index": idx, "content_index": 0,
			"part": msg["content"].([]any)[0]})
		emit("response.output_item.done", map[string]any{"output_index": idx, "item": msg})
		idx++
	}
	for _, c := range calls {
		added := map[string]any{}
		for k, v := range c {
			added[k] = v
		}
		added["arguments"], added["status"] = "", "in_progress"
		emit("response.output_item.added", map[string]any{"output_index": idx, "item": added})
		for _, piece := range chunks(c["arguments"].(string)) {
			emit("response.function_call_arguments.delta", map[string]any{"item_id": c["id"], "output_index": idx, "delta": piece})
		}
		emit("response.function_call_arguments.done", map[string]any{"item_id": c["id"], "output_index": idx, "arguments": c["arguments"]})
		emit("response.output_item.done", map[string]any{"output_index": idx, "item": c})
		idx++
	}
	emit("response.completed", map[string]any{"response": st.responseObject(id, model, "completed", output, true)})
}

func (s *Server) serveEmbeddings(w http.ResponseWriter, hr *http.Request) {
	r, st, ok := s.next(w, hr)
	if !ok {
		return
	}
	if st.Status >= 400 {
		openAIError(w, st)
		return
	}
	n := st.Embeddings
	if n == 0 {
		n = 1
		if in, ok := r.Body["input"].([]any); ok {
			n = len(in)
		}
	}
	data := make([]any, n)
	for i := range data {
		// A small deterministic vector; real ones are longer.
		data[i] = map[string]any{"object": "embedding", "index": i,
			"embedding": []float64{float64(i) * 0.5, 0.25, -0.125, float64(r.Seq) / 1000}}
	}
	body := map[string]any{"object": "list", "data": data, "model": st.model(r)}
	if !st.OmitUsage {
		body["usage"] = map[string]any{"prompt_tokens": st.Usage.InputTokens, "total_tokens": st.Usage.InputTokens}
	}
	writeJSON(w, http.StatusOK, body)
}
