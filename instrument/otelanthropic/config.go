package otelanthropic

import (
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/instrument/internal/genaicall"
)

// DefaultRetryWindow is how long a call whose last attempt failed in a way
// the SDK retries waits for the next attempt before its span is ended. It
// exceeds the SDK's longest retry delay (a two-minute Retry-After).
const DefaultRetryWindow = 3 * time.Minute

func newConfig(opts []Option) genaicall.Config {
	return genaicall.NewConfig(opts, Option.apply)
}

// Option configures a Middleware.
type Option interface {
	apply(*genaicall.Config)
}

type optionFunc genaicall.Setting

func (f optionFunc) apply(c *genaicall.Config) { f(c) }

// WithTracerProvider sets the TracerProvider the model-call spans are
// started with; for invocation accounting its pipeline should contain an
// instrument.SpanProcessor. When it is not given or nil, each call uses the
// provider of the span in its request's context (as otelhttp does), so a
// call made inside an invocation reaches that invocation's pipeline; the
// global provider when the context has no span.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(genaicall.TracerProvider(tp))
}

// WithMeterProvider sets the MeterProvider of the GenAI client metrics
// (gen_ai.client.token.usage, gen_ai.client.operation.duration). The global
// provider is used when it is not given or nil.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(genaicall.MeterProvider(mp))
}

// WithPropagators sets the propagators that inject the model-call span's
// context into the outgoing HTTP request headers. The global propagators
// are used when it is not given or nil.
func WithPropagators(p propagation.TextMapPropagator) Option {
	return optionFunc(genaicall.Propagators(p))
}

// WithCaptureContent records the request messages (gen_ai.input.messages,
// the request's JSON) and the response text (gen_ai.output.messages) on
// the spans when on. It is off by default: content may be sensitive and
// large.
func WithCaptureContent(on bool) Option {
	return optionFunc(genaicall.CaptureContent(on))
}

// WithRetryWindow sets how long a call whose last attempt failed
// retryably waits for the SDK's next attempt before its span is ended
// (default DefaultRetryWindow). Zero or negative is ignored.
func WithRetryWindow(d time.Duration) Option {
	return optionFunc(genaicall.RetryWindow(d))
}
