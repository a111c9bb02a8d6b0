// Package openaiwire reads the OpenAI-shaped HTTP API for the model-call
// spans of genaicall: which requests are model calls (chat completions,
// responses, embeddings), what a request body says (model, stream, limits)
// and the usage, finish reasons and tool calls of a response, streamed or
// not. otelopenai (the SDK middleware) and otelopencode (the model-wire
// proxy) share it, so that there is one OpenAI usage parser.
package openaiwire

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/genaicall"
)

// Operation is an API endpoint whose requests are model calls.
type Operation int

const (
	// Chat is POST .../chat/completions.
	Chat Operation = iota + 1
	// Responses is POST .../responses.
	Responses
	// Embeddings is POST .../embeddings.
	Embeddings
)

// Classify tells which model-call endpoint req goes to: a POST whose path
// ends in one of them (a base URL with a prefix, a gateway, is fine).
func Classify(req *http.Request) (Operation, bool) {
	if req.Method != http.MethodPost {
		return 0, false
	}
	p := strings.TrimRight(req.URL.Path, "/")
	switch {
	case strings.HasSuffix(p, "/chat/completions"):
		return Chat, true
	case strings.HasSuffix(p, "/responses"):
		return Responses, true
	case strings.HasSuffix(p, "/embeddings"):
		return Embeddings, true
	}
	return 0, false
}

// Name is the operation's gen_ai.operation.name.
func (op Operation) Name() string {
	if op == Embeddings {
		return contract.OpEmbeddings
	}
	return contract.OpChat
}

// openAIUsage is the usage object of chat completions and embeddings.
type openAIUsage struct {
	PromptTokens        *int64 `json:"prompt_tokens"`
	CompletionTokens    *int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens *int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens *int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

func (u *openAIUsage) into(dst *genaicall.Usage) {
	if u == nil {
		return
	}
	dst.Input, dst.Output = u.PromptTokens, u.CompletionTokens
	if d := u.PromptTokensDetails; d != nil {
		dst.CacheRead = d.CachedTokens
	}
	if d := u.CompletionTokensDetails; d != nil {
		dst.Reasoning = d.ReasoningTokens
	}
}

// responsesUsage is the usage object of the Responses API.
type responsesUsage struct {
	InputTokens        *int64 `json:"input_tokens"`
	OutputTokens       *int64 `json:"output_tokens"`
	InputTokensDetails *struct {
		CachedTokens *int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokensDetails *struct {
		ReasoningTokens *int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
}

func (u *responsesUsage) into(dst *genaicall.Usage) {
	if u == nil {
		return
	}
	dst.Input, dst.Output = u.InputTokens, u.OutputTokens
	if d := u.InputTokensDetails; d != nil {
		dst.CacheRead = d.CachedTokens
	}
	if d := u.OutputTokensDetails; d != nil {
		dst.Reasoning = d.ReasoningTokens
	}
}

// apiError is the error object of an error body or stream event.
type apiError struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    any    `json:"code"`
}

func (e *apiError) into(r *genaicall.Result) {
	if e == nil {
		return
	}
	r.ErrType = e.Type
	if s, ok := e.Code.(string); ok && s != "" {
		r.ErrType = s
	}
	if r.ErrType == "" {
		r.ErrType = "api_error"
	}
	r.ErrMsg = e.Message
}

type chatResponse struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		FinishReason string `json:"finish_reason"`
		Message      struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
	} `json:"choices"`
	Usage *openAIUsage `json:"usage"`
}

type chatChunk struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int     `json:"index"`
		FinishReason *string `json:"finish_reason"`
		Delta        struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *openAIUsage `json:"usage"`
	Error *apiError    `json:"error"`
}

type responsesItem struct {
	Type    string `json:"type"`
	CallID  string `json:"call_id"`
	Name    string `json:"name"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

type responsesObject struct {
	ID                string          `json:"id"`
	Model             string          `json:"model"`
	Status            string          `json:"status"`
	Output            []responsesItem `json:"output"`
	Usage             *responsesUsage `json:"usage"`
	Error             *apiError       `json:"error"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
}

type responsesEvent struct {
	Type     string           `json:"type"`
	Response *responsesObject `json:"response"`
	Item     *responsesItem   `json:"item"`
	Delta    string           `json:"delta"`
	Message  string           `json:"message"`
	Code     any              `json:"code"`
}

type embeddingsResponse struct {
	Model string       `json:"model"`
	Usage *openAIUsage `json:"usage"`
}

// parser reads the responses of one endpoint; injected tells that the
// request was sent asking for the usage chunk the caller did not ask for.
type parser struct {
	op       Operation
	injected bool
}

// ParseResponse reads a non-streamed response body into r.
func (p parser) ParseResponse(b []byte, r *genaicall.Result, capture bool) {
	switch p.op {
	case Chat:
		var resp chatResponse
		if json.Unmarshal(b, &resp) != nil {
			return
		}
		r.Parsed = true
		r.ID, r.Model = resp.ID, resp.Model
		for _, ch := range resp.Choices {
			r.AddFinish(ch.FinishReason)
			for _, tc := range ch.Message.ToolCalls {
				r.AddToolCall(tc.Function.Name, tc.ID)
			}
			if capture && ch.Message.Content != nil {
				r.Text.WriteString(*ch.Message.Content)
			}
		}
		resp.Usage.into(&r.Usage)
	case Responses:
		var resp responsesObject
		if json.Unmarshal(b, &resp) != nil {
			return
		}
		r.Parsed = true
		fromResponses(r, &resp, capture)
	case Embeddings:
		var resp embeddingsResponse
		if json.Unmarshal(b, &resp) != nil {
			return
		}
		r.Parsed = true
		r.Model = resp.Model
		if resp.Usage != nil {
			r.Usage.Input = resp.Usage.PromptTokens
		}
	}
}

func fromResponses(r *genaicall.Result, resp *responsesObject, capture bool) {
	r.ID, r.Model = resp.ID, resp.Model
	r.Finish = r.Finish[:0]
	if d := resp.IncompleteDetails; d != nil && d.Reason != "" {
		r.AddFinish(d.Reason)
	} else {
		r.AddFinish(resp.Status)
	}
	if len(resp.Output) == 0 {
		// A terminal event with no output (the smallest stream a client
		// such as Codex accepts: response.output_item.done per item, then
		// response.completed with id and usage) keeps the tool calls and
		// text its output_item events gave.
		resp.Usage.into(&r.Usage)
		resp.Error.into(r)
		return
	}
	r.ToolCalls = r.ToolCalls[:0]
	r.Text.Reset()
	for _, it := range resp.Output {
		switch it.Type {
		case "function_call", "custom_tool_call":
			r.AddToolCall(it.Name, it.CallID)
		case "message":
			if capture {
				for _, c := range it.Content {
					r.Text.WriteString(c.Text)
				}
			}
		}
	}
	resp.Usage.into(&r.Usage)
	resp.Error.into(r)
}

// hasToolCall reports whether r already holds the tool call id.
func hasToolCall(r *genaicall.Result, id string) bool {
	for _, tc := range r.ToolCalls {
		if i := strings.LastIndexByte(tc, ':'); i >= 0 && tc[i+1:] == id {
			return true
		}
	}
	return false
}

var doneData = []byte("[DONE]")

// ParseEvent reads one stream event's data into r. It reports whether the
// caller gets the event and whether it ends the stream.
func (p parser) ParseEvent(data []byte, r *genaicall.Result, capture bool) (keep, terminal bool) {
	switch p.op {
	case Chat:
		if bytes.HasPrefix(data, doneData) {
			return true, true
		}
		var ch chatChunk
		if json.Unmarshal(data, &ch) != nil {
			return true, false
		}
		r.Parsed = true
		if ch.Error != nil {
			ch.Error.into(r)
			return true, false
		}
		if ch.ID != "" {
			r.ID = ch.ID
		}
		if ch.Model != "" {
			r.Model = ch.Model
		}
		for _, c := range ch.Choices {
			if c.FinishReason != nil {
				r.AddFinish(*c.FinishReason)
			}
			if capture && c.Delta.Content != nil {
				r.Text.WriteString(*c.Delta.Content)
			}
			for _, tc := range c.Delta.ToolCalls {
				if tc.ID != "" {
					r.AddToolCall(tc.Function.Name, tc.ID)
				}
			}
		}
		if ch.Usage != nil {
			ch.Usage.into(&r.Usage)
			// The caller did not ask for this usage-only chunk; it may
			// index Choices[0], so it never sees it.
			if p.injected && len(ch.Choices) == 0 {
				return false, false
			}
		}
		return true, false
	case Responses:
		var ev responsesEvent
		if json.Unmarshal(data, &ev) != nil {
			return true, false
		}
		r.Parsed = true
		switch ev.Type {
		case "response.created", "response.in_progress":
			if ev.Response != nil {
				r.ID, r.Model = ev.Response.ID, ev.Response.Model
			}
		case "response.output_text.delta":
			if capture {
				r.Text.WriteString(ev.Delta)
			}
		case "response.output_item.done":
			// A tool call is known at its item's end, before the terminal
			// event, which may not repeat the output.
			if it := ev.Item; it != nil && (it.Type == "function_call" || it.Type == "custom_tool_call") && it.CallID != "" && !hasToolCall(r, it.CallID) {
				r.AddToolCall(it.Name, it.CallID)
			}
		case "response.completed", "response.incomplete", "response.failed":
			if ev.Response != nil {
				fromResponses(r, ev.Response, capture)
			}
			return true, true
		case "error":
			(&apiError{Message: ev.Message, Code: ev.Code, Type: "error"}).into(r)
			return true, true
		}
		return true, false
	}
	return true, false
}

// requestInfo is what Describe reads from a request body.
type requestInfo struct {
	Model         string
	Stream        bool
	StreamOptions *struct {
		IncludeUsage *bool `json:"include_usage"`
	}
	Messages            json.RawMessage
	Input               json.RawMessage
	MaxCompletionTokens *int64
	MaxTokens           *int64
	MaxOutputTokens     *int64
	Temperature         *float64
	TopP                *float64
}

// read sets info from the top-level members of a request body
// (genaicall.DecodeMembers). Messages and Input are slices of the body,
// not copies.
func (info *requestInfo) read(fields []genaicall.Field) {
	genaicall.DecodeMembers(fields,
		genaicall.Member{Name: "model", Dst: &info.Model},
		genaicall.Member{Name: "stream", Dst: &info.Stream},
		genaicall.Member{Name: "stream_options", Dst: &info.StreamOptions},
		genaicall.Member{Name: "messages", Dst: &info.Messages},
		genaicall.Member{Name: "input", Dst: &info.Input},
		genaicall.Member{Name: "max_completion_tokens", Dst: &info.MaxCompletionTokens},
		genaicall.Member{Name: "max_tokens", Dst: &info.MaxTokens},
		genaicall.Member{Name: "max_output_tokens", Dst: &info.MaxOutputTokens},
		genaicall.Member{Name: "temperature", Dst: &info.Temperature},
		genaicall.Member{Name: "top_p", Dst: &info.TopP})
}

// Describe reads a request body for op. A streamed chat request that does
// not ask for usage is sent asking for it; the parser then hides the
// usage-only chunk from the caller. Only the body's top-level members are
// looked at; the messages are neither decoded nor copied.
func (op Operation) Describe(body []byte) genaicall.Request {
	var buf [16]genaicall.Field
	var info requestInfo
	fields, ok := genaicall.ObjectFields(body, buf[:0])
	if ok {
		info.read(fields)
	}
	r := genaicall.Request{
		Endpoint:    int(op),
		Operation:   op.Name(),
		Model:       info.Model,
		Stream:      info.Stream,
		Temperature: info.Temperature,
		TopP:        info.TopP,
		Input:       info.Messages,
	}
	if len(r.Input) == 0 {
		r.Input = info.Input
	}
	for _, v := range []*int64{info.MaxCompletionTokens, info.MaxTokens, info.MaxOutputTokens} {
		if v != nil {
			r.MaxTokens = v
			break
		}
	}
	p := parser{op: op}
	if ok && op == Chat && info.Stream && (info.StreamOptions == nil || info.StreamOptions.IncludeUsage == nil || !*info.StreamOptions.IncludeUsage) {
		if nb, ok := withIncludeUsage(body, fields); ok {
			r.Body = nb
			p.injected = true
		}
	}
	r.Parser = p
	return r
}

// splice is one edit of a body: text replaces body[at:end].
type splice struct {
	at, end int
	text    string
}

const includeUsage = `"include_usage":true`

// withIncludeUsage returns a copy of body, whose top-level members are
// fields, with stream_options.include_usage set to true: the value of
// each include_usage member in each stream_options object becomes true,
// or the member is added first in the object; a null stream_options
// becomes {"include_usage":true}, and a missing one is added last in the
// body. Every other byte is kept as it was. It reports false, and body is
// to be sent unchanged, when a stream_options is neither an object nor
// null.
func withIncludeUsage(body []byte, fields []genaicall.Field) ([]byte, bool) {
	var buf [4]splice
	edits := buf[:0]
	found := false
	for _, f := range fields {
		if !f.Is("stream_options", false) {
			continue
		}
		found = true
		switch f.Value[0] {
		case 'n':
			edits = append(edits, splice{f.At, f.At + len(f.Value), "{" + includeUsage + "}"})
		case '{':
			var ibuf [4]genaicall.Field
			inner, ok := genaicall.ObjectFields(f.Value, ibuf[:0])
			if !ok {
				return nil, false
			}
			set := false
			for _, g := range inner {
				if g.Is("include_usage", false) {
					edits = append(edits, splice{f.At + g.At, f.At + g.At + len(g.Value), "true"})
					set = true
				}
			}
			if !set {
				text := includeUsage
				if len(inner) > 0 {
					text += ","
				}
				edits = append(edits, splice{f.At + 1, f.At + 1, text})
			}
		default:
			return nil, false
		}
	}
	if !found {
		text := `"stream_options":{` + includeUsage + `}`
		var at int
		if n := len(fields); n > 0 {
			last := fields[n-1]
			at, text = last.At+len(last.Value), ","+text
		} else {
			at = bytes.LastIndexByte(body, '}')
		}
		if at < 0 {
			return nil, false
		}
		edits = append(edits, splice{at, at, text})
	}
	size := len(body)
	for _, e := range edits {
		size += len(e.text) - (e.end - e.at)
	}
	out := make([]byte, 0, size)
	prev := 0
	for _, e := range edits {
		out = append(append(out, body[prev:e.at]...), e.text...)
		prev = e.end
	}
	return append(out, body[prev:]...), true
}

// Injected reports whether p, the Parser of a Request that Describe
// returned, reads a stream that was sent asking for the usage chunk its
// caller did not ask for (the chunk is then hidden from the caller).
func Injected(p genaicall.Parser) bool {
	pp, ok := p.(parser)
	return ok && pp.injected
}
