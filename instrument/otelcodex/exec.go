package otelcodex

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/flush"
	"github.com/agentledger/agentledger/instrument/internal/wireproxy"
)

// Stdio are the standard streams Exec passes through between a host and
// Codex.
type Stdio struct {
	// Stdin is what the host writes to Codex; nil gives it none
	// (/dev/null).
	Stdin io.Reader
	// Stdout gets Codex's output, byte for byte as it comes.
	Stdout io.Writer
	// Stderr gets Codex's stderr; nil keeps only the tail quoted in
	// errors.
	Stderr io.Writer
}

// Process is a Codex that a host drives itself (Exec).
type Process struct {
	c      *Client
	m      *mapper
	mode   execMode
	cmd    *exec.Cmd
	proxy  *wireproxy.Proxy
	stderr *tail
	// stopped is set when the process was asked to stop (a signal passed
	// on, its context done) rather than exiting by itself.
	stopped atomic.Bool
	exited  chan struct{}

	// root is a `codex exec`'s invocation, started by its first model
	// request; rootEnded once turn.completed (or the exit) ended it.
	// Both are guarded by m.mu.
	root      *instrument.Invocation
	rootEnded bool

	// startsMu guards starts: the host's app-server turn/start requests
	// awaiting their response, by JSON-RPC id, with their thread id.
	startsMu   sync.Mutex
	starts     map[string]string
	startOrder []string
}

// Exec runs Codex as a drop-in for the codex executable, for a host that
// drives it itself (@openai/codex-sdk's codexPathOverride, an IDE's
// app-server client): with args as given and the host's streams passed
// through unchanged. Only the model endpoint changes: the -c options that
// set the base URL of the provider Codex uses (openai_base_url for the
// built-in "openai", model_providers.<id>.base_url for the others) are
// set to the proxy's, and one more such -c is added after them; the proxy
// forwards to the URL they gave, else to config.toml's in CODEX_HOME
// (top-level model_provider, openai_base_url and [model_providers.<id>]
// base_url; no profiles), else OPENAI_BASE_URL, else WithUpstream. The
// environment is Exec's as for Run (WithEnv and WithHome added, the trace
// context removed); the Client's other -c overrides are not added.
//
//   - `codex exec` (--json or --experimental-json, a resume included) is
//     one invocation whose id is Codex's turn id and whose session
//     (gen_ai.conversation.id) its thread id, both as the first model
//     request's X-Codex-Turn-Metadata names them: the root starts then
//     and ends at turn.completed (or turn.failed). The SDK shows neither
//     id of a turn to its host but thread.id; the collector's session
//     answers by it and names its invocations. Codex's own spans are
//     under no invocation (the root starts after the process).
//   - `codex app-server` (JSON-RPC on stdio): every turn/start the host
//     writes is an invocation, whose id is the turn id app-server answers
//     and whose session the request's threadId; its root ends at the
//     turn's turn/completed. Codex starts no turn when a background
//     command ends, and Exec starts none either (the streams are the
//     host's): the command's followup stays open until a turn reads its
//     exit (write_stdin), which discharges it or closes it consumed_by
//     that turn's invocation, or until the process exits.
//   - anything else (login, the TUI, app-server's schema generators) runs
//     unchanged, unrecorded and without the proxy.
//
// Background commands, tool uses and unattributed requests are recorded
// as for Run and Start. Unless stdin is a terminal, Codex runs in a
// process group of its own and the caller passes signals on with
// Process.Signal. Exec returns once Codex has started; Exited is closed,
// and ExitState says how it exited, once it has and what it left open has
// ended. ctx bounds Codex as with Run.
func (c *Client) Exec(ctx context.Context, args []string, stdio Stdio) (*Process, error) {
	h := readHostArgs(args)
	env := c.environ(nil)
	x := &Process{c: c, mode: h.mode, stderr: &tail{max: 8 << 10}, exited: make(chan struct{}), starts: map[string]string{}}
	cmd := exec.CommandContext(ctx, c.bin)
	cmd.Dir = c.cfg.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: !isTerminal(stdio.Stdin)}
	cmd.Cancel = func() error {
		x.stopped.Store(true)
		return cmd.Process.Signal(syscall.SIGTERM)
	}
	cmd.WaitDelay = c.cfg.killDelay
	x.cmd = cmd
	switch f, isFile := stdio.Stderr.(*os.File); {
	case isFile:
		cmd.Stderr = f
	case stdio.Stderr != nil:
		cmd.Stderr = io.MultiWriter(x.stderr, stdio.Stderr)
	default:
		cmd.Stderr = x.stderr
	}
	if h.mode == modeOther {
		cmd.Args, cmd.Env = append(cmd.Args, args...), env
		cmd.Stdin, cmd.Stdout = stdio.Stdin, stdio.Stdout
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("otelcodex: start %s: %w", c.bin, err)
		}
		go func() {
			_ = cmd.Wait()
			close(x.exited)
		}()
		return x, nil
	}

	e := resolveEndpoint(args, h, codexHome(env), func(k string) string { return lookupEnv(env, k) })
	upstream := c.upstream
	if e.baseURL != "" {
		u, err := url.Parse(e.baseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("otelcodex: %s %q is not an http or https URL with a host", e.key, e.baseURL)
		}
		upstream = u
	}
	x.m = newMapper(c.tracer, c.tracker, c.cfg.agent, "", c.cfg.turnSync)
	proxy, err := c.startProxy(x.m, upstream, x.attribute)
	if err != nil {
		return nil, err
	}
	x.proxy = proxy
	cmd.Args = append(cmd.Args, h.rewrite(args, e, proxy.URL())...)
	if e.provider == "openai" && lookupEnv(env, "OPENAI_BASE_URL") != "" {
		env = append(env, "OPENAI_BASE_URL="+proxy.URL())
	}
	cmd.Env = env

	var toCodex io.WriteCloser
	switch {
	case h.mode == modeAppServer && stdio.Stdin != nil && !isTerminal(stdio.Stdin):
		if toCodex, err = cmd.StdinPipe(); err != nil {
			x.closeProxy()
			return nil, fmt.Errorf("otelcodex: stdin: %w", err)
		}
	default:
		cmd.Stdin = stdio.Stdin
	}
	var stdout io.ReadCloser
	tee := stdio.Stdout
	if isTerminal(tee) {
		cmd.Stdout = tee
	} else {
		if tee == nil {
			tee = io.Discard
		}
		if stdout, err = cmd.StdoutPipe(); err != nil {
			x.closeProxy()
			return nil, fmt.Errorf("otelcodex: stdout: %w", err)
		}
	}
	if err := cmd.Start(); err != nil {
		x.closeProxy()
		return nil, fmt.Errorf("otelcodex: start %s: %w", c.bin, err)
	}
	if toCodex != nil {
		go x.feed(stdio.Stdin, toCodex)
	}
	go x.read(stdout, tee)
	return x, nil
}

// codexHome is CODEX_HOME in env, else $HOME/.codex.
func codexHome(env []string) string {
	if v := lookupEnv(env, "CODEX_HOME"); v != "" {
		return v
	}
	return filepath.Join(lookupEnv(env, "HOME"), ".codex")
}

// lookupEnv returns the last value of key in env.
func lookupEnv(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// isTerminal reports whether s is a character device (a terminal, or
// /dev/null, which is as well given as it is).
func isTerminal(s any) bool {
	f, ok := s.(*os.File)
	if !ok || f == nil {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// read copies Codex's stdout to tee and applies it (nil when it is the
// host's terminal) until it ends, then waits for the process and ends
// what is still open.
func (x *Process) read(stdout io.ReadCloser, tee io.Writer) {
	if stdout != nil {
		// The host gets each line once it is handled: a turn's end once
		// its invocation is exported.
		gate := flush.NewGate(tee)
		r := bufio.NewReaderSize(io.TeeReader(stdout, gate), 64<<10)
		for {
			line, err := readLine(r, x.c.cfg.maxLine)
			var edit func([]byte) []byte
			if len(line) > 0 {
				if w := x.c.cfg.transcript; w != nil {
					_, _ = w.Write(append(line, '\n'))
				}
				edit = x.line(line)
			}
			if gate.Release(r.Buffered(), edit) != nil || err != nil {
				break
			}
		}
		// Past a failed write (the host stopped reading), Codex's next
		// write fails as it would on the host's closed pipe.
		_ = stdout.Close()
	}
	err := x.cmd.Wait()
	x.m.exit(x.stopped.Load())
	x.m.mu.Lock()
	if x.root != nil && !x.rootEnded {
		x.rootEnded = true
		endSpan(x.root.Span(), errors.Join(errExited, exitError(err, x.stderr)))
	}
	x.m.mu.Unlock()
	x.closeProxy()
	close(x.exited)
}

// line handles one line of Codex's stdout. A line that ends a turn is
// passed on once the turn's invocation is exported, with the edit it
// returns (exec: the turn's id added).
func (x *Process) line(line []byte) (edit func([]byte) []byte) {
	if x.mode == modeExec {
		if edit = x.execLine(line); edit != nil {
			x.c.flushSpans()
		}
		return edit
	}
	var msg rpcMessage
	if json.Unmarshal(line, &msg) != nil {
		return nil
	}
	if msg.Method == "turn/completed" && len(msg.ID) == 0 {
		defer x.c.flushSpans()
	}
	switch {
	case msg.Method == "" && len(msg.ID) > 0:
		x.response(msg)
	case msg.Method != "" && len(msg.ID) == 0:
		x.m.event(readEvent(msg.Method, msg.Params))
		// Nobody is told: the host reads the same notifications.
		x.m.takeCompletions()
	}
	return nil
}

func (x *Process) closeProxy() {
	if x.proxy != nil {
		(&proc{proxy: x.proxy}).closeProxy()
	}
}

// Signal passes sig on to Codex. SIGINT, SIGTERM, SIGHUP and SIGQUIT mark
// the process stopped: what it leaves open closes interrupted.
func (x *Process) Signal(sig os.Signal) error {
	switch sig {
	case syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT:
		x.stopped.Store(true)
	}
	if err := x.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// Exited is closed once Codex has exited and what it left open has ended.
func (x *Process) Exited() <-chan struct{} { return x.exited }

// ExitState returns how Codex exited, once Exited is closed; nil before.
func (x *Process) ExitState() *os.ProcessState {
	select {
	case <-x.exited:
		return x.cmd.ProcessState
	default:
		return nil
	}
}
