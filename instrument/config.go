package instrument

import (
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/instrument/internal/clock"
	"github.com/agentledger/agentledger/instrument/internal/flush"
)

// Defaults of the ledger, the same as the collector processor's.
const (
	// DefaultRemoteSettle is the quiet time required after the latest
	// arrival in a remote span's subtree.
	DefaultRemoteSettle = 2 * time.Second
	// DefaultOpenTimeout is the longest an invocation may stay open,
	// counted from the first span of it the ledger saw.
	DefaultOpenTimeout = 4 * time.Hour
	// DefaultRetention is how long a closed invocation is remembered.
	DefaultRetention = 15 * time.Minute
	// DefaultMaxOpenInvocations bounds the invocations the ledger keeps
	// open; beyond it the oldest is closed incomplete with reason evicted.
	DefaultMaxOpenInvocations = 100000
	// DefaultMaxSpansPerInvocation bounds the span IDs the ledger keeps
	// per invocation, as the collector's max_spans_per_invocation; beyond
	// it spans are not indexed and the invocation closes incomplete with
	// reason span_limit, never final.
	DefaultMaxSpansPerInvocation = 100000
	// DefaultClosedRecords bounds the summaries of forgotten invocations
	// the ledger keeps for a late Wait.
	DefaultClosedRecords = 1024
	// DefaultMaxOpenSpans bounds the spans the SpanProcessor tracks at
	// once (started, not ended); spans beyond it are exported without
	// invocation.children and marked invocation.remote, so their subtree
	// must settle before the invocation is final.
	DefaultMaxOpenSpans = 1 << 20
)

// config holds the settings of a SpanProcessor (and its Ledger) or a
// Tracker; each reads only its own fields.
type config struct {
	tracerProvider     trace.TracerProvider
	meterProvider      metric.MeterProvider
	propagators        propagation.TextMapPropagator
	clock              clock.Clock
	remoteSettle       time.Duration
	openTimeout        time.Duration
	retention          time.Duration
	maxOpenInvocations int
	maxSpans           int
	closedRecords      int
	maxOpenSpans       int
	reporter           *ExportReporter
	// wakeFlush bounds the flush after a wake span (WithWakeFlush); 0 is
	// none.
	wakeFlush time.Duration
}

// newTrackerConfig is the configuration of a Tracker (or ContextFromEnv).
func newTrackerConfig(opts []TrackerOption) config {
	return buildConfig(opts, TrackerOption.applyTracker)
}

// newProcessorConfig is the configuration of a SpanProcessor and its
// Ledger.
func newProcessorConfig(opts []SpanProcessorOption) config {
	return buildConfig(opts, SpanProcessorOption.applySpanProcessor)
}

// buildConfig applies opts (nil ones ignored) to the defaults, then falls
// back to the globals.
func buildConfig[O comparable](opts []O, apply func(O, *config)) config {
	c := config{
		remoteSettle:       DefaultRemoteSettle,
		openTimeout:        DefaultOpenTimeout,
		retention:          DefaultRetention,
		maxOpenInvocations: DefaultMaxOpenInvocations,
		maxSpans:           DefaultMaxSpansPerInvocation,
		closedRecords:      DefaultClosedRecords,
		maxOpenSpans:       DefaultMaxOpenSpans,
	}
	var none O
	for _, o := range opts {
		if o != none {
			apply(o, &c)
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
	if c.clock == nil {
		c.clock = clock.System{}
	}
	return c
}

// TrackerOption configures a Tracker (and ContextFromEnv).
type TrackerOption interface {
	applyTracker(*config)
}

// SpanProcessorOption configures a SpanProcessor and its Ledger.
type SpanProcessorOption interface {
	applySpanProcessor(*config)
}

// SharedOption configures a Tracker and a SpanProcessor alike; both
// constructors accept it.
type SharedOption interface {
	TrackerOption
	SpanProcessorOption
}

// Option is the option type both constructors used to share.
//
// Deprecated: use TrackerOption, SpanProcessorOption or SharedOption; an
// Option holds only options that apply to both (WithMeterProvider).
type Option = SharedOption

type trackerOption func(*config)

func (f trackerOption) applyTracker(c *config) { f(c) }

type spanProcessorOption func(*config)

func (f spanProcessorOption) applySpanProcessor(c *config) { f(c) }

type sharedOption func(*config)

func (f sharedOption) applyTracker(c *config)       { f(c) }
func (f sharedOption) applySpanProcessor(c *config) { f(c) }

func init() {
	clock.NewOption = func(clk clock.Clock) any { return withClock(clk) }
}

// WithTracerProvider sets the TracerProvider the Tracker starts its spans
// with. The global provider is used when it is not given or nil.
func WithTracerProvider(tp trace.TracerProvider) TrackerOption {
	return trackerOption(func(c *config) {
		if tp != nil {
			c.tracerProvider = tp
		}
	})
}

// WithWakeFlush makes the Tracker export each wake span it ends (the
// start of a turn the runtime started by itself: StartContinuation,
// StartUnattributed, ConsumeFollowup) at once instead of on the
// exporter's schedule, so that the collector's session watch wakes a
// host while the turn runs: after the wake span ends, a goroutine of the
// Tracker's own flushes its TracerProvider, waiting at most timeout
// (0 is the adapters' default bound of 2s; a negative timeout is no
// flush, as without the option). The caller never waits for it; asks
// made while a flush runs coalesce into one more flush; a flush that
// fails or times out is reported to the OpenTelemetry error handler and
// the spans go on the schedule. The flush keeps the model calls a client
// wrapper holds open for a retry. The adapters (otelclaudecode,
// otelopencode, otelcodex) set it with their WithFlushTimeout.
func WithWakeFlush(timeout time.Duration) TrackerOption {
	return trackerOption(func(c *config) {
		if timeout == 0 {
			timeout = flush.DefaultTimeout
		}
		c.wakeFlush = timeout
	})
}

// WithMeterProvider sets the MeterProvider for the internal telemetry
// (late children, untracked spans, evictions). The global provider is used
// when it is not given or nil.
func WithMeterProvider(mp metric.MeterProvider) SharedOption {
	return sharedOption(func(c *config) {
		if mp != nil {
			c.meterProvider = mp
		}
	})
}

// WithPropagators sets the propagators used to extract context from a
// subprocess environment and to inject it into one, in addition to the W3C
// trace context and baggage the contract requires (always used). The
// global propagators are used when it is not given or nil.
func WithPropagators(p propagation.TextMapPropagator) TrackerOption {
	return trackerOption(func(c *config) {
		if p != nil {
			c.propagators = p
		}
	})
}

// WithClock sets the clock of the ledger's arrival times and timers.
//
// Deprecated: it is a test hook; use instrumenttest.WithClock.
func WithClock(clk Clock) SpanProcessorOption { return withClock(clk) }

func withClock(clk clock.Clock) SpanProcessorOption {
	return spanProcessorOption(func(c *config) {
		if clk != nil {
			c.clock = clk
		}
	})
}

// WithRemoteSettle sets the quiet time required after the latest arrival
// in a remote span's subtree (default DefaultRemoteSettle). Negative
// values are ignored; zero means no waiting.
func WithRemoteSettle(d time.Duration) SpanProcessorOption {
	return spanProcessorOption(func(c *config) {
		if d >= 0 {
			c.remoteSettle = d
		}
	})
}

// WithOpenTimeout sets how long an invocation may stay open, counted from
// the first span of it the ledger saw (default DefaultOpenTimeout); then
// it is closed incomplete with reason open_timeout. Values <= 0 are
// ignored.
func WithOpenTimeout(d time.Duration) SpanProcessorOption {
	return spanProcessorOption(func(c *config) {
		if d > 0 {
			c.openTimeout = d
		}
	})
}

// WithRetention sets how long a closed invocation is remembered (default
// DefaultRetention). Negative values are ignored; zero forgets at once.
func WithRetention(d time.Duration) SpanProcessorOption {
	return spanProcessorOption(func(c *config) {
		if d >= 0 {
			c.retention = d
		}
	})
}

// WithMaxOpenInvocations bounds the open invocations of the ledger
// (default DefaultMaxOpenInvocations). Values <= 0 are ignored.
func WithMaxOpenInvocations(n int) SpanProcessorOption {
	return spanProcessorOption(func(c *config) {
		if n > 0 {
			c.maxOpenInvocations = n
		}
	})
}

// WithMaxSpansPerInvocation bounds the span IDs the ledger keeps per
// invocation (default DefaultMaxSpansPerInvocation). An invocation that
// reaches it closes incomplete with reason span_limit, never final: the
// spans beyond it are not indexed, so its totals cannot be proven. Values
// <= 0 are ignored.
func WithMaxSpansPerInvocation(n int) SpanProcessorOption {
	return spanProcessorOption(func(c *config) {
		if n > 0 {
			c.maxSpans = n
		}
	})
}

// WithClosedRecords bounds the summaries the ledger keeps of invocations
// it forgot after the retention, so that Ledger.Wait still answers for
// them (default DefaultClosedRecords); the oldest is dropped beyond it
// (counted in agentledger.instrument.ledger.closed_records_dropped). Zero
// keeps none; negative values are ignored.
func WithClosedRecords(n int) SpanProcessorOption {
	return spanProcessorOption(func(c *config) {
		if n >= 0 {
			c.closedRecords = n
		}
	})
}

// WithMaxOpenSpans bounds the spans the SpanProcessor tracks at once
// (default DefaultMaxOpenSpans). Values <= 0 are ignored.
func WithMaxOpenSpans(n int) SpanProcessorOption {
	return spanProcessorOption(func(c *config) {
		if n > 0 {
			c.maxOpenSpans = n
		}
	})
}

// Clock is the time source of the ledger.
//
// Deprecated: it is a test hook; use instrumenttest.Clock.
type Clock = clock.Clock

// Timer is a pending call scheduled by Clock.AfterFunc.
//
// Deprecated: use instrumenttest.Timer.
type Timer = clock.Timer
