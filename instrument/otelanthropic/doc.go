// Package otelanthropic traces the model calls an agent makes through the
// Anthropic Go SDK (github.com/anthropics/anthropic-sdk-go/v2), so that
// their token usage is counted in the agentledger invocation ledger.
//
// ClientOptions returns the options to give anthropic.NewClient: the
// middleware, and option.WithoutOpenTelemetry, because the SDK (v2.15 and
// later) starts its own "chat" span with usage around every call through
// the global TracerProvider, and two model-call spans for one call would
// count its tokens twice. Middleware alone is for clients whose SDK spans
// are already off; when it sees a call inside the SDK's own span it
// reports the double count once through otel.Handle.
//
// Each Messages call (POST /v1/messages, plain or streamed) becomes one
// CLIENT span "chat {model}" started from the caller's context, so it is a
// child of the caller's current span and carries the invocation's baggage.
// It records, with the GenAI registry's names (gen_ai.provider.name
// "anthropic", gen_ai.request.stream=true for a streamed request), what
// the response actually carries: response model and id, the stop reason
// (gen_ai.response.finish_reasons), the tool calls the model asked for
// (invocation.response.tool_calls, "name:tool_use_id": not a registry
// name, so not in gen_ai), and usage by the GenAI rule: gen_ai.usage.input_tokens is input_tokens +
// cache_read_input_tokens + cache_creation_input_tokens, with
// gen_ai.usage.cache_read.input_tokens, cache_creation.input_tokens,
// output_tokens and reasoning.output_tokens (output_tokens_details.
// thinking_tokens). A stream's usage comes from message_start and the
// cumulative counts of message_delta.
//
// The span ends exactly once: at message_stop, on a stream error, or when
// the caller closes the stream early (then
// invocation.response.stream_closed_early=true). How the call ended is
// invocation.response.ending, from the one table of endings (CONTRACT.md,
// "How a model call ended"): a call whose stream broke off, was closed
// early, or carried an error event before message_stop, or that timed out
// or got no response after it was sent, has unknown usage. Its span
// carries no gen_ai.usage and no error status (the error is an exception
// event), so its invocation closes incomplete (usage_missing), never
// final with a partial count. Retries by the SDK are one
// span with one "attempt" event each, and usage counted once; see the
// otelopenai package for how attempts are tied together, and how a span
// held open for a retry is exported when the process shuts its provider
// down. Without WithTracerProvider, each call's span is started with the
// provider of the span in the request's context (as otelhttp does), or the
// global provider when the context has none.
//
// Message content is recorded only with WithCaptureContent(true).
package otelanthropic // import "github.com/agentledger/agentledger/instrument/otelanthropic"
