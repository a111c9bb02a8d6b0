package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/agentledger/agentledger/instrument/otelclaudecode"
)

// envClaudeBin names the real Claude Code CLI; without it, the first
// claude on PATH that is not this binary.
const envClaudeBin = "AGENTLEDGER_CLAUDE_BIN"

// forwarded are the signals the drop-in passes on to the CLI. SIGPIPE is
// caught so that a host that stops reading fails our write (and so the
// CLI's) instead of killing us before the last spans are exported.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGTSTP, syscall.SIGCONT, syscall.SIGPIPE}

// runClaude is `agentledger claude [args...]`: the real CLI with args
// unchanged, its streams, exit code and signals passed through, its
// prompts recorded as invocations (otelclaudecode.Client.Exec).
func runClaude(ctx context.Context, env environ, args []string, io stdio) int {
	bin, err := claudeBin(env)
	if err != nil {
		fmt.Fprintf(io.err, "agentledger claude: %v\n", err)
		return 127
	}
	cfg, err := readExportConfig(env)
	if err != nil {
		fmt.Fprintf(io.err, "agentledger claude: %v\n", err)
		return 2
	}
	tp, err := newPipeline(ctx, cfg, "agentledger-claude", io.err)
	if err != nil {
		fmt.Fprintf(io.err, "agentledger claude: %v\n", err)
		return 2
	}
	client, err := otelclaudecode.New(bin, otelclaudecode.WithTracerProvider(tp), otelclaudecode.WithFlushTimeout(cfg.flush))
	if err != nil {
		shutdownPipeline(tp, cfg, io.err)
		fmt.Fprintf(io.err, "agentledger claude: %v\n", err)
		return 127
	}
	// Caught before the CLI starts, so that none is lost in between.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	p, err := client.Exec(ctx, args, otelclaudecode.Stdio{Stdin: io.in, Stdout: io.out, Stderr: io.err})
	if err != nil {
		shutdownPipeline(tp, cfg, io.err)
		fmt.Fprintf(io.err, "agentledger claude: %v\n", err)
		return 127
	}
	relaySignals(sigs, p, isTerminal(io.in), "agentledger claude", io.err)
	shutdownPipeline(tp, cfg, io.err)
	return exitCode(p.ExitState())
}

// runtime is a drop-in's running runtime: otelclaudecode's and
// otelcodex's Process.
type runtime interface {
	Signal(os.Signal) error
	Exited() <-chan struct{}
}

// relaySignals passes the signals caught on sigs on to p until it has
// exited. With a terminal on stdin (interactive), the terminal's own
// signals reach the runtime in our process group by themselves.
func relaySignals(sigs <-chan os.Signal, p runtime, interactive bool, name string, errs io.Writer) {
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGPIPE || interactive && fromTerminal(sig) {
				continue
			}
			if err := p.Signal(sig); err != nil {
				fmt.Fprintf(errs, "%s: passing on %v: %v\n", name, sig, err)
			}
		case <-p.Exited():
			return
		}
	}
}

// fromTerminal reports whether a terminal sends sig to its foreground
// process group.
func fromTerminal(sig os.Signal) bool {
	switch sig {
	case syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTSTP, syscall.SIGWINCH, syscall.SIGHUP, syscall.SIGCONT:
		return true
	}
	return false
}

func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// exitCode returns the CLI's exit code. A CLI killed by a signal is
// passed on as such: the signal's default action is restored and raised
// on this process; should that not end it, 128+signal.
func exitCode(st *os.ProcessState) int {
	if st == nil {
		return 1
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		sig := ws.Signal()
		signal.Reset(sig)
		_ = syscall.Kill(os.Getpid(), sig)
		return 128 + int(sig)
	}
	return st.ExitCode()
}

// claudeBin finds the real CLI: AGENTLEDGER_CLAUDE_BIN, else the first
// executable claude on PATH that is not this binary (installed as
// claude, agentledger must not run itself).
func claudeBin(env environ) (string, error) {
	return findBin(env, envClaudeBin, "claude", "claude CLI")
}

// findBin finds a runtime's real executable: the path in the variable
// named override, else the first executable name on PATH that is not
// this binary.
func findBin(env environ, override, name, what string) (string, error) {
	if v, ok := env(override); ok && v != "" {
		return v, nil
	}
	self, err := os.Executable()
	if err == nil {
		self, _ = filepath.EvalSymlinks(self)
	}
	path, _ := env("PATH")
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		cand := filepath.Join(dir, name)
		st, err := os.Stat(cand)
		if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			continue
		}
		if real, err := filepath.EvalSymlinks(cand); err == nil && real == self {
			continue
		}
		return cand, nil
	}
	return "", errors.New("no " + what + " found: set " + override + " to the real " + what + "'s path, or put it on PATH")
}
