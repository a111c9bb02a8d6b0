package otelclaudecode

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/internal/contract"
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
	bin     string
	cfg     config
	tracker *instrument.Tracker
	tracer  trace.Tracer

	lines, malformed, mismatches metric.Int64Counter
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
	c := &Client{
		bin:     bin,
		cfg:     cfg,
		tracker: instrument.NewTracker(instrument.WithTracerProvider(cfg.tracerProvider), instrument.WithPropagators(cfg.propagators)),
		tracer:  cfg.tracerProvider.Tracer(ScopeName, trace.WithInstrumentationVersion(Version())),
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

// Process is one running CLI: `claude -p` reading prompts as stream-json
// lines on stdin. Its methods are safe for concurrent use.
type Process struct {
	c       *Client
	cmd     *exec.Cmd
	m       *mapper
	session string

	// wmu guards stdin and inputClosed.
	wmu         sync.Mutex
	stdin       io.WriteCloser
	inputClosed bool

	interrupted atomic.Bool
	exited      chan struct{}
	// exitErr is the result of cmd.Wait, written before exited is closed.
	exitErr error
	stderr  *tail

	lines, malformed atomic.Int64
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
	pr := m.register(ctx, id)
	pr.inv.Span().SetAttributes(attribute.Bool(contract.AttrRemote, true))
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

// Wait waits until the process has exited and then until the invocation is
// final or incomplete in the ledger.
func (r *Run) Wait(ctx context.Context) (instrument.Summary, error) {
	if err := r.Process.WaitExit(ctx); err != nil {
		return instrument.Summary{InvocationID: r.Result.InvocationID}, err
	}
	return r.Process.Wait(ctx, r.Result.InvocationID)
}

// traceEnv returns environment entries that carry ctx (TRACEPARENT,
// TRACESTATE, BAGGAGE and the configured propagators' fields).
func (c *Client) traceEnv(ctx context.Context) []string {
	carrier := propagation.MapCarrier{}
	c.cfg.propagators.Inject(ctx, carrier)
	propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}).Inject(ctx, carrier)
	env := make([]string, 0, len(carrier))
	for _, k := range carrier.Keys() {
		env = append(env, envName(k)+"="+carrier.Get(k))
	}
	return env
}

func envName(key string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, key)
}

// inherited is the current environment without the trace context a
// parent process may have handed us: the CLI's work is not that parent's.
func inherited() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(name) {
		case "TRACEPARENT", "TRACESTATE", "BAGGAGE":
			continue
		}
		env = append(env, kv)
	}
	return env
}

func (c *Client) launch(ctx context.Context, m *mapper, session string, traceEnv []string) (*Process, error) {
	args := []string{"-p",
		"--input-format", "stream-json", "--output-format", "stream-json",
		"--verbose", "--include-partial-messages", "--replay-user-messages",
		"--session-id", session}
	args = append(args, c.cfg.args...)
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Dir = c.cfg.dir
	cmd.Env = append(append(inherited(), c.cfg.env...), traceEnv...)
	// Its own process group, so that Kill also reaches the shells it runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &Process{c: c, cmd: cmd, m: m, session: session, exited: make(chan struct{}), stderr: &tail{max: 8 << 10}}
	m.onMismatch = func() { c.mismatches.Add(context.Background(), 1) }
	cmd.Cancel = func() error {
		p.interrupted.Store(true)
		return cmd.Process.Signal(syscall.SIGTERM)
	}
	cmd.WaitDelay = c.cfg.killDelay
	var stderr io.Writer = p.stderr
	if c.cfg.stderr != nil {
		stderr = io.MultiWriter(p.stderr, c.cfg.stderr)
	}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("otelclaudecode: stdin: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("otelclaudecode: stdout: %w", err)
	}
	p.stdin = stdin
	if err := cmd.Start(); err != nil {
		m.exit(false)
		return nil, fmt.Errorf("otelclaudecode: start %s: %w", c.bin, err)
	}
	go p.read(stdout)
	return p, nil
}

// read applies the CLI's output until it ends, then ends what is still
// open.
func (p *Process) read(stdout io.Reader) {
	r := bufio.NewReaderSize(stdout, 64<<10)
	for {
		line, err := readLine(r, p.c.cfg.maxLine)
		if len(line) > 0 || errors.Is(err, errLineTooLong) {
			p.lines.Add(1)
			p.c.lines.Add(context.Background(), 1)
			if w := p.c.cfg.transcript; w != nil && !errors.Is(err, errLineTooLong) {
				_, _ = w.Write(append(line, '\n'))
			}
			ev, derr := decodeEvent(line)
			if derr != nil || errors.Is(err, errLineTooLong) {
				p.malformed.Add(1)
				p.c.malformed.Add(context.Background(), 1)
			} else {
				p.m.handle(ev)
			}
		}
		if err != nil && !errors.Is(err, errLineTooLong) {
			break
		}
	}
	p.exitErr = p.cmd.Wait()
	p.m.exit(p.interrupted.Load())
	close(p.exited)
}

var errLineTooLong = errors.New("otelclaudecode: line too long")

// readLine returns the next line without its newline. A line longer than
// max is skipped whole: errLineTooLong.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	tooLong := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			return nil, errLineTooLong
		}
		if n := len(line); n > 0 && line[n-1] == '\n' {
			line = line[:n-1]
		}
		return line, err
	}
}

// userLine is a prompt as the CLI reads it from stdin.
type userLine struct {
	Type    string `json:"type"`
	Message struct {
		Role    string `json:"role"`
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	} `json:"message"`
	UUID            string  `json:"uuid"`
	ParentToolUseID *string `json:"parent_tool_use_id"`
	SessionID       string  `json:"session_id"`
}

func (p *Process) send(uuid, text string) error {
	var l userLine
	l.Type, l.UUID, l.SessionID = "user", uuid, p.session
	l.Message.Role = "user"
	l.Message.Content = append(l.Message.Content, struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}{"text", text})
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.inputClosed {
		return ErrInputClosed
	}
	if _, err := p.stdin.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("otelclaudecode: write prompt: %w", err)
	}
	return nil
}

// Prompt sends a prompt into the session and returns its result: one
// invocation, whose root ends when the result is back. ctx bounds the
// wait, not the invocation: when it is done first, the invocation goes on
// and ends at its result. Work the prompt leaves running (background
// shells, the turns their notifications wake) stays the invocation's.
func (p *Process) Prompt(ctx context.Context, text string) (Result, error) {
	p.wmu.Lock()
	closed := p.inputClosed
	p.wmu.Unlock()
	if closed {
		return Result{}, ErrInputClosed
	}
	select {
	case <-p.exited:
		return Result{}, fmt.Errorf("otelclaudecode: prompt: %w", errExited)
	default:
	}
	id := newUUID()
	pr := p.m.register(ctx, id)
	if pr.err != nil {
		return Result{}, pr.err
	}
	if err := p.send(id, text); err != nil {
		p.m.fail(pr, err)
		return Result{}, err
	}
	return p.await(ctx, pr)
}

func (p *Process) await(ctx context.Context, pr *prompt) (Result, error) {
	select {
	case <-pr.done:
		if pr.err != nil {
			return pr.res, fmt.Errorf("otelclaudecode: prompt: %w%s", pr.err, p.stderr.quote())
		}
		return pr.res, nil
	case <-ctx.Done():
		return Result{InvocationID: pr.inv.ID(), SessionID: p.session}, ctx.Err()
	}
}

// CloseInput closes the CLI's stdin: it exits once its running turns,
// background shells and the turns their notifications wake are done.
func (p *Process) CloseInput() error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.inputClosed {
		return nil
	}
	p.inputClosed = true
	return p.stdin.Close()
}

// Interrupt asks the CLI to stop (SIGTERM): it stops its background shells
// and exits; their followups are closed as interrupted.
func (p *Process) Interrupt() error {
	p.interrupted.Store(true)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// Kill kills the CLI and every process of its process group (its shells)
// at once (SIGKILL); followups still open are closed as interrupted.
func (p *Process) Kill() error {
	p.interrupted.Store(true)
	err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Exited is closed when the process has exited and everything it left
// open has been ended.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// WaitExit waits until the process has exited, or for ctx. It returns the
// process's exit error, if any, after an exit that was not asked for.
func (p *Process) WaitExit(ctx context.Context) error {
	select {
	case <-p.exited:
		if p.exitErr != nil && !p.interrupted.Load() {
			return fmt.Errorf("otelclaudecode: %w%s", p.exitErr, p.stderr.quote())
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// SessionID returns the CLI's session id (gen_ai.conversation.id).
func (p *Process) SessionID() string { return p.session }

// PID returns the CLI's process id.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Stats are counts of the lines read from the CLI.
type Stats struct {
	Lines, Malformed int64
}

// Stats returns the counts of the lines read so far.
func (p *Process) Stats() Stats {
	return Stats{Lines: p.lines.Load(), Malformed: p.malformed.Load()}
}

// State says whether the session still owes work to its invocations.
func (p *Process) State() (instrument.SessionState, error) {
	if p.c.cfg.ledger == nil {
		return instrument.SessionState{}, ErrNoLedger
	}
	return p.c.cfg.ledger.Session(p.session), nil
}

// Wait waits until the invocation id is final or incomplete in the ledger
// (or ctx is done) and returns its summary; every span this Process ended
// has then passed the whole pipeline.
func (p *Process) Wait(ctx context.Context, id string) (instrument.Summary, error) {
	if p.c.cfg.ledger == nil {
		return instrument.Summary{}, ErrNoLedger
	}
	sum, err := p.c.cfg.ledger.Wait(ctx, id)
	p.m.settled()
	return sum, err
}

// tail keeps the last max bytes written to it.
type tail struct {
	max int
	// mu guards buf.
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

func (t *tail) quote() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := strings.TrimSpace(string(t.buf)); s != "" {
		return "; stderr: " + s
	}
	return ""
}

// newUUID returns a random (version 4) UUID, as the CLI's --session-id and
// prompt uuids require.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
