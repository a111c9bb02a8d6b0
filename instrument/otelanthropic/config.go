package otelanthropic

import (
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// DefaultRetryWindow is how long a call whose last attempt failed in a way
// the SDK retries waits for the next attempt before its span is ended. It
// exceeds the SDK's longest retry delay (a two-minute Retry-After).
const DefaultRetryWindow = 3 * time.Minute

// config holds the settings of a Middleware.
type config struct {
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	propagators    propagation.TextMapPropagator
	captureContent bool
	retryWindow    time.Duration
	// afterFunc schedules the retry-window fallback; tests replace it.
	afterFunc func(time.Duration, func()) stopper
}

// stopper is the part of *time.Timer the middleware uses.
type stopper interface{ Stop() bool }

func newConfig(opts []Option) config {
	c := config{retryWindow: DefaultRetryWindow}
	for _, o := range opts {
		if o != nil {
			o.apply(&c)
		}
	}
	if c.tracerProvider == nil {
		c.tracerProvider = otel.GetTracerProvider()
	}
	if c.meterProvider == nil {
		c.meterProvider = otel.GetMeterProvider()
	}
	if c.propagators == nil {
		c.propagators = otel.GetTextMapPropagator()
	}
	if c.afterFunc == nil {
		c.afterFunc = func(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }
	}
	return c
}

// Option configures a Middleware.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithTracerProvider sets the TracerProvider the model-call spans are
// started with; for invocation accounting its pipeline should contain an
// instrument.SpanProcessor. The global provider is used when it is not
// given or nil.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp != nil {
			c.tracerProvider = tp
		}
	})
}

// WithMeterProvider sets the MeterProvider of the GenAI client metrics
// (gen_ai.client.token.usage, gen_ai.client.operation.duration). The global
// provider is used when it is not given or nil.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp != nil {
			c.meterProvider = mp
		}
	})
}

// WithPropagators sets the propagators that inject the model-call span's
// context into the outgoing HTTP request headers. The global propagators
// are used when it is not given or nil.
func WithPropagators(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *config) {
		if p != nil {
			c.propagators = p
		}
	})
}

// WithCaptureContent records the request messages (gen_ai.input.messages,
// the request's JSON) and the response text (gen_ai.output.messages) on
// the spans when on. It is off by default: content may be sensitive and
// large.
func WithCaptureContent(on bool) Option {
	return optionFunc(func(c *config) { c.captureContent = on })
}

// WithRetryWindow sets how long a call whose last attempt failed
// retryably waits for the SDK's next attempt before its span is ended
// (default DefaultRetryWindow). Zero or negative is ignored.
func WithRetryWindow(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.retryWindow = d
		}
	})
}
