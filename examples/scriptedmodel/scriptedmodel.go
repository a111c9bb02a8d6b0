// Package scriptedmodel is a fake model endpoint for the examples: an
// httptest server that speaks the OpenAI Chat Completions and Responses
// APIs and the Anthropic Messages API and answers each request with the
// Step a Go function scripts, so the examples run without a model or an
// API key. Replace it with the real endpoint when you copy an example.
//
// It re-exports the scripted model the repository's own tests use.
package scriptedmodel

import impl "github.com/agentledger/agentledger/internal/scriptedmodel"

// Types of the scripted model; see each type's documentation.
type (
	// Answered is one request the model answered and what it answered.
	Answered = impl.Answered
	// Block is one content block of a request's message.
	Block = impl.Block
	// Options configures a Server.
	Options = impl.Options
	// Request is one request as the model received it.
	Request = impl.Request
	// Router answers each request by the first Rule that matches it.
	Router = impl.Router
	// Rule is one case of a Router.
	Rule = impl.Rule
	// Server is the fake model endpoint.
	Server = impl.Server
	// Step is one scripted answer: text, tool calls, usage or an error.
	Step = impl.Step
	// TaskNotification is a background task's notification in a request.
	TaskNotification = impl.TaskNotification
	// ToolCall is one tool call the model answers with.
	ToolCall = impl.ToolCall
	// Usage is the token usage the model reports for a Step.
	Usage = impl.Usage
)

// New returns a Server that answers with opts.Responder; call Start.
func New(opts Options) *Server { return impl.New(opts) }

// NewRouter returns a Router that answers each request by the first rule
// that matches, with usage(seq) as the usage of the seq-th answer.
func NewRouter(usage func(seq int) Usage, rules ...Rule) *Router {
	return impl.NewRouter(usage, rules...)
}

// BashCall returns a Claude Code Bash tool call running command.
func BashCall(command, description string, background bool) ToolCall {
	return impl.BashCall(command, description, background)
}
