package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/agentledger/agentledger/instrument/otelcodex"
)

// envCodexBin names the real Codex CLI; without it, the first codex on
// PATH that is not this binary.
const envCodexBin = "AGENTLEDGER_CODEX_BIN"

// runCodex is `agentledger codex [args...]`: the real Codex CLI with args
// as given but for its model endpoint (the proxy's), its streams, exit
// code and signals passed through, `codex exec`'s turn and app-server's
// turns recorded as invocations (otelcodex.Client.Exec).
func runCodex(ctx context.Context, env environ, args []string, io stdio) int {
	bin, err := findBin(env, envCodexBin, "codex", "Codex CLI")
	if err != nil {
		fmt.Fprintf(io.err, "agentledger codex: %v\n", err)
		return 127
	}
	cfg, err := readExportConfig(env)
	if err != nil {
		fmt.Fprintf(io.err, "agentledger codex: %v\n", err)
		return 2
	}
	tp, err := newPipeline(ctx, cfg, "agentledger-codex", io.err)
	if err != nil {
		fmt.Fprintf(io.err, "agentledger codex: %v\n", err)
		return 2
	}
	client, err := otelcodex.New(bin, otelcodex.WithTracerProvider(tp), otelcodex.WithFlushTimeout(cfg.flush))
	if err != nil {
		shutdownPipeline(tp, cfg, io.err)
		fmt.Fprintf(io.err, "agentledger codex: %v\n", err)
		return 127
	}
	// Caught before Codex starts, so that none is lost in between.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	p, err := client.Exec(ctx, args, otelcodex.Stdio{Stdin: io.in, Stdout: io.out, Stderr: io.err})
	if err != nil {
		shutdownPipeline(tp, cfg, io.err)
		fmt.Fprintf(io.err, "agentledger codex: %v\n", err)
		return 127
	}
	relaySignals(sigs, p, isTerminal(io.in), "agentledger codex", io.err)
	shutdownPipeline(tp, cfg, io.err)
	return exitCode(p.ExitState())
}
