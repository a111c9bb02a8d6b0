// Package otelopenai traces the model calls an agent makes through the
// OpenAI Go SDK (github.com/openai/openai-go/v3), so that their token usage
// is counted in the agentledger invocation ledger.
//
// Middleware returns an option.Middleware; give it to the client with
// option.WithMiddleware. Each logical call to the chat completions,
// responses or embeddings API becomes one CLIENT span ("chat {model}",
// "embeddings {model}") started from the caller's context, so it is a child
// of the caller's current span and carries the invocation's baggage. The
// span records the GenAI semantic-convention attributes (names from the
// OpenTelemetry GenAI registry, gen_ai.provider.name "openai") the request
// and response actually carry: request and response model,
// gen_ai.request.stream=true for a streamed request, response id, finish
// reasons, gen_ai.usage.input_tokens, output_tokens,
// cache_read.input_tokens and reasoning.output_tokens; and, outside the
// registry, the tool calls the model asked for
// (invocation.response.tool_calls, "name:call_id").
//
// Streaming: when a chat completions stream does not ask for usage, the
// middleware sets stream_options.include_usage=true on the request (in
// the body's bytes, which are otherwise sent as the caller's SDK wrote
// them; a body whose stream_options is neither an object nor null is sent
// unchanged, without usage) and removes the extra usage-only chunk from
// the stream the caller reads, so usage is always recorded without
// changing what the caller sees. The span ends exactly once: when the
// stream's terminal event was read, when it fails, or when the caller
// closes it early (then invocation.response.stream_closed_early=true).
// How the call ended is invocation.response.ending, from the one table of
// endings (CONTRACT.md, "How a model call ended"): a call whose stream
// broke off, was closed early, or carried an error (a chat chunk with an
// error object, a Responses error event or failed response) before its
// terminal event, or that timed out or got no response after it was sent,
// has unknown usage. Its span carries no gen_ai.usage and no error status
// (the error is an exception event), so its invocation closes incomplete
// (usage_missing), never final.
//
// Retries: the SDK runs its middleware once per attempt, inside its retry
// loop. The middleware ties the attempts of one logical call together (by
// the caller's span, the request and the SDK's X-Stainless-Retry-Count
// header) so that a call retried after a 429 or 5xx is one span, with one
// "attempt" event per attempt and its usage counted once. An attempt whose
// error response the SDK discards to retry, or that failed to connect,
// keeps the span open until the next attempt; if none comes (shortly after
// the attempt's context ends, or when the retry window of WithRetryWindow
// passes) the span ends at the failed attempt's end time. When the caller
// removed the SDK's X-Stainless-Retry-Count header, a request identical to
// a parked one from the same span is taken as its retry. A span held open
// for a retry is not lost when the process exits within the window: the
// instrument.SpanProcessor of its pipeline ends it (at the failed
// attempt's end) in its Shutdown and ForceFlush, before it flushes, so
// TracerProvider.Shutdown exports it. A retry after a ForceFlush starts a
// new span.
//
// Without WithTracerProvider, each call's span is started with the
// provider of the span in the request's context (as otelhttp does), or the
// global provider when the context has none.
//
// Message content is recorded only with WithCaptureContent(true).
package otelopenai // import "github.com/agentledger/agentledger/instrument/otelopenai"
