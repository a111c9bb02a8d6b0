// Package openaiwire reads the OpenAI-shaped HTTP API for the model-call
// spans of genaicall: which requests are model calls (chat completions,
// responses, embeddings), what a request body says (model, stream, limits)
// and the usage, finish reasons and tool calls of a response, streamed or
// not. otelopenai (the SDK middleware) and otelopencode (the model-wire
// proxy) share it, so that there is one OpenAI usage parser.
package openaiwire

import (
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
