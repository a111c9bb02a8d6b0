package otelopencode

import (
	"log/slog"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/instrument"
)

// Defaults of a Client.
const (
	// DefaultAgent is the agent name of invocations whose prompt names
	// none: OpenCode's default primary agent.
	DefaultAgent = "build"
	// DefaultSyncTimeout is how long a prompt waits, after OpenCode
	// answered, for the event stream to deliver the answer's completion
	// before it reads the session's messages instead.
	DefaultSyncTimeout = 3 * time.Second
	// DefaultMinBackoff and DefaultMaxBackoff bound the wait before
	// reconnecting the event stream (doubling from min to max).
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
	// DefaultConnectWait bounds one attempt at the event stream: a
	// connection that brings no server.connected event within it is
	// dropped and tried again (see WithConnectWait).
	DefaultConnectWait = 10 * time.Second
	// DefaultMaxSessions bounds the sessions the Client remembers; beyond
	// it the least recently used ones that owe nothing are forgotten.
	DefaultMaxSessions = 10000
	// DefaultMaxJobs bounds the background jobs the Client tracks until
	// their followup is settled; beyond it the oldest is dropped
	// fail-closed (see WithMaxJobs).
	DefaultMaxJobs = 10000
)

// config holds the settings of a Client.
type config struct {
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	propagators    propagation.TextMapPropagator
	ledger         *instrument.Ledger
	logger         *slog.Logger
	agent          string
	syncTimeout    time.Duration
	minBackoff     time.Duration
	maxBackoff     time.Duration
	connectWait    time.Duration
	maxSessions    int
	maxJobs        int
	// modelUpstream is WithModelProxy's upstream; "" without the proxy.
	modelUpstream string
	// proxyAddr is WithModelProxyAddress's; "" for a free loopback port.
	proxyAddr string
	// messageIDs is WithMessageInvocationIDs's.
	messageIDs bool
	// flushTimeout bounds the flush before a result (WithFlushTimeout).
	flushTimeout time.Duration
}

func newConfig(opts []Option) config {
	c := config{
		agent:       DefaultAgent,
		syncTimeout: DefaultSyncTimeout,
		minBackoff:  DefaultMinBackoff,
		maxBackoff:  DefaultMaxBackoff,
		connectWait: DefaultConnectWait,
		maxSessions: DefaultMaxSessions,
		maxJobs:     DefaultMaxJobs,
	}
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
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.maxBackoff < c.minBackoff {
		c.maxBackoff = c.minBackoff
	}
	return c
}

// Option configures a Client.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithTracerProvider sets the TracerProvider the Client starts its spans
// with; its pipeline should contain an instrument.SpanProcessor. The global
// provider is used when it is not given or nil.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp != nil {
			c.tracerProvider = tp
		}
	})
}

// WithMeterProvider sets the MeterProvider of the Client's own telemetry
// (events read, ignored, malformed; reconnects). The global provider is
// used when it is not given or nil.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp != nil {
			c.meterProvider = mp
		}
	})
}

// WithPropagators sets the propagators that inject the invocation's
// context into the requests sent to the OpenCode server. The global
// propagators are used when it is not given or nil.
func WithPropagators(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *config) {
		if p != nil {
			c.propagators = p
		}
	})
}

// WithLedger gives the Client the ledger of the instrument.SpanProcessor in
// its TracerProvider's pipeline, so that Client.Wait and Client.Session can
// answer. Without it they return ErrNoLedger.
func WithLedger(l *instrument.Ledger) Option {
	return optionFunc(func(c *config) {
		if l != nil {
			c.ledger = l
		}
	})
}

// WithLogger sets the logger for malformed events and stream errors.
// slog.Default() is used when it is not given or nil.
func WithLogger(l *slog.Logger) Option {
	return optionFunc(func(c *config) {
		if l != nil {
			c.logger = l
		}
	})
}

// WithAgent sets the agent name of invocations whose prompt names no agent
// (default DefaultAgent). An empty name is ignored.
func WithAgent(name string) Option {
	return optionFunc(func(c *config) {
		if name != "" {
			c.agent = name
		}
	})
}

// WithSyncTimeout sets how long a prompt waits for the event stream to
// deliver the completion of OpenCode's answer before it lists the
// session's messages instead (default DefaultSyncTimeout). Values <= 0 are
// ignored.
func WithSyncTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.syncTimeout = d
		}
	})
}

// WithReconnectBackoff sets the first and the longest wait before the
// event stream is reconnected (defaults DefaultMinBackoff,
// DefaultMaxBackoff). Values <= 0 are ignored.
func WithReconnectBackoff(minWait, maxWait time.Duration) Option {
	return optionFunc(func(c *config) {
		if minWait > 0 {
			c.minBackoff = minWait
		}
		if maxWait > 0 {
			c.maxBackoff = maxWait
		}
	})
}

// WithConnectWait bounds how long one attempt at the event stream waits
// for the server's server.connected event (default DefaultConnectWait)
// before it drops the connection and tries again with backoff. OpenCode
// sends that event as soon as the stream is open; a server that accepts
// the connection while it starts and never answers it (seen with opencode
// serve 1.18 when the first GET /event arrives as it begins listening)
// would otherwise hold the Client's Start until its context ends. Values
// <= 0 are ignored.
func WithConnectWait(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.connectWait = d
		}
	})
}

// WithMaxSessions bounds the sessions the Client remembers (default
// DefaultMaxSessions). Values <= 0 are ignored.
func WithMaxSessions(n int) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.maxSessions = n
		}
	})
}

// WithMaxJobs bounds the background jobs the Client tracks until their
// followup is settled (default DefaultMaxJobs). Beyond it the oldest is
// dropped, fail-closed: its span, if still running, ends with an error
// saying it is no longer tracked, its followup is left open (no
// followup_closed: the job may still wake a turn), so its invocation is
// never final and closes incomplete with open_followup at the ledger's
// and the collector's open timeout, and its later work is not added to
// its invocation (it is recorded as an unattributed turn). Drops are
// counted in Stats.EvictedJobs and the metric
// agentledger.opencode.jobs.evicted. Values <= 0 are ignored.
func WithMaxJobs(n int) Option {
	return optionFunc(func(c *config) {
		if n > 0 {
			c.maxJobs = n
		}
	})
}

// WithModelProxy makes the Client count the model wire: New starts a
// model-wire proxy on loopback (Client.ModelProxyURL) that relays every
// request, unchanged, to upstream, the provider's real base URL (for
// example https://api.openai.com/v1) or a gateway's, and records each
// model request as one model-call span with its own response's usage,
// attributed by what it carries (see the package doc). The server's
// provider must have the proxy as its baseURL (ProviderConfig,
// WriteProviderConfig); the Client then makes no model-call spans from
// the event stream. The proxy's root stands for upstream, so the provider's
// baseURL is ModelProxyURL; ModelProxyURL followed by upstream's path
// (http://127.0.0.1:4098/v1 for https://api.openai.com/v1) works too: a
// request whose path begins with upstream's whole path has that copy
// dropped once (wireproxy.UpstreamPath), so it never reaches
// upstream as /v1/v1/.... New returns an error when upstream is not an http or
// https URL with a host.
func WithModelProxy(upstream string) Option {
	return optionFunc(func(c *config) {
		c.modelUpstream = upstream
	})
}

// WithModelProxyAddress sets the address the model-wire proxy of
// WithModelProxy listens on (default 127.0.0.1 and a free port), so that
// the provider's baseURL in opencode.json can stay the same from one run
// to the next. Keep it on loopback: the proxy relays the provider's API
// key. Without WithModelProxy it does nothing.
func WithModelProxyAddress(addr string) Option {
	return optionFunc(func(c *config) {
		c.proxyAddr = addr
	})
}

// WithMessageInvocationIDs makes the invocation id of every prompt its
// user message's id (the messageID of POST /session/:id/message: the
// caller's, else the one the Client makes), so that a host asks the
// collector about a prompt by the id OpenCode knows it by (an answer's
// parentID). A messageID the Client has made an invocation id before
// (a retried request) gets a fresh invocation id instead. Off by default:
// invocation ids are fresh random ones.
func WithMessageInvocationIDs() Option {
	return optionFunc(func(c *config) { c.messageIDs = true })
}
