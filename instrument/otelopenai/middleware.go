package otelopenai

import (
	"encoding/json"
	"net/http"

	"github.com/openai/openai-go/v3/option"

	"github.com/agentledger/agentledger/instrument/internal/genaicall"
)

const providerOpenAI = "openai"

// Middleware returns an OpenAI SDK middleware that traces chat
// completions, responses and embeddings calls; see the package doc. Other
// requests pass through untouched.
func Middleware(opts ...Option) option.Middleware {
	return newMiddleware(newConfig(opts)).handle
}

type middleware struct {
	*genaicall.Middleware
}

func newMiddleware(cfg genaicall.Config) *middleware {
	return &middleware{genaicall.New(cfg, genaicall.Scope{Name: ScopeName, Version: Version(), Provider: providerOpenAI})}
}

func (m *middleware) handle(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	op, ok := classify(req)
	if !ok || req.Body == nil || req.Body == http.NoBody {
		return next(req)
	}
	return m.Handle(req, next, op.describe)
}

// requestInfo is what the middleware reads from a request body.
type requestInfo struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages            json.RawMessage `json:"messages"`
	Input               json.RawMessage `json:"input"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxOutputTokens     *int64          `json:"max_output_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
}

// describe reads a request body for op. A streamed chat request that does
// not ask for usage is sent asking for it; the parser then hides the
// usage-only chunk from the caller.
func (op operation) describe(body []byte) genaicall.Request {
	var info requestInfo
	_ = json.Unmarshal(body, &info)
	r := genaicall.Request{
		Endpoint:    int(op),
		Operation:   op.name(),
		Model:       info.Model,
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
	if op == opChat && info.Stream && (info.StreamOptions == nil || info.StreamOptions.IncludeUsage == nil || !*info.StreamOptions.IncludeUsage) {
		if nb, err := withIncludeUsage(body); err == nil {
			r.Body = nb
			p.injected = true
		}
	}
	r.Parser = p
	return r
}

// withIncludeUsage returns body with stream_options.include_usage = true.
func withIncludeUsage(body []byte) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, err
	}
	so := map[string]json.RawMessage{}
	if raw, ok := fields["stream_options"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &so); err != nil {
			return nil, err
		}
	}
	so["include_usage"] = json.RawMessage("true")
	raw, err := json.Marshal(so)
	if err != nil {
		return nil, err
	}
	fields["stream_options"] = raw
	return json.Marshal(fields)
}
