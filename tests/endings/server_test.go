package endings_test

import (
	"fmt"
	"io"
	"net/http"
	"sync"
)

// api is one of the model APIs the wrappers trace.
type api string

const (
	anthropicMessages api = "anthropic_messages"
	openaiChat        api = "openai_chat"
	openaiResponses   api = "openai_responses"
)

// usage is what the server served for a call, in the GenAI sense (cache
// tokens counted in input, reasoning in output).
type usage struct {
	Input, Output, CacheRead, CacheCreation, Reasoning int64
}

// behaviour is what the server does with one request.
type behaviour struct {
	api    api
	stream bool
	// scenario names what the server (and the caller) do.
	scenario string
	usage    usage

	// mu guards attempts and received.
	mu       sync.Mutex
	attempts int
	// received is closed when a request that the server holds arrived.
	received chan struct{}
	// release ends a held request.
	release chan struct{}
}

// handler serves b.
func (b *behaviour) handler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	b.mu.Lock()
	b.attempts++
	attempt := b.attempts
	b.mu.Unlock()
	switch b.scenario {
	case "retried":
		if attempt == 1 {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After-Ms", "1")
			w.WriteHeader(529)
			_, _ = io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
			return
		}
	case "error_status":
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}`)
		return
	case "no_response":
		hijackClose(w)
		return
	case "timeout", "caller_closed_waiting":
		close(b.received)
		select {
		case <-r.Context().Done():
		case <-b.release:
		}
		return
	}
	events, body := b.response()
	if !b.stream {
		w.Header().Set("Content-Type", "application/json")
		if b.scenario == "cut" {
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
			_, _ = io.WriteString(w, body[:len(body)/2])
			http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		}
		_, _ = io.WriteString(w, body)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for i, ev := range events {
		if b.scenario == "cut" && i == len(events)/2 {
			http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		}
		_, _ = io.WriteString(w, ev)
		http.NewResponseController(w).Flush()
	}
}

// hijackClose closes the connection without answering.
func hijackClose(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	_ = conn.Close()
}

func sse(event, data string) string {
	if event == "" {
		return "data: " + data + "\n\n"
	}
	return "event: " + event + "\ndata: " + data + "\n\n"
}

// response returns the streamed events and the plain body of b's API for
// its scenario: complete, with an error in place of its end
// (error_event), or without usage (no_usage).
func (b *behaviour) response() (events []string, body string) {
	u := b.usage
	withUsage := b.scenario != "no_usage"
	errored := b.scenario == "error_event"
	switch b.api {
	case anthropicMessages:
		raw := u.Input - u.CacheRead - u.CacheCreation
		usageJSON := fmt.Sprintf(`{"input_tokens":%d,"output_tokens":%d,"cache_read_input_tokens":%d,"cache_creation_input_tokens":%d}`,
			raw, u.Output, u.CacheRead, u.CacheCreation)
		startUsage := fmt.Sprintf(`{"input_tokens":%d,"output_tokens":1,"cache_read_input_tokens":%d,"cache_creation_input_tokens":%d}`,
			raw, u.CacheRead, u.CacheCreation)
		if !withUsage {
			usageJSON, startUsage = "null", "null"
		}
		body = `{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"hello"}],"stop_reason":"end_turn","stop_sequence":null,"usage":` + usageJSON + `}`
		events = []string{
			sse("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"stop_sequence":null,"usage":`+startUsage+`}}`),
			sse("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
			sse("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hello"}}`),
		}
		if errored {
			return append(events, sse("error", `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)), body
		}
		deltaUsage := fmt.Sprintf(`{"output_tokens":%d}`, u.Output)
		if !withUsage {
			deltaUsage = "null"
		}
		events = append(events,
			sse("content_block_stop", `{"type":"content_block_stop","index":0}`),
			sse("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":`+deltaUsage+`}`),
			sse("message_stop", `{"type":"message_stop"}`))
		return events, body
	case openaiChat:
		usageJSON := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d},"completion_tokens_details":{"reasoning_tokens":%d}}`,
			u.Input, u.Output, u.Input+u.Output, u.CacheRead, u.Reasoning)
		body = `{"id":"c1","object":"chat.completion","created":1,"model":"gpt-test","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}]`
		if withUsage {
			body += `,"usage":` + usageJSON
		}
		body += `}`
		chunk := func(rest string) string {
			return sse("", `{"id":"c1","object":"chat.completion.chunk","created":1,"model":"gpt-test",`+rest+`}`)
		}
		events = []string{chunk(`"choices":[{"index":0,"delta":{"role":"assistant","content":"hello"},"finish_reason":null}]`)}
		if errored {
			return append(events, sse("", `{"error":{"message":"boom","type":"server_error"}}`)), body
		}
		events = append(events, chunk(`"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]`))
		if withUsage {
			events = append(events, chunk(`"choices":[],"usage":`+usageJSON))
		}
		return append(events, sse("", "[DONE]")), body
	default:
		usageJSON := fmt.Sprintf(`{"input_tokens":%d,"output_tokens":%d,"total_tokens":%d,"input_tokens_details":{"cached_tokens":%d},"output_tokens_details":{"reasoning_tokens":%d}}`,
			u.Input, u.Output, u.Input+u.Output, u.CacheRead, u.Reasoning)
		status, extra := "completed", ""
		if withUsage {
			extra = `,"usage":` + usageJSON
		}
		if errored {
			status, extra = "failed", `,"error":{"code":"server_error","message":"boom"}`
		}
		obj := `{"id":"resp_1","object":"response","created_at":1,"status":"` + status + `","model":"gpt-test","output":[{"type":"message","id":"m1","status":"completed","role":"assistant","content":[{"type":"output_text","text":"hello","annotations":[]}]}]` + extra + `}`
		events = []string{
			sse("response.created", `{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","created_at":1,"status":"in_progress","model":"gpt-test","output":[]}}`),
			sse("response.output_text.delta", `{"type":"response.output_text.delta","sequence_number":1,"item_id":"m1","output_index":0,"content_index":0,"delta":"hello"}`),
		}
		if errored {
			return append(events, sse("error", `{"type":"error","sequence_number":2,"code":"server_error","message":"boom","param":null}`)), obj
		}
		return append(events, sse("response.completed", `{"type":"response.completed","sequence_number":2,"response":`+obj+`}`)), obj
	}
}
