package otelcodex

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
	DefaultAgent = "codex"
	// DefaultModel is the model Codex is run with: one of its catalog
	// (`codex debug models`); an unknown name changes the tools Codex
	// offers.
	DefaultModel = "gpt-5.5"
	// DefaultUpstream is the model endpoint the proxy forwards to when
	// WithUpstream names none.
	DefaultUpstream = "https://api.openai.com/v1"
	// DefaultAPIKeyEnv is the environment variable Codex reads the API
	// key from (the provider's env_key).
	DefaultAPIKeyEnv = "OPENAI_API_KEY"
	// DefaultKillDelay is how long a stopped process may take to exit
	// after SIGTERM before SIGKILL.
	DefaultKillDelay = 10 * time.Second
	// DefaultMaxLine bounds one line of Codex's output; a longer line is
	// skipped and counted as malformed.
	DefaultMaxLine = 16 << 20
	// DefaultTurnSync bounds how long the model-wire proxy waits for the
	// Client to learn the turn a request names (turn/start's response may
	// be read after the turn's first request).
	DefaultTurnSync = 5 * time.Second
)

// Continuations says who starts the turn a background command's
// completion needs: Codex starts none by itself.
type Continuations int

const (
	// ContinueAuto: the Session starts it (turn/start) when the command
	// has ended and no turn runs, unless a turn read the command's exit
	// meanwhile (write_stdin). The default, as the other runtimes wake
	// themselves.
	ContinueAuto Continuations = iota
	// ContinueByHost: the host starts it with Session.Continue, told of
	// each completion by WithOnCompletion; until then the command's
	// followup stays open.
	ContinueByHost
)

// config holds the settings of a Client.
type config struct {
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	propagators    propagation.TextMapPropagator
	ledger         *instrument.Ledger
	agent          string
	model          string
	dir            string
	home           string
	env            []string
	args           []string
	upstream       string
	apiKeyEnv      string
	killDelay      time.Duration
	maxLine        int
	turnSync       time.Duration
	continuations  Continuations
	onCompletion   func(*Session, Completion)
	continueText   func(Completion) string
	transcript     io.Writer
	stderr         io.Writer
	ownTelemetry   bool
	// flushTimeout bounds the flush before a result (WithFlushTimeout).
	flushTimeout time.Duration
}

func newConfig(opts []Option) config {
	c := config{agent: DefaultAgent, model: DefaultModel, apiKeyEnv: DefaultAPIKeyEnv, upstream: DefaultUpstream,
		killDelay: DefaultKillDelay, maxLine: DefaultMaxLine, turnSync: DefaultTurnSync, continueText: DefaultContinueText}
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

// WithMeterProvider sets the MeterProvider of the model-call metrics. The
// global provider is used when it is not given or nil.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp != nil {
			c.meterProvider = mp
		}
	})
}

// WithPropagators sets the propagators that, besides the W3C trace context
// and baggage, inject a one-shot run's invocation into Codex's
// environment. The global propagators are used when it is not given or
// nil.
func WithPropagators(p propagation.TextMapPropagator) Option {
	return optionFunc(func(c *config) {
		if p != nil {
			c.propagators = p
		}
	})
}

// WithLedger gives the Client the ledger of the instrument.SpanProcessor
// in its TracerProvider's pipeline, so that Wait and State can answer.
// Without it they return ErrNoLedger.
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

// WithModel sets the model Codex runs with (default DefaultModel). An
// empty name is ignored.
func WithModel(name string) Option {
	return optionFunc(func(c *config) {
		if name != "" {
			c.model = name
		}
	})
}

// WithDir sets Codex's working directory (default: the current one).
func WithDir(dir string) Option {
	return optionFunc(func(c *config) { c.dir = dir })
}

// WithHome gives Codex a home of its own: HOME is dir and CODEX_HOME
// dir/.codex (created), so that nothing of the user's Codex configuration,
// sessions or credentials is read or written. Put it outside the system's
// temporary directory: Codex warns on stderr about its helper binaries
// there. Without it Codex uses the inherited HOME and CODEX_HOME.
func WithHome(dir string) Option {
	return optionFunc(func(c *config) { c.home = dir })
}

// WithEnv adds KEY=value entries to Codex's environment, which is
// otherwise the current process's (without its TRACEPARENT, TRACESTATE and
// BAGGAGE, which would attribute Codex's work to someone else). The API
// key goes here (WithAPIKeyEnv names its variable).
func WithEnv(env ...string) Option {
	return optionFunc(func(c *config) { c.env = append(c.env, env...) })
}

// WithArgs adds command-line arguments for Codex, before the ones the
// Client needs: global options such as "-c", "key=value".
func WithArgs(args ...string) Option {
	return optionFunc(func(c *config) { c.args = append(c.args, args...) })
}

// WithUpstream sets the model endpoint the Client's model-wire proxy
// forwards Codex's requests to: a Responses API base URL
// (https://api.openai.com/v1, a gateway's; the request path /responses is
// joined to it). Default DefaultUpstream. Codex itself is given the
// proxy's loopback URL as its provider's base_url.
func WithUpstream(url string) Option {
	return optionFunc(func(c *config) { c.upstream = url })
}

// WithAPIKeyEnv names the environment variable Codex's provider reads the
// API key from (default DefaultAPIKeyEnv); the key passes through the
// proxy as the request's bearer.
func WithAPIKeyEnv(name string) Option {
	return optionFunc(func(c *config) {
		if name != "" {
			c.apiKeyEnv = name
		}
	})
}

// WithKillDelay sets how long a stopped process may take to exit after
// SIGTERM before SIGKILL (default DefaultKillDelay). Values <= 0 are
// ignored.
func WithKillDelay(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.killDelay = d
		}
	})
}

// WithTurnSync bounds how long the proxy waits to learn the turn a
// request names (default DefaultTurnSync); a request whose turn is still
// unknown then is an unattributed invocation. Values <= 0 are ignored.
func WithTurnSync(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d > 0 {
			c.turnSync = d
		}
	})
}

// WithContinuations says who starts the turns background commands'
// completions need (default ContinueAuto).
func WithContinuations(who Continuations) Option {
	return optionFunc(func(c *config) { c.continuations = who })
}

// WithOnCompletion is told of each background command that ended and
// whose exit no turn has read yet: with ContinueByHost, the host's cue to
// call Session.Continue. It runs on the goroutine that reads Codex and
// must not block (start Continue on a goroutine of its own).
func WithOnCompletion(f func(*Session, Completion)) Option {
	return optionFunc(func(c *config) { c.onCompletion = f })
}

// WithContinueText sets the prompt of the continuations the Session starts
// by itself (default DefaultContinueText).
func WithContinueText(f func(Completion) string) Option {
	return optionFunc(func(c *config) {
		if f != nil {
			c.continueText = f
		}
	})
}

// WithOwnTelemetry leaves Codex's own OpenTelemetry configuration alone
// (its [otel] table, or "-c otel.trace_exporter=..." in WithArgs) instead
// of turning its exporters off, and marks one-shot roots
// invocation.remote: Codex's spans then come from another process.
func WithOwnTelemetry() Option {
	return optionFunc(func(c *config) { c.ownTelemetry = true })
}

// WithTranscript copies every line Codex prints on stdout to w, as read
// (JSONL: exec events, or app-server's JSON-RPC messages): for debugging,
// and to record replay fixtures. Writes happen on the reading goroutine.
func WithTranscript(w io.Writer) Option {
	return optionFunc(func(c *config) { c.transcript = w })
}

// WithStderr copies Codex's stderr to w (default: kept only as the tail
// quoted in errors).
func WithStderr(w io.Writer) Option {
	return optionFunc(func(c *config) { c.stderr = w })
}
