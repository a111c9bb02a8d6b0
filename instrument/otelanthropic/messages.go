package otelanthropic

import (
	"net/http"

	"github.com/agentledger/agentledger/instrument/internal/anthropicwire"
	"github.com/agentledger/agentledger/instrument/internal/genaicall"
)

// operation is an API endpoint the middleware traces.
type operation int

const opMessages operation = 1

// classify tells whether req creates a message (POST /v1/messages, not its
// count_tokens or batches sub-resources).
func classify(req *http.Request) (operation, bool) {
	if !anthropicwire.IsMessages(req) {
		return 0, false
	}
	return opMessages, true
}

// describe reads a request body for op (anthropicwire.Describe).
func (op operation) describe(body []byte) genaicall.Request {
	return anthropicwire.Describe(body, int(op))
}
