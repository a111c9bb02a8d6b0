package otelopenai

import (
	"net/http"

	"github.com/openai/openai-go/v3/option"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/genaicall"
	"github.com/agentledger/agentledger/instrument/internal/openaiwire"
)

const providerOpenAI = contract.ProviderOpenAI

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
	op, ok := openaiwire.Classify(req)
	if !ok || req.Body == nil || req.Body == http.NoBody {
		return next(req)
	}
	return m.Handle(req, next, op.Describe)
}
