// Command claudecode runs the real Claude Code CLI through the agentledger
// Claude Code instrumentation (instrument/otelclaudecode), offline against
// a scripted Anthropic model started in process, and prints one JSON line
// per invocation on stdout with its final usage; logs (with each
// invocation's state when its caller got the result) go to stderr. With
// -otlp it also exports its spans over OTLP/gRPC to a collector with the
// invocation processor.
//
// The prompt asks for a background shell: the caller gets its result
// while the shell still runs ("pending"), and the invocation is final once
// the turn the shell's completion notification wakes is over.
//
//	make claude
//	go run ./examples/claudecode
//	go run ./examples/claudecode -scenario session -otlp 127.0.0.1:4317
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/otelclaudecode"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// defaultCLI is where `make claude` installs the CLI.
const defaultCLI = ".cache/claude/node_modules/@anthropic-ai/claude-code-linux-x64/claude"

type config struct {
	cli      string
	scenario string
	otlp     string
	timeout  time.Duration
	// exporter, when set, also receives every span (tests).
	exporter sdktrace.SpanExporter
}

func main() {
	var cfg config
	flag.StringVar(&cfg.cli, "claude", "", "path of the claude CLI (default: "+defaultCLI+" in this directory or the nearest one above that has it, where `make claude` installs it)")
	flag.StringVar(&cfg.scenario, "scenario", "run", "run: one `claude -p` with a background shell; session: a warm session, a second prompt while the first prompt's shell runs")
	flag.StringVar(&cfg.otlp, "otlp", "", "OTLP/gRPC endpoint host:port (insecure); none: in-process ledger only")
	flag.DurationVar(&cfg.timeout, "timeout", 2*time.Minute, "longest the whole run may take")
	flag.Parse()
	if cfg.cli == "" {
		cfg.cli = findUp(defaultCLI)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(context.Background(), cfg, os.Stdout, log); err != nil {
		log.Error("claudecode example failed", "err", err)
		os.Exit(1)
	}
}

// line is the JSON line printed per invocation, with the field names of
// the other examples.
type line struct {
	InvocationID             string   `json:"invocation_id"`
	SessionID                string   `json:"session_id"`
	Status                   string   `json:"status"`
	InputTokens              int64    `json:"input_tokens"`
	OutputTokens             int64    `json:"output_tokens"`
	CacheReadInputTokens     int64    `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64    `json:"cache_creation_input_tokens"`
	ReasoningOutputTokens    int64    `json:"reasoning_output_tokens"`
	AfterResultInputTokens   int64    `json:"after_result_input_tokens"`
	AfterResultOutputTokens  int64    `json:"after_result_output_tokens"`
	ModelCalls               int64    `json:"model_calls"`
	BackgroundJobs           int64    `json:"background_jobs"`
	Continuations            int64    `json:"continuations"`
	TimeToFinalMS            int64    `json:"time_to_final_ms"`
	Reasons                  []string `json:"reasons,omitempty"`
}

func lineOf(s instrument.Summary) line {
	u := s.Usage
	return line{
		InvocationID: s.InvocationID, SessionID: s.SessionID, Status: string(s.Status),
		InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheReadInputTokens: u.CacheReadInputTokens, CacheCreationInputTokens: u.CacheCreationInputTokens,
		ReasoningOutputTokens:  u.ReasoningOutputTokens,
		AfterResultInputTokens: u.AfterResultInputTokens, AfterResultOutputTokens: u.AfterResultOutputTokens,
		ModelCalls: u.ModelCalls, BackgroundJobs: u.BackgroundJobs, Continuations: u.Continuations,
		TimeToFinalMS: s.TimeToFinalMS(), Reasons: s.Reasons,
	}
}

// stepUsage is what every scripted response reports, in GenAI terms: of
// the 120 input tokens 80 are cache reads and 20 cache creations, so the
// API says input_tokens=20.
var stepUsage = scriptedmodel.Usage{InputTokens: 120, OutputTokens: 15, CacheReadTokens: 80, CacheCreationTokens: 20, ReasoningTokens: 5}

// model answers like a model would: a prompt asking for background work
// gets a Bash call with run_in_background running command, its tool
// result and a task notification get a short text, anything else a plain
// answer.
func model(command string) *scriptedmodel.Router {
	say := func(text string) func(scriptedmodel.Request) scriptedmodel.Step {
		return func(scriptedmodel.Request) scriptedmodel.Step { return scriptedmodel.Step{Text: text} }
	}
	return scriptedmodel.NewRouter(func(int) scriptedmodel.Usage { return stepUsage },
		scriptedmodel.Rule{Name: "notification", Match: func(r scriptedmodel.Request) bool { return len(r.TaskNotifications()) > 0 },
			Answer: func(r scriptedmodel.Request) scriptedmodel.Step {
				n := r.TaskNotifications()[0]
				return scriptedmodel.Step{Text: "The background job " + n.Status + ": " + n.Summary}
			}},
		scriptedmodel.Rule{Name: "tool result", Match: func(r scriptedmodel.Request) bool { return len(r.ToolResults()) > 0 },
			Answer: say("The tests run in the background; I will report when they end.")},
		scriptedmodel.Rule{Name: "launch", Match: func(r scriptedmodel.Request) bool { return strings.Contains(r.NewText(), "background") },
			Answer: func(scriptedmodel.Request) scriptedmodel.Step {
				return scriptedmodel.Step{ToolCalls: []scriptedmodel.ToolCall{scriptedmodel.BashCall(command, "Run the tests", true)}}
			}},
		scriptedmodel.Rule{Name: "plain", Answer: say("Nothing changed since the last commit.")},
	)
}

func newPipeline(ctx context.Context, cfg config) (*sdktrace.TracerProvider, *instrument.Ledger, error) {
	var next sdktrace.SpanProcessor
	if cfg.otlp != "" {
		exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(cfg.otlp), otlptracegrpc.WithInsecure())
		if err != nil {
			return nil, nil, fmt.Errorf("otlp exporter: %w", err)
		}
		next = sdktrace.NewBatchSpanProcessor(exp)
	}
	if cfg.exporter != nil {
		next = sdktrace.NewSimpleSpanProcessor(cfg.exporter)
	}
	sp := instrument.NewSpanProcessor(next)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(sp),
		// Sampler declares any span the sampler drops inside an
		// invocation, so that nothing says final without it.
		sdktrace.WithSampler(instrument.Sampler(sdktrace.ParentBased(sdktrace.AlwaysSample()))),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("claudecode-example"))),
	)
	return tp, sp.Ledger(), nil
}

func run(ctx context.Context, cfg config, stdout io.Writer, log *slog.Logger) (err error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	tp, ledger, err := newPipeline(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		flushCtx, cancelFlush := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancelFlush()
		err = errors.Join(err, tp.Shutdown(flushCtx))
	}()
	dir, err := os.MkdirTemp("", "claudecode-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	for _, d := range []string{"home", "project"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	// The shell waits for a gate the example opens once the caller got its
	// result, as real work would outlive the call.
	gate := filepath.Join(dir, "gate")
	command := fmt.Sprintf("for i in $(seq 1 1200); do [ -e %q ] && break; sleep 0.05; done; echo tests passed", gate)
	srv := scriptedmodel.New(scriptedmodel.Options{Responder: model(command).Respond}).Start()
	defer srv.Close()

	client, err := otelclaudecode.New(cfg.cli,
		otelclaudecode.WithTracerProvider(tp),
		otelclaudecode.WithLedger(ledger),
		otelclaudecode.WithDir(filepath.Join(dir, "project")),
		otelclaudecode.WithArgs("--dangerously-skip-permissions"),
		otelclaudecode.WithEnv(
			"HOME="+filepath.Join(dir, "home"),
			"ANTHROPIC_BASE_URL="+srv.URL(),
			"ANTHROPIC_API_KEY=scripted",
			"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
			"DISABLE_AUTOUPDATER=1",
			"DISABLE_TELEMETRY=1",
			// As root, Claude Code accepts --dangerously-skip-permissions
			// only in a sandbox.
			"IS_SANDBOX=1",
		))
	if err != nil {
		return err
	}
	atResult := func(p *otelclaudecode.Process, res otelclaudecode.Result) {
		sum, _ := ledger.Summary(res.InvocationID)
		st, _ := p.State()
		log.Info("caller got result", "invocation", res.InvocationID, "status", sum.Status,
			"input_tokens", sum.Usage.InputTokens, "session_owes_work", st.OwesWork, "answer", res.Text)
	}
	openGate := func() error { return os.WriteFile(gate, nil, 0o644) }

	var p *otelclaudecode.Process
	var ids []string
	switch cfg.scenario {
	case "run":
		r, err := client.Run(ctx, "run the tests in the background")
		if err != nil {
			return err
		}
		p = r.Process
		atResult(p, r.Result)
		ids = append(ids, r.Result.InvocationID)
		if err := openGate(); err != nil {
			return err
		}
		if err := p.WaitExit(ctx); err != nil {
			return err
		}
	case "session":
		if p, err = client.Start(ctx); err != nil {
			return err
		}
		for _, prompt := range []string{"run the tests in the background", "meanwhile, what changed?"} {
			res, err := p.Prompt(ctx, prompt)
			if err != nil {
				return errors.Join(err, p.Kill())
			}
			atResult(p, res)
			ids = append(ids, res.InvocationID)
		}
		if err := openGate(); err != nil {
			return err
		}
		if err := p.CloseInput(); err != nil {
			return err
		}
		if err := p.WaitExit(ctx); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown scenario %q", cfg.scenario)
	}
	enc := json.NewEncoder(stdout)
	for _, id := range ids {
		sum, err := p.Wait(ctx, id)
		if err != nil {
			return fmt.Errorf("invocation %s: %w", id, err)
		}
		if err := enc.Encode(lineOf(sum)); err != nil {
			return err
		}
	}
	return nil
}

// findUp returns rel under the working directory or the nearest of its
// parents that has it, so that the default works from the repository's
// root and from examples/ (go -C examples run ./claudecode); rel itself when none
// has it (the error then names it).
func findUp(rel string) string {
	dir, err := os.Getwd()
	if err != nil {
		return rel
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return rel
		}
		dir = parent
	}
}
