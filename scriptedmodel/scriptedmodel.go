// Package scriptedmodel is a scripted stand-in for the model APIs the
// instrumentation wraps (OpenAI chat completions, responses and embeddings;
// Anthropic messages). No model can be reached from tests, so every test that
// needs a model endpoint talks to this server instead: each request is
// answered by the next scripted Step (or by a responder function that looks
// at the request), with bodies and server-sent events shaped like the real
// APIs', and every request is logged for assertions.
package scriptedmodel

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
)

// Usage is the token usage a step reports, in the GenAI semantic-convention
// sense: InputTokens includes the cache-read and cache-creation tokens,
// OutputTokens includes the reasoning tokens. Each API renders it in its own
// shape (Anthropic's input_tokens, for example, excludes cache tokens).
type Usage struct {
	InputTokens         int
	OutputTokens        int
	CacheReadTokens     int
	CacheCreationTokens int
	ReasoningTokens     int
}

// ToolCall is one tool call the model asks for.
type ToolCall struct {
	// ID is the call id; a deterministic one is generated when empty.
	ID string
	// Name is the tool's name.
	Name string
	// Arguments is the JSON text of the arguments ("{}" when empty).
	Arguments string
	// Namespace is the tool's namespace in a Responses function_call
	// (Codex's "collaboration" tools), when it has one.
	Namespace string
}

// Step is the scripted answer to one request.
type Step struct {
	// Text is the assistant's text answer (may be empty when ToolCalls is not).
	Text string
	// ToolCalls are the tool calls the model asks for.
	ToolCalls []ToolCall
	// Usage is the usage the response reports; see OmitUsage.
	Usage Usage
	// OmitUsage leaves usage out of the response entirely.
	OmitUsage bool
	// Model overrides the response model (default: the request's model).
	Model string
	// ID overrides the response id (default: generated per request).
	ID string
	// FinishReason overrides the finish/stop reason (default: derived from
	// ToolCalls).
	FinishReason string
	// Status, when 400 or more, answers with this HTTP status and an error
	// body shaped like the API's instead of a completion.
	Status int
	// ErrorMessage is the message of the error body (a default is used).
	ErrorMessage string
	// Header holds extra response headers (for example Retry-After-Ms).
	Header http.Header
	// CutAfter, when positive on a streaming request, aborts the connection
	// after that many events were written, without the terminating event.
	CutAfter int
	// Embeddings is the number of vectors an embeddings request returns
	// (default: one per input).
	Embeddings int
	// MinimalStream, on a streamed Responses request, sends only what
	// Codex needs: one response.output_item.done per output item, then
	// response.completed whose response holds only id and usage.
	MinimalStream bool
}

// Request is one request the server received.
type Request struct {
	// Seq is the request's 1-based arrival number.
	Seq int
	// Method and Path are the HTTP method and URL path.
	Method string
	Path   string
	// Header is a copy of the request headers.
	Header http.Header
	// Raw is the request body as received.
	Raw []byte
	// Body is Raw decoded as JSON (nil when it is not a JSON object).
	Body map[string]any
	// Model is the body's "model" field.
	Model string
	// Stream is the body's "stream" field.
	Stream bool
	// IncludeUsage is the body's "stream_options.include_usage" field.
	IncludeUsage bool
}

// LastUserText returns the text of the last user message or input item of
// the request, for responders that route by content. It understands chat
// completions "messages", Anthropic "messages" (string or text blocks) and
// Responses "input" (string or message items).
func (r Request) LastUserText() string {
	if s, ok := r.Body["input"].(string); ok {
		return s
	}
	var items []any
	if m, ok := r.Body["messages"].([]any); ok {
		items = m
	} else if in, ok := r.Body["input"].([]any); ok {
		items = in
	}
	for i := len(items) - 1; i >= 0; i-- {
		m, ok := items[i].(map[string]any)
		if !ok || m["role"] != "user" {
			continue
		}
		return contentText(m["content"])
	}
	return ""
}

func contentText(c any) string {
	switch v := c.(type) {
	case string:
		return v
	case []any:
		out := ""
		for _, b := range v {
			if bm, ok := b.(map[string]any); ok {
				if t, ok := bm["text"].(string); ok {
					out += t
				} else if t, ok := bm["content"].(string); ok {
					out += t
				}
			}
		}
		return out
	}
	return ""
}

// Options configure a Server.
type Options struct {
	// Steps is the initial FIFO script; more can be added with Enqueue.
	Steps []Step
	// Responder, when set, answers every request instead of the queue. It may
	// be called concurrently.
	Responder func(Request) Step
}

// Server is a scripted model server. Its methods are safe for concurrent use.
type Server struct {
	responder func(Request) Step
	handler   http.Handler

	// mu guards queue, requests, seq and ts.
	mu       sync.Mutex
	queue    []Step
	requests []Request
	seq      int
	ts       *httptest.Server
}

// New returns a server with the given script. Serve it with Start or mount
// Handler yourself.
func New(opts Options) *Server {
	s := &Server{responder: opts.Responder, queue: append([]Step(nil), opts.Steps...)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.serveChat)
	mux.HandleFunc("POST /v1/responses", s.serveResponses)
	mux.HandleFunc("POST /v1/embeddings", s.serveEmbeddings)
	mux.HandleFunc("POST /v1/messages", s.serveMessages)
	s.handler = mux
	return s
}

// Start serves on a free loopback port (127.0.0.1:0) and returns s.
func (s *Server) Start() *Server {
	ts := httptest.NewServer(s.handler)
	s.mu.Lock()
	s.ts = ts
	s.mu.Unlock()
	return s
}

// Handler returns the server's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// URL returns the root URL of a started server (http://127.0.0.1:port),
// which is the Anthropic SDK's base URL; OpenAIBaseURL adds "/v1/".
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ts == nil {
		return ""
	}
	return s.ts.URL
}

// OpenAIBaseURL returns the base URL to give the OpenAI SDK.
func (s *Server) OpenAIBaseURL() string { return s.URL() + "/v1/" }

// Close stops a started server and waits for its connections to finish.
func (s *Server) Close() {
	s.mu.Lock()
	ts := s.ts
	s.mu.Unlock()
	if ts != nil {
		ts.Close()
	}
}

// Enqueue appends steps to the FIFO script.
func (s *Server) Enqueue(steps ...Step) {
	s.mu.Lock()
	s.queue = append(s.queue, steps...)
	s.mu.Unlock()
}

// Pending returns the number of queued steps not yet used.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// Requests returns a copy of the log of received requests, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// errExhausted answers requests when the script has no step left.
var errExhausted = errors.New("scriptedmodel: script exhausted, no step for this request")

// next logs r and returns its step.
func (s *Server) next(w http.ResponseWriter, hr *http.Request) (Request, Step, bool) {
	raw, err := io.ReadAll(hr.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return Request{}, Step{}, false
	}
	r := Request{Method: hr.Method, Path: hr.URL.Path, Header: hr.Header.Clone(), Raw: raw}
	if json.Unmarshal(raw, &r.Body) == nil {
		r.Model, _ = r.Body["model"].(string)
		r.Stream, _ = r.Body["stream"].(bool)
		if so, ok := r.Body["stream_options"].(map[string]any); ok {
			r.IncludeUsage, _ = so["include_usage"].(bool)
		}
	}
	s.mu.Lock()
	s.seq++
	r.Seq = s.seq
	s.requests = append(s.requests, r)
	var st Step
	ok := true
	if s.responder == nil {
		if len(s.queue) == 0 {
			ok = false
		} else {
			st = s.queue[0]
			s.queue = s.queue[1:]
		}
	}
	s.mu.Unlock()
	if s.responder != nil {
		st = s.responder(r)
	}
	if !ok {
		st = Step{Status: http.StatusInternalServerError, ErrorMessage: errExhausted.Error()}
	}
	for k, vs := range st.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	return r, st, true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// sse writes server-sent events and implements CutAfter.
type sse struct {
	w       http.ResponseWriter
	f       http.Flusher
	n       int
	cut     int
	aborted bool
}

func newSSE(w http.ResponseWriter, cut int) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f, cut: cut}
}

// event writes one event (name may be empty) whose data is v marshalled, or
// v itself when it is a string.
func (e *sse) event(name string, v any) {
	if e.aborted {
		return
	}
	if e.cut > 0 && e.n >= e.cut {
		e.aborted = true
		if e.f != nil {
			e.f.Flush()
		}
		// Abort the connection without the terminating event or chunk.
		panic(http.ErrAbortHandler)
	}
	e.n++
	var data []byte
	if s, ok := v.(string); ok {
		data = []byte(s)
	} else {
		data, _ = json.Marshal(v)
	}
	if name != "" {
		fmt.Fprintf(e.w, "event: %s\n", name)
	}
	fmt.Fprintf(e.w, "data: %s\n\n", data)
	if e.f != nil {
		e.f.Flush()
	}
}

func (st Step) callID(prefix string, seq, i int) string {
	if st.ToolCalls[i].ID != "" {
		return st.ToolCalls[i].ID
	}
	return fmt.Sprintf("%s_%d_%d", prefix, seq, i)
}

func (st Step) args(i int) string {
	if st.ToolCalls[i].Arguments == "" {
		return "{}"
	}
	return st.ToolCalls[i].Arguments
}

func (st Step) model(r Request) string {
	if st.Model != "" {
		return st.Model
	}
	if r.Model != "" {
		return r.Model
	}
	return "scripted-model"
}

func (st Step) errorMessage() string {
	if st.ErrorMessage != "" {
		return st.ErrorMessage
	}
	return fmt.Sprintf("scripted error %d", st.Status)
}

// chunks splits text into a few pieces so streams carry several deltas.
func chunks(text string) []string {
	if text == "" {
		return nil
	}
	rs := []rune(text)
	var out []string
	for len(rs) > 0 {
		n := min(4, len(rs))
		out = append(out, string(rs[:n]))
		rs = rs[n:]
	}
	return out
}
