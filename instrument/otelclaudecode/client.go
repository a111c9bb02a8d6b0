package otelclaudecode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/genaicall"
	"github.com/agentledger/agentledger/instrument/internal/wireproxy"
)

// ErrNoLedger is returned by Wait and State of a Client made without
// WithLedger.
var ErrNoLedger = errors.New("otelclaudecode: no ledger (use WithLedger)")

// ErrInputClosed is returned by Prompt after CloseInput.
var ErrInputClosed = errors.New("otelclaudecode: input closed")

// Result is what the caller of a prompt gets: the CLI's result line that
// answered it.
type Result struct {
	InvocationID string
	SessionID    string
	// Text is the result's text; IsError and Subtype ("success",
	// "error_max_turns", ...) its outcome.
	Text     string
	IsError  bool
	Subtype  string
	NumTurns int64
}

// Client runs the Claude Code CLI (claude) and records each prompt as an
// invocation. A Client is safe for concurrent use; it holds no process
// itself.
type Client struct {
	bin      string
	cfg      config
	tracker  *instrument.Tracker
	tracer   trace.Tracer
	upstream *url.URL

	lines, malformed, mismatches metric.Int64Counter

	// mu guards procs: the processes running, whose spans Wait settles.
	mu    sync.Mutex
	procs map[*Process]struct{}
}

// New returns a Client that runs the CLI at bin (for example the path
// `make claude` installs, or "claude" from PATH). A relative path is taken
// from the current directory, not from WithDir.
func New(bin string, opts ...Option) (*Client, error) {
	if bin == "" {
		return nil, errors.New("otelclaudecode: no CLI path")
	}
	var err error
	if strings.ContainsRune(bin, filepath.Separator) {
		bin, err = filepath.Abs(bin)
	} else {
		bin, err = exec.LookPath(bin)
	}
	if err != nil {
		return nil, fmt.Errorf("otelclaudecode: CLI %w", err)
	}
	cfg := newConfig(opts)
	up, err := resolveUpstream(cfg)
	if err != nil {
		return nil, err
	}
	c := &Client{
		bin:      bin,
		cfg:      cfg,
		tracker:  instrument.NewTracker(instrument.WithTracerProvider(cfg.tracerProvider), instrument.WithPropagators(cfg.propagators), instrument.WithWakeFlush(cfg.flushTimeout)),
		tracer:   cfg.tracerProvider.Tracer(ScopeName, trace.WithInstrumentationVersion(Version())),
		upstream: up,
		procs:    make(map[*Process]struct{}),
	}
	meter := cfg.meterProvider.Meter(ScopeName, metric.WithInstrumentationVersion(Version()))
	// Errors from instrument creation leave a usable no-op instrument.
	c.lines, _ = meter.Int64Counter("agentledger.claudecode.lines",
		metric.WithDescription("Lines read from the Claude Code CLI's stream-json output."), metric.WithUnit("{line}"))
	c.malformed, _ = meter.Int64Counter("agentledger.claudecode.lines.malformed",
		metric.WithDescription("Lines of the CLI's output that could not be decoded or were too long (skipped)."), metric.WithUnit("{line}"))
	c.mismatches, _ = meter.Int64Counter("agentledger.claudecode.usage.mismatches",
		metric.WithDescription("Results whose reported usage differed from the model calls seen (recorded as usage_missing)."), metric.WithUnit("{result}"))
	return c, nil
}

// Start starts a warm session: the CLI waits for prompts (Prompt) and runs
// until CloseInput and the work it has left, or until ctx is done, which
// interrupts it (SIGTERM, then SIGKILL after WithKillDelay): its running
// background shells are stopped and their followups closed as
// interrupted. Claude Code takes its tracing parent only from its
// environment, once per process, so a session's CLI gets no TRACEPARENT:
// its own spans, if enabled, are not under any one invocation (Run is).
func (c *Client) Start(ctx context.Context) (*Process, error) {
	session := newUUID()
	p, err := c.launch(ctx, newMapper(c.tracer, c.tracker, c.cfg.agent, session), session, nil)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Run is a one-shot `claude -p`: one prompt, one invocation.
type Run struct {
	Process *Process
	// Result is the first result: what the caller gets.
	Result Result
}

// Run runs the CLI for one prompt: the invocation's root starts before the
// process, whose environment carries its context (TRACEPARENT, BAGGAGE)
// so that Claude Code's own spans, when its telemetry is on, sit under the
// root, and so do the spans of any instrumented program its shells run
// (the root is marked invocation.remote). It returns at the first result,
// while the process may go on with background shells and the turns their
// notifications wake; Run.Wait waits for all of it. ctx bounds the
// process's whole life, as with Start.
func (c *Client) Run(ctx context.Context, text string) (*Run, error) {
	session := newUUID()
	m := newMapper(c.tracer, c.tracker, c.cfg.agent, session)
	id := newUUID()
	pr := m.register(ctx, id, text)
	if c.remote() {
		pr.inv.Span().SetAttributes(attribute.Bool(contract.AttrRemote, true))
	}
	p, err := c.launch(ctx, m, session, c.traceEnv(pr.ctx))
	if err != nil {
		m.fail(pr, err)
		return nil, err
	}
	if err := p.send(id, text); err != nil {
		m.fail(pr, err)
		return nil, errors.Join(err, p.Kill())
	}
	_ = p.CloseInput()
	res, err := p.await(ctx, pr)
	if err != nil {
		return nil, err
	}
	return &Run{Process: p, Result: res}, nil
}

// Wait waits until the invocation id (of any of the Client's processes)
// is final or incomplete in the ledger, or ctx is done, and returns its
// summary; every span the Client's running processes ended has then
// passed the whole pipeline. It is Process.Wait without the process, as
// in otelopencode.
func (c *Client) Wait(ctx context.Context, id string) (instrument.Summary, error) {
	if c.cfg.ledger == nil {
		return instrument.Summary{}, ErrNoLedger
	}
	sum, err := c.cfg.ledger.Wait(ctx, id)
	c.mu.Lock()
	procs := make([]*Process, 0, len(c.procs))
	for p := range c.procs {
		procs = append(procs, p)
	}
	c.mu.Unlock()
	for _, p := range procs {
		p.m.settled()
	}
	return sum, err
}

// Session returns what the CLI session id (Process.SessionID, the
// Result's SessionID) still owes its invocations, as Process.State does.
func (c *Client) Session(session string) (instrument.SessionState, error) {
	if c.cfg.ledger == nil {
		return instrument.SessionState{}, ErrNoLedger
	}
	return c.cfg.ledger.Session(session), nil
}

// remote reports whether a one-shot root is marked invocation.remote
// (WithRemote).
func (c *Client) remote() bool {
	if c.cfg.remote != nil {
		return *c.cfg.remote
	}
	v, _ := lookupEnv(c.cfg.env, "CLAUDE_CODE_ENABLE_TELEMETRY")
	return v != "" && v != "0"
}

// Wait waits until the process has exited and then until the invocation is
// final or incomplete in the ledger.
func (r *Run) Wait(ctx context.Context) (instrument.Summary, error) {
	if err := r.Process.WaitExit(ctx); err != nil {
		return instrument.Summary{InvocationID: r.Result.InvocationID}, err
	}
	return r.Process.Wait(ctx, r.Result.InvocationID)
}

func (c *Client) launch(ctx context.Context, m *mapper, session string, traceEnv []string) (*Process, error) {
	args := []string{"-p",
		"--input-format", "stream-json", "--output-format", "stream-json",
		"--verbose", "--include-partial-messages", "--replay-user-messages",
		"--session-id", session}
	args = append(args, c.cfg.args...)
	p, err := c.newProcess(m, session)
	if err != nil {
		return nil, err
	}
	cmd := c.command(ctx, p, args, traceEnv)
	// Its own process group, so that Kill also reaches the shells it runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr io.Writer = p.stderr
	if c.cfg.stderr != nil {
		stderr = io.MultiWriter(p.stderr, c.cfg.stderr)
	}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		p.closeProxy()
		return nil, fmt.Errorf("otelclaudecode: stdin: %w", err)
	}
	p.stdin = stdin
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		p.closeProxy()
		return nil, fmt.Errorf("otelclaudecode: stdout: %w", err)
	}
	if err := c.start(p, stdout); err != nil {
		return nil, err
	}
	return p, nil
}

// newProcess returns a Process for mapper m with its model-wire proxy
// running; command and start run its CLI.
func (c *Client) newProcess(m *mapper, session string) (*Process, error) {
	p := &Process{c: c, m: m, session: session, exited: make(chan struct{}), stderr: &tail{max: 8 << 10}, group: true}
	// One middleware per process: the calls it holds open for a retry
	// end when the process exits, since nothing will retry them.
	p.wire = genaicall.New(genaicall.Config{
		TracerProvider: c.cfg.tracerProvider,
		MeterProvider:  c.cfg.meterProvider,
		// The proxy adds no header of its own to the requests.
		Propagators: propagation.NewCompositeTextMapPropagator(),
	}.WithDefaults(), genaicall.Scope{Name: ScopeName, Version: Version(), Provider: providerName})
	proxy, err := wireproxy.Start(wireproxy.Config{
		Upstream:   c.upstream,
		Middleware: p.wire,
		Describe:   describe,
		Attribute:  m.attribute,
		Oversized:  func(*http.Request) { m.oversized() },
	})
	if err != nil {
		m.exit(false)
		return nil, fmt.Errorf("otelclaudecode: model-wire proxy: %w", err)
	}
	p.proxy = proxy
	m.onMismatch = func() { c.mismatches.Add(context.Background(), 1) }
	return p, nil
}

// command returns p's CLI command: bin with args, the Client's directory
// and environment, the proxy as its model endpoint.
func (c *Client) command(ctx context.Context, p *Process, args, traceEnv []string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Dir = c.cfg.dir
	// The CLI's model endpoint is the proxy; later entries win.
	cmd.Env = append(append(append(inherited(), c.cfg.env...), traceEnv...), "ANTHROPIC_BASE_URL="+p.proxy.URL())
	p.cmd = cmd
	cmd.Cancel = func() error {
		p.interrupted.Store(true)
		return cmd.Process.Signal(syscall.SIGTERM)
	}
	cmd.WaitDelay = c.cfg.killDelay
	return cmd
}

// start starts p's command and reads stdout, its output, until it ends.
func (c *Client) start(p *Process, stdout io.Reader) error {
	p.sync = newStreamSync(stdout)
	p.m.syncStream = func() bool { return p.sync.wait(DefaultStreamSync, p.exited) }
	if err := p.cmd.Start(); err != nil {
		p.m.exit(false)
		p.closeProxy()
		return fmt.Errorf("otelclaudecode: start %s: %w", c.bin, err)
	}
	c.mu.Lock()
	c.procs[p] = struct{}{}
	c.mu.Unlock()
	go p.read(stdout)
	return nil
}

// resolveUpstream returns the model endpoint of cfg: WithUpstream, else
// the last ANTHROPIC_BASE_URL of WithEnv, else the environment's, else
// DefaultUpstream.
func resolveUpstream(cfg config) (*url.URL, error) {
	raw, from := cfg.upstream, "WithUpstream"
	if raw == "" {
		if v, ok := lookupEnv(cfg.env, "ANTHROPIC_BASE_URL"); ok && v != "" {
			raw, from = v, "ANTHROPIC_BASE_URL in WithEnv"
		} else if v := os.Getenv("ANTHROPIC_BASE_URL"); v != "" {
			raw, from = v, "ANTHROPIC_BASE_URL"
		} else {
			raw, from = DefaultUpstream, "DefaultUpstream"
		}
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("otelclaudecode: model endpoint %q (%s) is not an http or https URL with a host", raw, from)
	}
	return u, nil
}

// lookupEnv returns the value of the last KEY=value entry of env for key.
func lookupEnv(env []string, key string) (string, bool) {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}
