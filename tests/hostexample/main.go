// Command hostexample runs the README's TypeScript host (host.mjs: the Claude
// Agent SDK through agentledger's drop-in) against a real collector and a
// scripted model, and checks that the invocation's final summary, as the
// host read it from the collector's status API, adds up to exactly what
// the model served (random usage from a printed seed).
//
//	make build claude sdk-hosts
//	make host-example            (or: go -C tests run ./hostexample)
//
// It starts the collector (.bin/otelcol-agentledger,
// collector-config/local.yaml, free loopback ports), the scripted model
// and builds the drop-in (cmd/agentledger) into a temporary directory; the
// host's prompt asks for a background shell that ends a few seconds after
// the result, so the host sees the session owe work, releases it, wakes on
// the notification's turn, reattaches and prints the final summary.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentledger/agentledger/internal/testbin"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// Where the Makefile puts what the example needs, relative to the
// repository root; the environment variables of `make test` override them.
const (
	defaultCLI     = ".cache/claude/node_modules/@anthropic-ai/claude-code-linux-x64/claude"
	defaultModules = ".cache/sdk-hosts/node_modules"
	envCLI         = "CLAUDE_BIN"
	envModules     = "AGENTLEDGER_SDK_MODULES"
	envNode        = "NODE_BIN"
)

type config struct {
	collector, cli, modules, node string
	// python runs release_watch.py beside the host ("" skips it).
	python string
	seed   uint64
	// shell is how long the background shell runs after it starts.
	shell   time.Duration
	timeout time.Duration
}

// Final is the host's last line: the invocation's summary from the
// collector's status API.
type Final struct {
	Status string `json:"-"`
	ID     string `json:"id"`
	Usage  struct {
		InputTokens              int64 `json:"input_tokens"`
		OutputTokens             int64 `json:"output_tokens"`
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
		ReasoningOutputTokens    int64 `json:"reasoning_output_tokens"`
	} `json:"usage"`
	ModelCalls     int64    `json:"model_calls"`
	BackgroundJobs int64    `json:"background_jobs"`
	Continuations  int64    `json:"continuations"`
	Reasons        []string `json:"reasons"`
}

// Outcome is what the run found: the host's final summary and what the
// scripted model served.
type Outcome struct {
	Final Final
	// Python is release_watch.py's report of the same invocation (nil
	// without python3).
	Python   *Final
	Served   scriptedmodel.Usage
	Requests int
}

// Matches reports whether the summary is final and equals what the model
// served, and if not, why.
func (o Outcome) Matches() error {
	f, s := o.Final, o.Served
	if f.Status != "final" {
		return fmt.Errorf("the invocation is %s %v, not final", f.Status, f.Reasons)
	}
	if f.Usage.InputTokens != int64(s.InputTokens) || f.Usage.OutputTokens != int64(s.OutputTokens) ||
		f.Usage.CacheReadInputTokens != int64(s.CacheReadTokens) || f.Usage.CacheCreationInputTokens != int64(s.CacheCreationTokens) ||
		f.Usage.ReasoningOutputTokens != int64(s.ReasoningTokens) || f.ModelCalls != int64(o.Requests) {
		return fmt.Errorf("the final summary %+v in %d model calls differs from what the model served, %+v in %d requests",
			f.Usage, f.ModelCalls, s, o.Requests)
	}
	if p := o.Python; p != nil && (p.Status != f.Status || p.ID != f.ID || p.Usage != f.Usage || p.ModelCalls != f.ModelCalls) {
		return fmt.Errorf("release_watch.py reported %s %+v in %d model calls for %s; the host %s %+v in %d for %s",
			p.Status, p.Usage, p.ModelCalls, p.ID, f.Status, f.Usage, f.ModelCalls, f.ID)
	}
	return nil
}

func main() {
	var cfg config
	flag.StringVar(&cfg.collector, "collector", "", "the collector distribution (default $"+testbin.EnvCollectorBin+" or .bin/otelcol-agentledger: make build)")
	flag.StringVar(&cfg.cli, "claude", "", "the real Claude Code CLI (default $"+envCLI+" or "+defaultCLI+": make claude)")
	flag.StringVar(&cfg.modules, "modules", "", "node_modules holding @anthropic-ai/claude-agent-sdk (default $"+envModules+" or "+defaultModules+": make sdk-hosts)")
	flag.Uint64Var(&cfg.seed, "seed", defaultSeed(), "seed of the scripted model's random usage (default $AGENTLEDGER_USAGE_SEED, else random)")
	flag.DurationVar(&cfg.shell, "shell", 3*time.Second, "how long the background shell runs")
	flag.DurationVar(&cfg.timeout, "timeout", 3*time.Minute, "longest the whole run may take")
	flag.Parse()
	if err := locate(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, "host:", err)
		os.Exit(2)
	}
	o, err := run(context.Background(), cfg, os.Stdout)
	if err == nil {
		err = o.Matches()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "host:", err)
		os.Exit(1)
	}
	fmt.Printf("the final summary equals what the scripted model served: %d requests, input %d output %d cache read %d cache creation %d reasoning %d\n",
		o.Requests, o.Served.InputTokens, o.Served.OutputTokens, o.Served.CacheReadTokens, o.Served.CacheCreationTokens, o.Served.ReasoningTokens)
}

// locate fills in the binaries the flags left empty; an error names
// what is missing and how to get it.
func locate(cfg *config) error {
	var missing []string
	find := func(p *string, env, how string, fallbacks ...string) {
		if *p != "" {
			return
		}
		path, ok := testbin.Locate(env, fallbacks...)
		if !ok {
			missing = append(missing, fmt.Sprintf("%s (set %s or run %s)", path, env, how))
		}
		*p = path
	}
	find(&cfg.collector, testbin.EnvCollectorBin, "make build", ".bin/otelcol-agentledger")
	find(&cfg.cli, envCLI, "make claude", defaultCLI)
	if cfg.node == "" {
		if p, ok := testbin.Locate(envNode); ok {
			cfg.node = p
		} else if p, err := exec.LookPath("node"); err == nil {
			cfg.node = p
		} else {
			missing = append(missing, "node (set "+envNode+" or install Node.js)")
		}
	}
	if cfg.python == "" {
		cfg.python, _ = exec.LookPath("python3")
	}
	if cfg.modules == "" {
		cfg.modules = os.Getenv(envModules)
		if cfg.modules == "" {
			if root, err := testbin.RepoRoot(); err == nil {
				cfg.modules = filepath.Join(root, defaultModules)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(cfg.modules, "@anthropic-ai", "claude-agent-sdk")); err != nil {
		missing = append(missing, fmt.Sprintf("@anthropic-ai/claude-agent-sdk in %q (set %s or run make sdk-hosts)", cfg.modules, envModules))
	}
	if len(missing) > 0 {
		return errors.New("missing " + strings.Join(missing, "; "))
	}
	return nil
}

// defaultSeed is AGENTLEDGER_USAGE_SEED, as the other e2e tests read it,
// or else a random seed.
func defaultSeed() uint64 {
	if v, err := strconv.ParseUint(os.Getenv("AGENTLEDGER_USAGE_SEED"), 10, 64); err == nil {
		return v
	}
	return rand.Uint64()
}

// usage is the scripted model's random usage for its seq'th answer.
func usage(seed uint64) func(int) scriptedmodel.Usage {
	return func(seq int) scriptedmodel.Usage {
		r := rand.New(rand.NewPCG(seed, uint64(seq)))
		in := 200 + r.IntN(8000)
		out := 5 + r.IntN(1500)
		return scriptedmodel.Usage{InputTokens: in, CacheReadTokens: r.IntN(in / 3), CacheCreationTokens: r.IntN(in / 3),
			OutputTokens: out, ReasoningTokens: r.IntN(out/2 + 1)}
	}
}

// run starts the collector, the model and the host, copies the host's
// output to out, and returns the host's final summary with what the model
// served.
func run(ctx context.Context, cfg config, out io.Writer) (Outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	root, err := testbin.RepoRoot()
	if err != nil {
		return Outcome{}, err
	}
	dir, err := os.MkdirTemp("", "agentledger-host-")
	if err != nil {
		return Outcome{}, err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintf(out, "scripted usage seed %d (-seed %d repeats it)\n", cfg.seed, cfg.seed)

	addrs, err := testbin.NewCollectorAddrs(filepath.Join(dir, "collector"))
	if err != nil {
		return Outcome{}, err
	}
	col, err := testbin.StartCollector(ctx, cfg.collector, filepath.Join(root, "collector-config", "local.yaml"), addrs, filepath.Join(dir, "collector.log"))
	if col != nil {
		defer func() { _ = col.Stop(testbin.StopTimeout) }()
	}
	if err != nil {
		return Outcome{}, err
	}

	say := func(text string) func(scriptedmodel.Request) scriptedmodel.Step {
		return func(scriptedmodel.Request) scriptedmodel.Step { return scriptedmodel.Step{Text: text} }
	}
	command := fmt.Sprintf("sleep %.1f; echo tests passed", cfg.shell.Seconds())
	model := scriptedmodel.NewRouter(usage(cfg.seed),
		scriptedmodel.Rule{Name: "notification", Match: func(r scriptedmodel.Request) bool { return len(r.TaskNotifications()) > 0 },
			Answer: say("The tests passed.")},
		scriptedmodel.Rule{Name: "tool result", Match: func(r scriptedmodel.Request) bool { return len(r.ToolResults()) > 0 },
			Answer: say("The tests run in the background.")},
		scriptedmodel.Rule{Name: "launch", Match: func(r scriptedmodel.Request) bool { return strings.Contains(r.NewText(), "background") },
			Answer: func(scriptedmodel.Request) scriptedmodel.Step {
				return scriptedmodel.Step{ToolCalls: []scriptedmodel.ToolCall{scriptedmodel.BashCall(command, "Run the tests", true)}}
			}},
		scriptedmodel.Rule{Name: "plain", Answer: say("Hello from the scripted model.")},
	)
	srv := scriptedmodel.New(scriptedmodel.Options{Responder: model.Respond}).Start()
	defer srv.Close()

	// The drop-in, built as claude (the name picks the runtime).
	dropIn := filepath.Join(dir, "bin", "claude")
	if err := testbin.GoBuild(ctx, "cmd/agentledger", dropIn, nil); err != nil {
		return Outcome{}, err
	}
	// The host beside its helpers and the SDKs, as an npm project has them.
	hostDir, home, project := filepath.Join(dir, "host"), filepath.Join(dir, "home"), filepath.Join(dir, "project")
	for _, d := range []string{hostDir, home, project} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return Outcome{}, err
		}
	}
	for _, f := range []string{"examples/host/host.mjs", "cmd/agentledger/hosttest/status.mjs", "cmd/agentledger/hosttest/story.mjs"} {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return Outcome{}, err
		}
		if err := os.WriteFile(filepath.Join(hostDir, filepath.Base(f)), b, 0o644); err != nil {
			return Outcome{}, err
		}
	}
	modules, err := filepath.Abs(cfg.modules)
	if err != nil {
		return Outcome{}, err
	}
	if err := os.Symlink(modules, filepath.Join(hostDir, "node_modules")); err != nil {
		return Outcome{}, err
	}

	cmd := exec.CommandContext(ctx, cfg.node, "host.mjs")
	cmd.Dir = hostDir
	cmd.Env = append(os.Environ(),
		"AGENTLEDGER_CLAUDE="+dropIn, "CLAUDE_CLI="+cfg.cli, "MODEL_URL="+srv.URL(),
		"OTLP_HTTP=http://"+addrs.OTLPHTTP, "STATUS_URL=http://"+addrs.Status,
		"HOST_HOME="+home, "HOST_DIR="+project)
	cmd.Stderr = out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return Outcome{}, err
	}
	if err := cmd.Start(); err != nil {
		return Outcome{}, err
	}
	var last string
	var py *exec.Cmd
	var pyOut strings.Builder
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		last = sc.Text()
		fmt.Fprintln(out, last)
		// The Python host's half, asked about the same session at the
		// same moment: once, then watch, then report.
		if _, rest, ok := strings.Cut(last, "(session "); ok && py == nil && cfg.python != "" {
			session, _, _ := strings.Cut(rest, ",")
			py = exec.CommandContext(ctx, cfg.python, filepath.Join(root, "examples", "host", "release_watch.py"), "http://"+addrs.Status, session)
			py.Stdout, py.Stderr = &pyOut, &pyOut
			if err := py.Start(); err != nil {
				return Outcome{}, err
			}
		}
	}
	waitErr := cmd.Wait()
	o := Outcome{}
	if py != nil {
		pyErr := py.Wait()
		for _, l := range strings.Split(strings.TrimRight(pyOut.String(), "\n"), "\n") {
			fmt.Fprintln(out, "release_watch.py: "+l)
		}
		if pyErr != nil {
			return o, fmt.Errorf("release_watch.py: %w", pyErr)
		}
		f, err := parseFinal(lastLine(pyOut.String()))
		if err != nil {
			return o, fmt.Errorf("release_watch.py: %w", err)
		}
		o.Python = &f
	}
	o.Served, o.Requests = model.Sum("notification", "tool result", "launch", "plain")
	f, err := parseFinal(last)
	if err != nil {
		if waitErr != nil {
			return o, fmt.Errorf("node host.mjs: %w\n--- collector log, last lines:\n%s", waitErr, col.Tail(20))
		}
		return o, fmt.Errorf("the host: %w", err)
	}
	o.Final = f
	return o, nil
}

// parseFinal reads a "<status> <json>" summary line.
func parseFinal(line string) (Final, error) {
	var f Final
	status, body, ok := strings.Cut(line, " ")
	if !ok || !strings.HasPrefix(body, "{") {
		return f, fmt.Errorf("the last line is not a summary: %q", line)
	}
	if err := json.Unmarshal([]byte(body), &f); err != nil {
		return f, fmt.Errorf("the summary %q: %w", body, err)
	}
	f.Status = status
	return f, nil
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndexByte(s, '\n')+1:]
}
