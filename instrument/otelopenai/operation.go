package otelopenai

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/genaicall"
)

// operation is an API endpoint the middleware traces.
type operation int

const (
	opChat operation = iota + 1
	opResponses
	opEmbeddings
)

// classify tells which traced endpoint req goes to.
func classify(req *http.Request) (operation, bool) {
	if req.Method != http.MethodPost {
		return 0, false
	}
	p := strings.TrimRight(req.URL.Path, "/")
	switch {
	case strings.HasSuffix(p, "/chat/completions"):
		return opChat, true
	case strings.HasSuffix(p, "/responses"):
		return opResponses, true
	case strings.HasSuffix(p, "/embeddings"):
		return opEmbeddings, true
	}
	return 0, false
}

func (op operation) name() string {
	if op == opEmbeddings {
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
	op       operation
	injected bool
}

// ParseResponse reads a non-streamed response body into r.
func (p parser) ParseResponse(b []byte, r *genaicall.Result, capture bool) {
	switch p.op {
	case opChat:
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
	case opResponses:
		var resp responsesObject
		if json.Unmarshal(b, &resp) != nil {
			return
		}
		r.Parsed = true
		fromResponses(r, &resp, capture)
	case opEmbeddings:
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

var doneData = []byte("[DONE]")

// ParseEvent reads one stream event's data into r. It reports whether the
// caller gets the event and whether it ends the stream.
func (p parser) ParseEvent(data []byte, r *genaicall.Result, capture bool) (keep, terminal bool) {
	switch p.op {
	case opChat:
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
	case opResponses:
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
