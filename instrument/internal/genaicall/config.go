package genaicall

import (
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// DefaultRetryWindow is how long a call whose last attempt failed in a way
// the SDK retries waits for the next attempt before its span is ended. It
// exceeds the SDKs' longest retry delay (a two-minute Retry-After). The
// wrappers' DefaultRetryWindow constants equal it; their tests check.
const DefaultRetryWindow = 3 * time.Minute

// Config holds the settings of a Middleware. The wrappers' sealed options
// fill it through the Settings below; the zero value of a field means
// "not set".
type Config struct {
	// TracerProvider stays nil when not set: each call then uses the
	// provider of the span in its request's context, or the global one.
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Propagators    propagation.TextMapPropagator
	CaptureContent bool
	RetryWindow    time.Duration
	// AfterFunc schedules the retry-window fallback; tests replace it.
	AfterFunc func(time.Duration, func()) Stopper
}

// Stopper is the part of *time.Timer the middleware uses.
type Stopper = interface{ Stop() bool }

// Setting changes a Config; each wrapper's Option carries one.
type Setting func(*Config)

// WithDefaults returns c with the global meter provider and propagators,
// the default retry window and real timers where c leaves them unset. An
// unset TracerProvider stays nil: it is chosen per call.
func (c Config) WithDefaults() Config {
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if c.Propagators == nil {
		c.Propagators = otel.GetTextMapPropagator()
	}
	if c.RetryWindow <= 0 {
		c.RetryWindow = DefaultRetryWindow
	}
	if c.AfterFunc == nil {
		c.AfterFunc = func(d time.Duration, f func()) Stopper { return time.AfterFunc(d, f) }
	}
	return c
}

// TracerProvider sets the TracerProvider; nil is ignored.
func TracerProvider(tp trace.TracerProvider) Setting {
	return func(c *Config) {
		if tp != nil {
			c.TracerProvider = tp
		}
	}
}

// MeterProvider sets the MeterProvider; nil is ignored.
func MeterProvider(mp metric.MeterProvider) Setting {
	return func(c *Config) {
		if mp != nil {
			c.MeterProvider = mp
		}
	}
}

// Propagators sets the propagators; nil is ignored.
func Propagators(p propagation.TextMapPropagator) Setting {
	return func(c *Config) {
		if p != nil {
			c.Propagators = p
		}
	}
}

// CaptureContent turns the recording of message content on or off.
func CaptureContent(on bool) Setting {
	return func(c *Config) { c.CaptureContent = on }
}

// RetryWindow sets the retry window; zero or negative is ignored.
func RetryWindow(d time.Duration) Setting {
	return func(c *Config) {
		if d > 0 {
			c.RetryWindow = d
		}
	}
}

// NewConfig applies opts in order, skipping nil ones, and returns the
// Config they make WithDefaults. apply is the wrapper's sealed Option's
// method.
func NewConfig[O comparable](opts []O, apply func(O, *Config)) Config {
	var c Config
	var none O
	for _, o := range opts {
		if o != none {
			apply(o, &c)
		}
	}
	return c.WithDefaults()
}
