package otelcodex

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/agentledger/agentledger/instrument/internal/genaicall"
	"github.com/agentledger/agentledger/instrument/internal/wireproxy"
)

// proc is one running Codex process with its model-wire proxy.
type proc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.ReadCloser
	proxy  *wireproxy.Proxy
	stderr *tail
	// stopped is set when the process was stopped (its context done,
	// Kill) rather than exiting by itself.
	stopped atomic.Bool
	exited  chan struct{}
	err     error
}

// launch starts Codex with args (the subcommand and its options; the
// Client adds the -c overrides after them and then trailing) and the extra
// environment entries, with its own model-wire proxy whose calls m
// attributes. withStdin keeps a pipe to its stdin.
func (c *Client) launch(ctx context.Context, m *mapper, args, trailing, extraEnv []string, withStdin bool) (*proc, error) {
	proxy, err := c.startProxy(m, c.upstream, m.attribute)
	if err != nil {
		return nil, err
	}
	p := &proc{proxy: proxy, stderr: &tail{max: 8 << 10}, exited: make(chan struct{})}
	full := append(append(append(append([]string(nil), c.cfg.args...), args...), c.overrides(proxy.URL())...), trailing...)
	cmd := exec.CommandContext(ctx, c.bin, full...)
	cmd.Dir = c.cfg.dir
	cmd.Env = c.environ(extraEnv)
	// Its own process group, so that a kill reaches the commands it runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		p.stopped.Store(true)
		return cmd.Process.Signal(syscall.SIGTERM)
	}
	cmd.WaitDelay = c.cfg.killDelay
	var stderr io.Writer = p.stderr
	if c.cfg.stderr != nil {
		stderr = io.MultiWriter(p.stderr, c.cfg.stderr)
	}
	cmd.Stderr = stderr
	if withStdin {
		if p.stdin, err = cmd.StdinPipe(); err != nil {
			p.closeProxy()
			return nil, fmt.Errorf("otelcodex: stdin: %w", err)
		}
	}
	if p.stdout, err = cmd.StdoutPipe(); err != nil {
		p.closeProxy()
		return nil, fmt.Errorf("otelcodex: stdout: %w", err)
	}
	p.cmd = cmd
	if err := cmd.Start(); err != nil {
		p.closeProxy()
		return nil, fmt.Errorf("otelcodex: start %s: %w", c.bin, err)
	}
	return p, nil
}

// startProxy starts a model-wire proxy forwarding to upstream, whose
// calls attribute decides and m's spans record.
func (c *Client) startProxy(m *mapper, upstream *url.URL, attribute func(*http.Request, []byte) wireproxy.Decision) (*wireproxy.Proxy, error) {
	wire := genaicall.New(genaicall.Config{
		TracerProvider: c.cfg.tracerProvider,
		MeterProvider:  c.cfg.meterProvider,
		// The proxy adds no header of its own to the requests.
		Propagators: propagation.NewCompositeTextMapPropagator(),
	}.WithDefaults(), genaicall.Scope{Name: ScopeName, Version: Version(), Provider: providerAttr.Value.AsString()})
	proxy, err := wireproxy.Start(wireproxy.Config{
		Upstream:   upstream,
		Middleware: wire,
		Describe:   describe,
		Attribute:  attribute,
		Oversized:  func(*http.Request) { m.oversized() },
	})
	if err != nil {
		return nil, fmt.Errorf("otelcodex: model-wire proxy: %w", err)
	}
	return proxy, nil
}

// lines reads the process's stdout line by line until EOF, handing each
// line to f (and to the transcript), then waits for the process, ends
// what m holds open and closes the proxy.
func (c *Client) lines(p *proc, m *mapper, f func([]byte)) {
	r := bufio.NewReaderSize(p.stdout, 64<<10)
	for {
		line, err := readLine(r, c.cfg.maxLine)
		if len(line) > 0 {
			if c.cfg.transcript != nil {
				_, _ = c.cfg.transcript.Write(append(line, '\n'))
			}
			f(line)
		}
		if err != nil {
			break
		}
	}
	p.err = p.cmd.Wait()
	m.exit(p.stopped.Load())
	p.closeProxy()
	close(p.exited)
}

// readLine returns the next line without its newline; a line longer than
// max is skipped (nil, nil).
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	long := false
	for {
		chunk, err := r.ReadSlice('\n')
		if !long {
			if len(buf)+len(chunk) > max {
				long, buf = true, nil
			} else {
				buf = append(buf, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if long {
			return nil, err
		}
		if n := len(buf); n > 0 && buf[n-1] == '\n' {
			buf = buf[:n-1]
		}
		return buf, err
	}
}

func (p *proc) closeProxy() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = p.proxy.Close(ctx)
}

// kill stops the process: SIGKILL to its process group.
func (p *proc) kill() error {
	p.stopped.Store(true)
	if p.cmd.Process == nil {
		return nil
	}
	err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// exitError describes how the process ended, with its stderr's tail.
func (p *proc) exitError() error { return exitError(p.err, p.stderr) }

// exitError describes a Wait error err, with the stderr's tail.
func exitError(err error, stderr *tail) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("otelcodex: codex: %w; stderr: %s", err, stderr.String())
}

// tail keeps the last max bytes written to it.
type tail struct {
	max int
	mu  sync.Mutex
	b   []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
