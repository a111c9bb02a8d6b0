// Command firstbyte measures what `agentledger claude` (and `agentledger
// codex`) adds to the time a host waits for the runtime's output: it runs
// the plain Claude Code CLI and `agentledger claude` in front of the same
// CLI (the plain `codex exec` and `agentledger codex exec`), in interleaved
// rounds against the scripted model, and prints, per mode, the median and
// 90th percentile of the time from spawn to the first byte on stdout and
// to the first assistant message (the first model answer, through the
// model-wire proxy for the drop-in), with the ratio of the medians and the
// median of the per-round differences. It asserts nothing: it reports.
//
//	go -C cmd/agentledger build -o ../../.bin/agentledger .
//	go -C cmd/agentledger run ./internal/firstbyte -rounds 20
//
// The drop-in exports its spans over OTLP/HTTP to a loopback sink that
// answers every export (OTEL_BSP_SCHEDULE_DELAY as a host would leave
// it); -otlp names a collector instead.
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/agentledger/agentledger/scriptedmodel"
)

type mode struct {
	name string
	bin  string
	args []string
	env  []string
	// assistant: the run must print an assistant message.
	assistant bool
	// answer marks the line of the first model answer (default
	// answerClaude).
	answer string
}

// The lines that carry a runtime's first model answer.
const (
	answerClaude = `"type":"assistant"`
	answerCodex  = `"type":"agent_message"`
)

// sample is one run's times from spawn.
type sample struct {
	firstByte, firstAssistant, exit time.Duration
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "firstbyte:", err)
		os.Exit(1)
	}
}

func run() error {
	root := repoRoot()
	rounds := flag.Int("rounds", 20, "interleaved rounds of the real CLI (each runs both modes once)")
	trivialRounds := flag.Int("trivial-rounds", 100, "interleaved rounds of a one-line CLI, alone and under agentledger claude (the wrapper's own cost; 0 skips)")
	claude := flag.String("claude", filepath.Join(root, ".cache/claude/node_modules/@anthropic-ai/claude-code-linux-x64/claude"), "the real Claude Code CLI (make claude)")
	agentledger := flag.String("agentledger", filepath.Join(root, ".bin/agentledger"), "the agentledger binary (go -C cmd/agentledger build -o ../../.bin/agentledger .)")
	codex := flag.String("codex", filepath.Join(root, ".cache/codex/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"), "the real Codex CLI, for agentledger codex (make codex)")
	codexRounds := flag.Int("codex-rounds", 20, "interleaved rounds of codex exec, plain and under agentledger codex (0 skips)")
	opencode := flag.String("opencode", filepath.Join(root, ".cache/opencode/node_modules/opencode-linux-x64/bin/opencode"), "opencode, for agentledger opencode-proxy (make opencode)")
	openCodeRoundsN := flag.Int("opencode-rounds", 20, "interleaved rounds of an OpenCode host's requests to opencode serve and to agentledger opencode-proxy (0 skips)")
	otlp := flag.String("otlp", "", "OTLP/HTTP endpoint the drop-in exports to (default: a loopback sink)")
	seedFlag := flag.Uint64("seed", 0, "seed of the order within each round (default random, printed)")
	timeout := flag.Duration("timeout", 60*time.Second, "bound of one run")
	flag.Parse()
	if *rounds < 1 {
		return errors.New("-rounds must be at least 1")
	}
	for _, p := range []string{*claude, *agentledger} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w (see -h for how to make it)", err)
		}
	}
	seed := *seedFlag
	if seed == 0 {
		seed = rand.Uint64()
	}
	model := scriptedmodel.New(scriptedmodel.Options{Responder: func(scriptedmodel.Request) scriptedmodel.Step {
		return scriptedmodel.Step{Text: "Hello from the scripted model.", Usage: scriptedmodel.Usage{InputTokens: 100, OutputTokens: 10}}
	}}).Start()
	defer model.Close()
	if *otlp == "" {
		sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/x-protobuf")
		}))
		defer sink.Close()
		*otlp = sink.URL
	}
	dir, err := os.MkdirTemp("", "firstbyte-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	base := func(home string) []string {
		return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "ANTHROPIC_API_KEY=scripted", "ANTHROPIC_BASE_URL=" + model.URL(),
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "IS_SANDBOX=1"}
	}
	args := []string{"-p", "say hi", "--output-format", "stream-json", "--verbose"}
	dropIn := func(home, cli string) []string {
		return append(base(filepath.Join(dir, home)), "AGENTLEDGER_CLAUDE_BIN="+cli, "OTEL_EXPORTER_OTLP_ENDPOINT="+*otlp)
	}
	// The wrapper's own cost, without the CLI's noise: a CLI that only
	// prints one line.
	trivial := filepath.Join(dir, "trivial-cli")
	if err := os.WriteFile(trivial, []byte("#!/bin/sh\nexec echo '{\"type\":\"system\",\"subtype\":\"init\"}'\n"), 0o755); err != nil {
		return err
	}
	pairs := []struct {
		rounds int
		modes  [2]mode
	}{
		{*rounds, [2]mode{
			{name: "claude", bin: *claude, args: args, env: base(filepath.Join(dir, "plain")), assistant: true},
			{name: "agentledger claude", bin: *agentledger, args: append([]string{"claude"}, args...), env: dropIn("drop-in", *claude), assistant: true},
		}},
		{*trivialRounds, [2]mode{
			{name: "one-line CLI", bin: trivial, args: args, env: base(filepath.Join(dir, "trivial"))},
			{name: "agentledger + it", bin: *agentledger, args: append([]string{"claude"}, args...), env: dropIn("trivial", trivial)},
		}},
	}
	if *codexRounds > 0 {
		// A host's own provider, at the scripted model: agentledger codex
		// points its base URL at the proxy.
		codexArgs := []string{"exec", "--json", "--skip-git-repo-check", "-m", "gpt-5.5"}
		for _, kv := range []string{`model_provider="host"`, `model_providers.host.name="host"`,
			`model_providers.host.base_url="` + model.URL() + `/v1"`, `model_providers.host.wire_api="responses"`,
			`model_providers.host.env_key="OPENAI_API_KEY"`, "check_for_update_on_startup=false",
			"analytics.enabled=false", "features.plugins=false", `otel.exporter="none"`} {
			codexArgs = append(codexArgs, "-c", kv)
		}
		codexArgs = append(codexArgs, "say hi")
		codexEnv := func(home string) []string {
			home = filepath.Join(dir, home)
			return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "CODEX_HOME=" + home, "OPENAI_API_KEY=scripted"}
		}
		pairs = append(pairs, struct {
			rounds int
			modes  [2]mode
		}{*codexRounds, [2]mode{
			{name: "codex exec", bin: *codex, args: codexArgs, env: codexEnv("codex-plain"), assistant: true, answer: answerCodex},
			{name: "agentledger codex", bin: *agentledger, args: append([]string{"codex"}, codexArgs...),
				env: append(codexEnv("codex-drop-in"), "AGENTLEDGER_CODEX_BIN="+*codex, "OTEL_EXPORTER_OTLP_ENDPOINT="+*otlp), assistant: true, answer: answerCodex},
		}})
	}
	r := rand.New(rand.NewPCG(seed, 0))
	fmt.Printf("firstbyte: order seed %d (-seed %d repeats it); times from spawn, one warm-up round first\n", seed, seed)
	for _, p := range pairs {
		if p.rounds == 0 {
			continue
		}
		for _, m := range p.modes {
			if err := os.MkdirAll(envValue(m.env, "HOME"), 0o755); err != nil {
				return err
			}
		}
		var samples [2][]sample
		for round := -1; round < p.rounds; round++ {
			order := []int{0, 1}
			r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for _, i := range order {
				s, err := measure(p.modes[i], *timeout)
				if err != nil {
					return fmt.Errorf("round %d, %s: %w", round+1, p.modes[i].name, err)
				}
				if round >= 0 {
					samples[i] = append(samples[i], s)
				}
			}
		}
		fmt.Printf("\n%d interleaved rounds of %s vs %s\n", p.rounds, p.modes[0].name, p.modes[1].name)
		report(os.Stdout, p.modes, samples)
	}
	if *openCodeRoundsN > 0 {
		return openCodeRounds(os.Stdout, r, *opencode, *agentledger, model.URL(), *otlp, filepath.Join(dir, "opencode"), *openCodeRoundsN, *timeout)
	}
	return nil
}

// measure runs m once and times its stdout from the spawn.
func measure(m mode, timeout time.Duration) (sample, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, m.bin, m.args...)
	cmd.Env = m.env
	cmd.Dir = envValue(m.env, "HOME")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return sample{}, err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return sample{}, err
	}
	answer := m.answer
	if answer == "" {
		answer = answerClaude
	}
	var s sample
	br := bufio.NewReader(out)
	if _, err := br.Peek(1); err == nil {
		s.firstByte = time.Since(start)
	}
	for {
		line, err := br.ReadBytes('\n')
		if s.firstAssistant == 0 && bytes.Contains(line, []byte(answer)) {
			s.firstAssistant = time.Since(start)
		}
		if err != nil {
			break
		}
	}
	if err := cmd.Wait(); err != nil {
		return s, fmt.Errorf("%w: %s", err, lastLine(stderr.Bytes()))
	}
	s.exit = time.Since(start)
	if s.firstByte == 0 || m.assistant && s.firstAssistant == 0 {
		return s, fmt.Errorf("no output or no assistant message: %s", lastLine(stderr.Bytes()))
	}
	return s, nil
}

func report(w io.Writer, modes [2]mode, samples [2][]sample) {
	pick := []struct {
		what string
		of   func(sample) time.Duration
	}{
		{"first byte", func(s sample) time.Duration { return s.firstByte }},
		{"first assistant message", func(s sample) time.Duration { return s.firstAssistant }},
		{"exit", func(s sample) time.Duration { return s.exit }},
	}
	fmt.Fprintf(w, "%-24s %-20s %9s %9s\n", "", "mode", "median", "p90")
	for _, p := range pick {
		if !modes[0].assistant && p.what == "first assistant message" {
			continue
		}
		var med [2]time.Duration
		for i, m := range modes {
			xs := durations(samples[i], p.of)
			med[i] = quantile(xs, 0.5)
			fmt.Fprintf(w, "%-24s %-20s %9s %9s\n", p.what, m.name, ms(med[i]), ms(quantile(xs, 0.9)))
		}
		var diffs []time.Duration
		for k := range samples[0] {
			diffs = append(diffs, p.of(samples[1][k])-p.of(samples[0][k]))
		}
		fmt.Fprintf(w, "%-24s %-20s %9s   ratio of medians %.3f\n", p.what, "per-round difference", ms(quantile(diffs, 0.5)),
			float64(med[1])/float64(med[0]))
	}
}

func durations(ss []sample, of func(sample) time.Duration) []time.Duration {
	out := make([]time.Duration, len(ss))
	for i, s := range ss {
		out[i] = of(s)
	}
	return out
}

// quantile is the nearest-rank quantile q of xs.
func quantile(xs []time.Duration, q float64) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64) + "ms"
}

func envValue(env []string, key string) string {
	for _, kv := range slices.Backward(env) {
		if len(kv) > len(key) && kv[:len(key)+1] == key+"=" {
			return kv[len(key)+1:]
		}
	}
	return ""
}

func lastLine(b []byte) string {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return string(b)
}

// repoRoot is the repository's root, from the working directory up.
func repoRoot() string {
	dir, _ := os.Getwd()
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, ".git")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}
