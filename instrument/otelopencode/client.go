package otelopencode

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/genaicall"
	"github.com/agentledger/agentledger/instrument/internal/wireproxy"
)

// ErrNotStarted is returned by Prompt before Start: without the event
// stream the Client would miss the work the prompt leaves running.
var ErrNotStarted = errors.New("otelopencode: client not started (call Start)")

// ErrNoLedger is returned by Wait and Session of a Client made without
// WithLedger.
var ErrNoLedger = errors.New("otelopencode: no ledger (use WithLedger)")

// Client talks to an OpenCode server (opencode serve) and records every
// prompt as an invocation: the root span for the prompt call, a model-call
// span per assistant message, execute_tool spans, background jobs and the
// continuations their completion notifications start, from the server's
// event stream. Start it before prompting. A Client is safe for concurrent
// use.
type Client struct {
	cfg     config
	api     *serverAPI
	tracker *instrument.Tracker
	m       *mapper
	stream  *eventStream
	stats   *telemetry
	ids     idSource
	// proxy is the model-wire proxy (WithModelProxy), nil without it;
	// wire makes its model-call spans.
	proxy *wireproxy.Proxy
	wire  *genaicall.Middleware
}

// New returns a Client for the OpenCode server at baseURL (for example
// http://127.0.0.1:4096) that sends its requests with hc
// (http.DefaultClient when nil). A Timeout on hc also cuts the event
// stream, which the Client then reconnects.
func New(baseURL string, hc *http.Client, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("otelopencode: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("otelopencode: base URL %q: scheme must be http or https", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if hc == nil {
		hc = http.DefaultClient
	}
	cfg := newConfig(opts)
	tracker := instrument.NewTracker(instrument.WithTracerProvider(cfg.tracerProvider), instrument.WithPropagators(cfg.propagators), instrument.WithWakeFlush(cfg.flushTimeout))
	tracer := cfg.tracerProvider.Tracer(ScopeName, trace.WithInstrumentationVersion(Version()))
	api := &serverAPI{base: u, hc: hc, propagators: cfg.propagators}
	stats := newTelemetry(cfg.meterProvider)
	m := newMapper(tracer, tracker, stats, cfg.maxSessions, cfg.maxJobs)
	c := &Client{
		cfg:     cfg,
		api:     api,
		tracker: tracker,
		m:       m,
		stream:  newEventStream(api, m, stats, cfg),
		stats:   stats,
	}
	if cfg.modelUpstream != "" {
		if c.proxy, c.wire, err = startProxy(cfg, m); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// ModelProxyURL is the base URL of the model-wire proxy (WithModelProxy),
// to give the server's provider as its baseURL; "" without the proxy.
func (c *Client) ModelProxyURL() string {
	if c.proxy == nil {
		return ""
	}
	return c.proxy.URL()
}

// Start starts reading the server's event stream (GET /event) in a
// goroutine and returns once it is connected, or with ctx's error (the
// goroutine then keeps trying; stop it with Shutdown). The stream is
// reconnected whenever it breaks, and the sessions with open work are then
// read again from the server, so no completion is lost.
func (c *Client) Start(ctx context.Context) error { return c.stream.start(ctx) }

// Shutdown stops reading the event stream and waits for the goroutine to
// end, or for ctx; it closes the model-wire proxy, waiting for the
// requests in flight until ctx is done, and ends the calls held for a
// retry. Spans still open (jobs running, continuations) stay open: their
// invocations are not final.
func (c *Client) Shutdown(ctx context.Context) error {
	err := c.stream.shutdown(ctx)
	if c.proxy != nil {
		if perr := c.proxy.Close(ctx); perr != nil {
			err = errors.Join(err, fmt.Errorf("otelopencode: model-wire proxy: %w", perr))
		}
		// A call held for a retry that can no longer come ends now.
		c.wire.EndParked()
	}
	return err
}

// started reports whether Start was called.
func (c *Client) started() bool { return c.stream.started() }

// CreateSession creates a session and returns its id. Give it a title:
// OpenCode generates a title for an untitled session with an extra model
// call that no event reports, so its usage cannot be counted.
func (c *Client) CreateSession(ctx context.Context, title string) (string, error) {
	body := map[string]any{}
	if title != "" {
		body["title"] = title
	}
	var s struct {
		ID string `json:"id"`
	}
	if err := c.api.postJSON(ctx, "/session", body, &s); err != nil {
		return "", err
	}
	if s.ID == "" {
		return "", errors.New("otelopencode: POST /session: no session id in the answer")
	}
	return s.ID, nil
}

// Abort aborts what runs in a session (POST /session/:id/abort). OpenCode
// then cancels the session's running turn and its background subagents;
// their promised notifications are closed as interrupted.
func (c *Client) Abort(ctx context.Context, session string) error {
	return c.api.postJSON(ctx, "/session/"+url.PathEscape(session)+"/abort", nil, nil)
}

// Wait blocks until invocation id is final (or incomplete) in the ledger,
// or ctx ends. When it returns, every span of the invocation that this
// Client ended has also been handed to the span processors after the
// ledger (the exporter): a ForceFlush of the TracerProvider after Wait
// exports them all.
func (c *Client) Wait(ctx context.Context, id string) (instrument.Summary, error) {
	if c.cfg.ledger == nil {
		return instrument.Summary{}, ErrNoLedger
	}
	sum, err := c.cfg.ledger.Wait(ctx, id)
	c.m.settled()
	return sum, err
}

// Session returns what a session still owes its invocations: running
// background jobs, expected followups, running continuations. A runtime
// must not unload the session while OwesWork is true.
func (c *Client) Session(session string) (instrument.SessionState, error) {
	if c.cfg.ledger == nil {
		return instrument.SessionState{}, ErrNoLedger
	}
	return c.cfg.ledger.Session(session), nil
}
