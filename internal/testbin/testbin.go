// Package testbin locates and builds the binaries the integration tests and
// the demo run (the collector distribution, Jaeger, Prometheus, the
// reference agent), reserves free loopback ports, starts and stops those
// processes by PID, and polls them for readiness with bounded loops.
//
// The functions that return errors serve the demo as well as the tests; the
// ones that take a testing.TB register cleanups and skip or fail the test.
package testbin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// EnvE2E is the environment variable that, set to 1, turns a missing binary
// into a test failure instead of a skip (make test and CI set it).
const EnvE2E = "AGENTLEDGER_E2E"

// Environment variables naming the binaries (set by make test).
const (
	EnvCollectorBin  = "AGENTLEDGER_COLLECTOR_BIN"
	EnvJaegerBin     = "JAEGER_BIN"
	EnvPrometheusBin = "PROMETHEUS_BIN"
	EnvOpenCodeBin   = "OPENCODE_BIN"
)

// StopTimeout is how long Stop waits after SIGTERM before it sends SIGKILL.
const StopTimeout = 10 * time.Second

// RepoRoot returns the directory holding the agentledger go.mod, found by
// walking up from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("testbin: working directory: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(data), "module github.com/agentledger/agentledger\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testbin: no agentledger go.mod above the working directory")
		}
		dir = parent
	}
}

// Locate returns the binary named by the environment variable envVar, or
// else the first of the fallbacks (paths relative to the repository root, or
// absolute) that is an executable file. ok is false when none is.
func Locate(envVar string, fallbacks ...string) (path string, ok bool) {
	candidates := fallbacks
	if v := os.Getenv(envVar); v != "" {
		candidates = []string{v}
	}
	root, rootErr := RepoRoot()
	for _, c := range candidates {
		if !filepath.IsAbs(c) {
			if rootErr != nil {
				continue
			}
			c = filepath.Join(root, c)
		}
		if isExecutable(c) {
			return c, true
		}
	}
	if len(candidates) > 0 {
		return candidates[0], false
	}
	return "", false
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// Require returns the binary Locate finds, or ends the test: a failure when
// AGENTLEDGER_E2E=1, a skip otherwise. how tells the reader how to get it.
func Require(t testing.TB, envVar, how string, fallbacks ...string) string {
	t.Helper()
	path, ok := Locate(envVar, fallbacks...)
	if ok {
		return path
	}
	msg := fmt.Sprintf("%s not found (set %s or run %s)", describe(path), envVar, how)
	if os.Getenv(EnvE2E) == "1" {
		t.Fatalf("%s; %s=1 makes this a failure", msg, EnvE2E)
	}
	t.Skipf("%s; skipping (set %s=1 to fail instead)", msg, EnvE2E)
	return ""
}

func describe(path string) string {
	if path == "" {
		return "binary"
	}
	return path
}

// FreeAddr returns a 127.0.0.1:port address whose port was free a moment
// ago (the kernel picked it for a listener that is closed again).
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("testbin: reserve a port: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", fmt.Errorf("testbin: release %s: %w", addr, err)
	}
	return addr, nil
}

// FreeAddrs returns n distinct free loopback addresses.
func FreeAddrs(n int) ([]string, error) {
	// Hold every listener until all are chosen so the kernel cannot hand
	// out the same port twice.
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	addrs := make([]string, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testbin: reserve a port: %w", err)
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

// Port returns the port part of a host:port address.
func Port(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	return port
}

// Process is a child process started by Start. Its output goes to LogPath.
type Process struct {
	// Name labels the process in messages.
	Name string
	// LogPath is the file holding the process's stdout and stderr.
	LogPath string

	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	// err is the result of cmd.Wait, written before done is closed.
	err error
}

// Start runs bin with args, its working directory dir ("" for the current
// one), the current environment plus env, and stdout and stderr appended to
// logPath. It does not wait for the process to become ready.
func Start(name, logPath, dir string, env []string, bin string, args ...string) (*Process, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return nil, fmt.Errorf("testbin: log directory for %s: %w", name, err)
	}
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testbin: log file for %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = log
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("testbin: start %s (%s): %w", name, bin, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = log.Close()
		close(p.done)
	}()
	return p, nil
}

// StartT is Start for tests: the log goes into the test's temporary
// directory, and the process is stopped by PID when the test ends, pass or
// fail; a failed test gets the tail of the log.
func StartT(t testing.TB, name string, env []string, bin string, args ...string) *Process {
	t.Helper()
	p, err := Start(name, filepath.Join(t.TempDir(), name+".log"), "", env, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(StopTimeout); err != nil {
			t.Logf("stop %s: %v", name, err)
		}
		if t.Failed() {
			t.Logf("--- %s log (%s), last lines:\n%s", name, p.LogPath, p.Tail(60))
		}
	})
	return p
}

// PID returns the process ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err returns how the process exited; nil while it runs.
func (p *Process) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Stop sends SIGTERM to the process (by its PID) and waits up to timeout
// for it to exit, then sends SIGKILL. Stopping an exited process is a no-op.
func (p *Process) Stop(timeout time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("testbin: SIGTERM %s (pid %d): %w", p.Name, p.PID(), err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("testbin: SIGKILL %s (pid %d): %w", p.Name, p.PID(), err)
	}
	<-p.done
	return fmt.Errorf("testbin: %s (pid %d) ignored SIGTERM for %v and was killed", p.Name, p.PID(), timeout)
}

// Kill sends SIGKILL to the process (by its PID) and waits for it to exit:
// a crash, with no chance to clean up. Killing an exited process is a
// no-op.
func (p *Process) Kill() error {
	select {
	case <-p.done:
		return nil
	default:
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("testbin: SIGKILL %s (pid %d): %w", p.Name, p.PID(), err)
	}
	<-p.done
	return nil
}

// Tail returns the last n lines of the process's log.
func (p *Process) Tail(n int) string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Poll calls check every interval until it reports done, returns an error,
// or ctx ends; the last "not yet" reason is part of the timeout error.
func Poll(ctx context.Context, interval time.Duration, check func() (done bool, why string, err error)) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	why := "not checked"
	for {
		done, reason, err := check()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		why = reason
		select {
		case <-ctx.Done():
			return fmt.Errorf("testbin: gave up waiting: %s: %w", why, context.Cause(ctx))
		case <-ticker.C:
		}
	}
}

// WaitReady polls url until it answers 200, the process exits, or ctx ends.
func WaitReady(ctx context.Context, p *Process, url string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	err := Poll(ctx, 100*time.Millisecond, func() (bool, string, error) {
		select {
		case <-p.Done():
			return false, "", fmt.Errorf("testbin: %s exited before it was ready (%v); log:\n%s", p.Name, p.Err(), p.Tail(40))
		default:
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, "", fmt.Errorf("testbin: %w", err)
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, err.Error(), nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Sprintf("%s answered %s", url, resp.Status), nil
		}
		return true, "", nil
	})
	if err != nil {
		return fmt.Errorf("%s not ready at %s: %w", p.Name, url, err)
	}
	return nil
}

// GoBuild builds the main package in directory pkg (relative to the
// repository root, e.g. "examples/shellagent"; not an import path: the
// build runs inside the module that holds that directory) into out, with
// -v progress written to progress (nil for none).
func GoBuild(ctx context.Context, pkg, out string, progress io.Writer) error {
	root, err := RepoRoot()
	if err != nil {
		return err
	}
	args := []string{"build", "-o", out}
	if progress != nil {
		args = append(args, "-v")
	}
	// Each directory of the repository belongs to its own module (the
	// collector, the examples), so the build runs in the package's
	// directory, inside its module.
	cmd := exec.CommandContext(ctx, goTool(), append(args, ".")...)
	cmd.Dir = filepath.Join(root, pkg)
	var stderr strings.Builder
	if progress != nil {
		cmd.Stdout = progress
		cmd.Stderr = io.MultiWriter(progress, &stderr)
	} else {
		cmd.Stderr = &stderr
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("testbin: go build %s: %w\n%s", pkg, err, stderr.String())
	}
	return nil
}

// BuildT builds the main package pkg into the test's temporary directory and
// returns the binary's path.
func BuildT(t testing.TB, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := GoBuild(ctx, pkg, out, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

func goTool() string {
	if goroot := os.Getenv("GOROOT"); goroot != "" {
		if p := filepath.Join(goroot, "bin", "go"); isExecutable(p) {
			return p
		}
	}
	return "go"
}
