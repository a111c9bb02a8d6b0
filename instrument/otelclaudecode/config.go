package otelclaudecode

import (
	"io"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/instrument"
)

// Defaults of a Client.
const (
	// DefaultAgent is the gen_ai.agent.name of the invocations.
	DefaultAgent = "claude-code"
	// DefaultKillDelay is how long an interrupted process (its context
	// done, or Interrupt) may take to exit after SIGTERM before it is sent
	// SIGKILL. Claude Code stops its background shells on SIGTERM.
	DefaultKillDelay = 10 * time.Second
	// DefaultMaxLine bounds one line of the CLI's output; a longer line
	// (a huge tool result) is skipped and counted as malformed.
	DefaultMaxLine = 16 << 20
	// DefaultUpstream is the model endpoint when neither WithUpstream nor
	// ANTHROPIC_BASE_URL (in WithEnv or the environment) names one.
	DefaultUpstream = "https://api.anthropic.com"
	// DefaultStreamSync bounds how long the model-wire proxy waits for the
	// Client to read what the CLI printed before a request, when the
	// request's owner is only known from the stream.
	DefaultStreamSync = 5 * time.Second
)

// config holds the settings of a Client.
type config struct {
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	propagators    propagation.TextMapPropagator
	ledger         *instrument.Ledger
	agent          string
	dir            string
	env            []string
	args           []string
	killDelay      time.Duration
	maxLine        int
	transcript     io.Writer
	stderr         io.Writer
	// upstream is the model endpoint the proxy forwards to ("" until
	// resolved: WithUpstream, else ANTHROPIC_BASE_URL, else
	// DefaultUpstream); remote marks one-shot roots invocation.remote.
	upstream string
	remote   *bool
	// flushTimeout bounds the flush before a result (WithFlushTimeout).
	flushTimeout time.Duration
}

func newConfig(opts []Option) config {
	c := config{agent: DefaultAgent, killDelay: DefaultKillDelay, maxLine: DefaultMaxLine}
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
	return c
}

// Option configures a Client.
type Option interface {
	apply(*config)
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithTracerProvider sets the TracerProvider the Client starts its spans
// with; its pipeline should contain an instrument.SpanProcessor. The
// global provider is used when it is not given or nil.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp != nil {
			c.tracerProvider = tp
		}
	})
}

// WithMeterProvider sets the MeterProvider of the Client's own telemetry
// (lines read, malformed lines, usage mismatches). The global provider is
// used when it is not given or nil.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp != nil {
			c.meterProvider = mp
		}
	})
}

// WithPropagators sets the propagators that, besides the W3C trace context
// and baggage, inject a one-shot run's invocation into the CLI's
// environment. The global propagators are used when it is not given or
// nil.
func WithPropagators(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *config) {
		if p != nil {
			c.propagators = p
		}
	})
}

// WithLedger gives the Client the ledger of the instrument.SpanProcessor in
// its TracerProvider's pipeline, so that Client.Wait, Process.Wait,
// Run.Wait and Process.State can answer. Without it they return
// ErrNoLedger.
func WithLedger(l *instrument.Ledger) Option {
	return optionFunc(func(c *config) {
		if l != nil {
			c.ledger = l
		}
	})
}

// WithAgent sets the agent name of the invocations (default DefaultAgent).
// An empty name is ignored.
func WithAgent(name string) Option {
	return optionFunc(func(c *config) {
		if name != "" {
			c.agent = name
		}
	})
}

// WithDir sets the CLI's working directory (default: the current one).
func WithDir(dir string) Option {
	return optionFunc(func(c *config) { c.dir = dir })
}

// WithEnv adds KEY=value entries to the CLI's environment, which is
// otherwise the current process's (without its TRACEPARENT, TRACESTATE and
// BAGGAGE, which would attribute the CLI's work to someone else).
func WithEnv(env ...string) Option {
	return optionFunc(func(c *config) { c.env = append(c.env, env...) })
}

// WithArgs adds command-line arguments for the CLI, after the ones the
// Client needs (for example "--model", "sonnet" or
// "--dangerously-skip-permissions").
func WithArgs(args ...string) Option {
	return optionFunc(func(c *config) { c.args = append(c.args, args...) })
}

// WithKillDelay sets how long an interrupted process may take to exit after
// SIGTERM before SIGKILL (default DefaultKillDelay). Values <= 0 are
// ignored.
func WithKillDelay(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.killDelay = d
		}
	})
}

// WithUpstream sets the model endpoint the Client's model-wire proxy
// forwards the CLI's requests to: the provider's base URL
// (https://api.anthropic.com) or a gateway's (https://gateway.example/anthropic;
// the request path, /v1/messages, is joined to it). By default it is
// ANTHROPIC_BASE_URL as WithEnv or the environment sets it, else
// DefaultUpstream. The CLI itself is given the proxy's loopback URL as
// ANTHROPIC_BASE_URL; its API key or OAuth token passes through.
func WithUpstream(url string) Option {
	return optionFunc(func(c *config) { c.upstream = url })
}

// WithRemote sets whether a one-shot Run's root is marked invocation.remote:
// spans of its invocation may come from other processes (the CLI's own
// telemetry, an instrumented program a shell runs), so the ledger and the
// collector wait remote_settle after the last span before final. By
// default it is on exactly when CLAUDE_CODE_ENABLE_TELEMETRY is set (in
// WithEnv or the environment) to anything but "" or "0". A warm session's
// prompts are never remote: the CLI takes its trace parent once per process.
func WithRemote(on bool) Option {
	return optionFunc(func(c *config) { c.remote = &on })
}

// WithTranscript copies every line the CLI prints on stdout to w, as read
// (stream-json, one event per line): for debugging, and to record replay
// fixtures. Writes happen on the goroutine that reads the CLI.
func WithTranscript(w io.Writer) Option {
	return optionFunc(func(c *config) { c.transcript = w })
}

// WithStderr copies the CLI's stderr to w (default: kept only as the tail
// quoted in errors).
func WithStderr(w io.Writer) Option {
	return optionFunc(func(c *config) { c.stderr = w })
}
