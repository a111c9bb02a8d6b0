package otelcodex

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/instrument"
)

// ErrNoLedger is returned by Wait and State of a Client made without
// WithLedger.
var ErrNoLedger = errors.New("otelcodex: no ledger (use WithLedger)")

// providerID is the model provider the Client defines for Codex (its
// base_url is the proxy).
const providerID = "agentledger"

// Client runs the Codex CLI (codex) and records each prompt as an
// invocation. A Client is safe for concurrent use; it holds no process
// itself.
type Client struct {
	bin      string
	cfg      config
	tracker  *instrument.Tracker
	tracer   trace.Tracer
	upstream *url.URL
}

// New returns a Client that runs the CLI at bin (the native binary `make
// codex` installs, or "codex" from PATH). A relative path is taken from
// the current directory, not from WithDir.
func New(bin string, opts ...Option) (*Client, error) {
	if bin == "" {
		return nil, errors.New("otelcodex: no CLI path")
	}
	var err error
	if strings.ContainsRune(bin, filepath.Separator) {
		bin, err = filepath.Abs(bin)
	} else {
		bin, err = exec.LookPath(bin)
	}
	if err != nil {
		return nil, fmt.Errorf("otelcodex: CLI %w", err)
	}
	cfg := newConfig(opts)
	up, err := url.Parse(cfg.upstream)
	if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return nil, fmt.Errorf("otelcodex: model endpoint %q is not an http or https URL with a host", cfg.upstream)
	}
	if cfg.home != "" {
		if err := os.MkdirAll(filepath.Join(cfg.home, ".codex"), 0o700); err != nil {
			return nil, fmt.Errorf("otelcodex: home: %w", err)
		}
	}
	return &Client{
		bin:      bin,
		cfg:      cfg,
		tracker:  instrument.NewTracker(instrument.WithTracerProvider(cfg.tracerProvider), instrument.WithPropagators(cfg.propagators), instrument.WithWakeFlush(cfg.flushTimeout)),
		tracer:   cfg.tracerProvider.Tracer(ScopeName, trace.WithInstrumentationVersion(Version())),
		upstream: up,
	}, nil
}

// overrides are the -c options that point Codex at the proxy and keep it
// offline but for its model endpoint: no update check, no analytics, no
// plugins, and (unless WithOwnTelemetry) no exporters of its own.
func (c *Client) overrides(proxyURL string) []string {
	kv := []string{
		"model=" + strconv.Quote(c.cfg.model),
		"model_provider=" + strconv.Quote(providerID),
		"model_providers." + providerID + ".name=" + strconv.Quote(providerID),
		"model_providers." + providerID + ".base_url=" + strconv.Quote(proxyURL),
		"model_providers." + providerID + ".wire_api=\"responses\"",
		"model_providers." + providerID + ".env_key=" + strconv.Quote(c.cfg.apiKeyEnv),
		"check_for_update_on_startup=false",
		"analytics.enabled=false",
		"features.plugins=false",
	}
	if !c.cfg.ownTelemetry {
		kv = append(kv, `otel.exporter="none"`, `otel.trace_exporter="none"`, `otel.metrics_exporter="none"`)
	}
	args := make([]string, 0, 2*len(kv))
	for _, s := range kv {
		args = append(args, "-c", s)
	}
	return args
}

// environ is Codex's environment: the current process's without its trace
// context, WithEnv's entries, the private home, then extra.
func (c *Client) environ(extra []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "TRACEPARENT", "TRACESTATE", "BAGGAGE":
			continue
		}
		env = append(env, kv)
	}
	env = append(env, c.cfg.env...)
	if c.cfg.home != "" {
		env = append(env, "HOME="+c.cfg.home, "CODEX_HOME="+filepath.Join(c.cfg.home, ".codex"))
	}
	return append(env, extra...)
}

// Result is what the caller of a prompt gets: the turn that answered it.
type Result struct {
	InvocationID string
	// SessionID is the gen_ai.conversation.id: the thread id of a
	// session, the Client's id of a one-shot run.
	SessionID string
	// ThreadID and TurnID are Codex's (a one-shot run has no turn id).
	ThreadID, TurnID string
	// Text is the turn's last agent message; Status turn/completed's
	// ("completed", "interrupted", "failed").
	Text, Status string
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
