// Command agentledger runs a coding agent's runtime as a drop-in for its
// official SDKs, so that a host in any language gets the agentledger
// ledger without writing Go: every prompt becomes an invocation exported
// over OTLP (the standard OTEL_EXPORTER_OTLP_* variables), every model
// request is counted on the wire through a loopback proxy, and the
// collector's invocation_status API answers by the runtime's own ids.
//
//	agentledger claude [claude args...]
//	agentledger codex [codex args...]
//	agentledger opencode-proxy --listen ADDR --upstream URL [--model-upstream URL [--model-listen ADDR] [--opencode-config FILE --provider ID]]
//
// Each subcommand is one small file (claude.go, codex.go, opencode.go)
// over one adapter (instrument/otelclaudecode, instrument/otelcodex,
// instrument/otelopencode); a drop-in
// for another runtime is one more entry in subcommands.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// subcommand is one drop-in: run gets the arguments after its name and
// returns the process's exit code.
type subcommand struct {
	name, usage string
	run         func(ctx context.Context, env environ, args []string, stdio stdio) int
}

// subcommands are the drop-ins: see README.md, "Adding a drop-in".
var subcommands = []subcommand{
	{"claude", "agentledger claude [claude args...]: run the Claude Code CLI (AGENTLEDGER_CLAUDE_BIN, else claude on PATH) as a drop-in", runClaude},
	{"codex", "agentledger codex [codex args...]: run the Codex CLI (AGENTLEDGER_CODEX_BIN, else codex on PATH) as a drop-in for codex exec and codex app-server", runCodex},
	{"opencode-proxy", "agentledger opencode-proxy --listen ADDR --upstream URL: a reverse proxy in front of opencode serve that records its prompts", runOpencodeProxy},
}

// stdio are the process's standard streams.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// environ looks up environment variables (os.LookupEnv, or a map in
// tests).
type environ func(string) (string, bool)

func main() {
	os.Exit(run(context.Background(), os.LookupEnv, os.Args, stdio{os.Stdin, os.Stdout, os.Stderr}))
}

// run dispatches on the subcommand, or on the name the binary was called
// by (see calledAs): installed or linked as claude, agentledger-claude,
// codex, agentledger-codex or agentledger-opencode-proxy, agentledger is
// that subcommand.
func run(ctx context.Context, env environ, argv []string, io stdio) int {
	if len(argv) > 0 {
		if sc, ok := calledAs(argv[0]); ok {
			return sc.run(ctx, env, argv[1:], io)
		}
	}
	if len(argv) < 2 || slices.Contains([]string{"-h", "-help", "--help", "help"}, argv[1]) {
		usage(io.err)
		if len(argv) < 2 {
			return 2
		}
		return 0
	}
	for _, sc := range subcommands {
		if sc.name == argv[1] {
			return sc.run(ctx, env, argv[2:], io)
		}
	}
	fmt.Fprintf(io.err, "agentledger: unknown subcommand %q\n", argv[1])
	usage(io.err)
	return 2
}

// calledAs returns the subcommand a binary named like argv0 stands for:
// "agentledger-<subcommand>" (a link next to the real runtime, as the
// READMEs install it), or the runtime's own name for the executables a
// host runs by path (claude, codex).
func calledAs(argv0 string) (subcommand, bool) {
	name := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	for _, sc := range subcommands {
		if name == "agentledger-"+sc.name {
			return sc, true
		}
		if name == sc.name && (sc.name == "claude" || sc.name == "codex") {
			return sc, true
		}
	}
	return subcommand{}, false
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage:")
	for _, sc := range subcommands {
		fmt.Fprintln(w, "  "+sc.usage)
	}
	fmt.Fprintln(w, "Called through a link named agentledger-<subcommand> (or claude, codex), agentledger is that subcommand.")
	fmt.Fprintln(w, "OTLP export: OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL (http/protobuf or grpc), OTEL_EXPORTER_OTLP_HEADERS, OTEL_SERVICE_NAME, ...; OTEL_TRACES_EXPORTER=none exports nothing.")
}
