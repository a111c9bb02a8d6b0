// Package genaicall is the part of the GenAI client wrappers (otelopenai,
// otelanthropic) that does not depend on the provider's API: one CLIENT
// span per logical model call over all its attempts, retries tied
// together and parked while the SDK waits, the span ended exactly once,
// response bodies watched as the caller reads them (plain JSON, server-sent
// events, error bodies), how each call ended and what that means for its
// bill (ending.go: the one table of endings, CONTRACT.md "How a model call
// ended"), and the GenAI client metrics. A wrapper tells it
// which requests to trace and how to read their request and response
// shapes and usage.
package genaicall
