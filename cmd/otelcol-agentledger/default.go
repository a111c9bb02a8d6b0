package main

import (
	_ "embed"
	"strings"
)

// defaultConfig is collector-config/local.yaml, embedded so that the binary
// run with no --config is the local collector a newcomer expects: OTLP in
// on loopback, the invocation processor with its state on file storage,
// summaries printed and written to ./out/traces.json. A test keeps the copy
// equal to the original; `go generate` refreshes it.
//
//go:generate cp ../../collector-config/local.yaml local.yaml
//go:embed local.yaml
var defaultConfig string

// noConfigCommands are subcommands and flags that need no configuration.
var noConfigCommands = map[string]bool{
	"components": true, "help": true, "completion": true,
	"-h": true, "--help": true, "-v": true, "--version": true,
}

// withDefaultConfig returns args with the embedded configuration added when
// they name none (no --config and no --set), so that plain
// `otelcol-agentledger` runs the local collector. Explicit configuration
// always wins: the default is never merged into it.
func withDefaultConfig(args []string) []string {
	for i, a := range args {
		if i == 0 && noConfigCommands[a] {
			return args
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && (name == "config" || name == "set") {
			return args
		}
		if a == "--" {
			break
		}
	}
	out := make([]string, 0, len(args)+1)
	out = append(out, args...)
	return append(out, "--config=yaml:"+defaultConfig)
}
