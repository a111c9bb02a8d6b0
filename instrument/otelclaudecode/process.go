package otelclaudecode

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/flush"
	"github.com/agentledger/agentledger/instrument/internal/genaicall"
	"github.com/agentledger/agentledger/instrument/internal/wireproxy"
)

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

	// proxy is the model-wire proxy the CLI's requests go through; sync
	// tells it when the stream has been read up to a request.
	proxy *wireproxy.Proxy
	// wire makes the proxy's model-call spans.
	wire *genaicall.Middleware
	sync *streamSync

	// group is set when the CLI leads a process group of its own (Kill
	// then reaches its shells).
	group bool
	// tee, when set, gets the CLI's stdout line by line once each line
	// is handled (Exec: the host's stdout).
	tee io.Writer
	// given are the uuids Exec gave the host's prompts (namePrompt).
	given givenIDs

	interrupted atomic.Bool
	exited      chan struct{}
	// exitErr is the result of cmd.Wait, written before exited is closed.
	exitErr error
	stderr  *tail

	lines, malformed atomic.Int64
}

// read applies the CLI's output until it ends, then ends what is still
// open.
func (p *Process) read(stdout io.Reader) {
	in := p.sync.reader(stdout)
	// The host gets each line once it is handled: a result once its
	// invocation is exported.
	var gate *flush.Gate
	if p.tee != nil {
		gate = flush.NewGate(p.tee)
		in = io.TeeReader(in, gate)
	}
	r := bufio.NewReaderSize(in, 64<<10)
	for stdout != nil {
		line, err := readLine(r, p.c.cfg.maxLine)
		var edit func([]byte) []byte
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
				if gate != nil && ev.Type == typeResult {
					p.c.flushSpans()
				}
				if gate != nil && ev.Type == typeCommandLifecycle && p.given.has(ev.UUID, ev.Status) {
					edit = dropLine
				}
			}
		}
		// The host stopped reading: as a failed write of the TeeReader.
		released := gate == nil || gate.Release(r.Buffered(), edit) == nil
		p.sync.handled(r.Buffered())
		if !released || err != nil && !errors.Is(err, errLineTooLong) {
			break
		}
	}
	if c, ok := stdout.(io.Closer); ok {
		// Nobody reads the CLI now (the host's stdout failed): its next
		// write fails, as it would without us in between.
		_ = c.Close()
	}
	p.exitErr = p.cmd.Wait()
	p.closeProxy()
	p.m.exit(p.interrupted.Load())
	p.c.mu.Lock()
	delete(p.c.procs, p)
	p.c.mu.Unlock()
	close(p.exited)
}

// closeProxy stops the model-wire proxy: the CLI has exited (or never
// started), and with it every request it had in flight.
func (p *Process) closeProxy() {
	ctx, cancel := context.WithTimeout(context.Background(), p.c.cfg.killDelay)
	defer cancel()
	_ = p.proxy.Close(ctx)
	// A call whose last attempt failed waits for the CLI's retry: there
	// is none now.
	p.wire.EndParked()
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
	pr := p.m.register(ctx, id, text)
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
		p.c.flushSpans()
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
// at once (SIGKILL); followups still open are closed as interrupted. A CLI
// that Exec left in the caller's process group is killed alone.
func (p *Process) Kill() error {
	p.interrupted.Store(true)
	pid := p.cmd.Process.Pid
	if p.group {
		pid = -pid
	}
	err := syscall.Kill(pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Signal sends sig to the CLI (only to it, not to its process group), as
// a drop-in passes on the signals it gets. A signal that stops the CLI
// (SIGINT, SIGTERM, SIGHUP, SIGQUIT) marks its exit as interrupted: the
// followups it leaves open are closed as interrupted.
func (p *Process) Signal(sig os.Signal) error {
	switch sig {
	case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT:
		p.interrupted.Store(true)
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// ExitState returns how the CLI exited, once Exited is closed; nil
// before, or when it could not be started.
func (p *Process) ExitState() *os.ProcessState {
	select {
	case <-p.exited:
		return p.cmd.ProcessState
	default:
		return nil
	}
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
