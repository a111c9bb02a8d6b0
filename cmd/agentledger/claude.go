package main

import (
	"context"
	"errors"
	"fmt"
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
	client, err := otelclaudecode.New(bin, otelclaudecode.WithTracerProvider(tp))
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
	interactive := isTerminal(io.in)
	for done := false; !done; {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGPIPE || interactive && fromTerminal(sig) {
				// A terminal's signals reach the CLI in our process
				// group by themselves.
				continue
			}
			if err := p.Signal(sig); err != nil {
				fmt.Fprintf(io.err, "agentledger claude: passing on %v: %v\n", sig, err)
			}
		case <-p.Exited():
			done = true
		}
	}
	shutdownPipeline(tp, cfg, io.err)
	return exitCode(p.ExitState())
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
	if v, ok := env(envClaudeBin); ok && v != "" {
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
		cand := filepath.Join(dir, "claude")
		st, err := os.Stat(cand)
		if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			continue
		}
		if real, err := filepath.EvalSymlinks(cand); err == nil && real == self {
			continue
		}
		return cand, nil
	}
	return "", errors.New("no claude CLI found: set " + envClaudeBin + " to the real CLI's path, or put it on PATH")
}
