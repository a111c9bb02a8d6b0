// Command codex runs the real Codex CLI through the agentledger Codex
// instrumentation (instrument/otelcodex), offline against a scripted
// Responses model started in process, and prints one JSON line per
// invocation on stdout with its final usage; logs (with each invocation's
// state when its caller got the result) go to stderr. With -otlp it also
// exports its spans over OTLP/gRPC to a collector with the invocation
// processor.
//
// The run scenario is one `codex exec` whose command runs in the
// foreground. The session scenario is a warm `codex app-server` whose
// prompt leaves a command running in the background: the caller gets its
// result while it runs ("pending", the session owes work), and the
// invocation is final once the continuation the Client starts when the
// command ends (Codex starts none by itself) has read its output.
//
//	make codex
//	go run ./examples/codex
//	go run ./examples/codex -scenario session -otlp 127.0.0.1:4317
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
	"regexp"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/otelcodex"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// defaultCLI is where `make codex` installs the CLI.
const defaultCLI = ".cache/codex/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"

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
	flag.StringVar(&cfg.cli, "codex", "", "path of the codex CLI (default: "+defaultCLI+" in this directory or the nearest one above that has it, where `make codex` installs it)")
	flag.StringVar(&cfg.scenario, "scenario", "run", "run: one `codex exec` with a foreground command; session: a warm app-server session with a background command and its continuation")
	flag.StringVar(&cfg.otlp, "otlp", "", "OTLP/gRPC endpoint host:port (insecure); none: in-process ledger only")
	flag.DurationVar(&cfg.timeout, "timeout", 2*time.Minute, "longest the whole run may take")
	flag.Parse()
	if cfg.cli == "" {
		cfg.cli = findUp(defaultCLI)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(context.Background(), cfg, os.Stdout, log); err != nil {
		log.Error("codex example failed", "err", err)
		os.Exit(1)
	}
}

// line is the JSON line printed per invocation, with the field names of
// the other examples.
type line struct {
	InvocationID            string   `json:"invocation_id"`
	SessionID               string   `json:"session_id"`
	Status                  string   `json:"status"`
	InputTokens             int64    `json:"input_tokens"`
	OutputTokens            int64    `json:"output_tokens"`
	CacheReadInputTokens    int64    `json:"cache_read_input_tokens"`
	ReasoningOutputTokens   int64    `json:"reasoning_output_tokens"`
	AfterResultInputTokens  int64    `json:"after_result_input_tokens"`
	AfterResultOutputTokens int64    `json:"after_result_output_tokens"`
	ModelCalls              int64    `json:"model_calls"`
	BackgroundJobs          int64    `json:"background_jobs"`
	Continuations           int64    `json:"continuations"`
	TimeToFinalMS           int64    `json:"time_to_final_ms"`
	Reasons                 []string `json:"reasons,omitempty"`
}

func lineOf(s instrument.Summary) line {
	u := s.Usage
	return line{
		InvocationID: s.InvocationID, SessionID: s.SessionID, Status: string(s.Status),
		InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheReadInputTokens: u.CacheReadInputTokens, ReasoningOutputTokens: u.ReasoningOutputTokens,
		AfterResultInputTokens: u.AfterResultInputTokens, AfterResultOutputTokens: u.AfterResultOutputTokens,
		ModelCalls: u.ModelCalls, BackgroundJobs: u.BackgroundJobs, Continuations: u.Continuations,
		TimeToFinalMS: s.TimeToFinalMS(), Reasons: s.Reasons,
	}
}

// stepUsage is what every scripted response reports, in GenAI terms: of
// the 120 input tokens 80 are cache reads (the Responses API has no cache
// creation).
var stepUsage = scriptedmodel.Usage{InputTokens: 120, OutputTokens: 15, CacheReadTokens: 80, ReasoningTokens: 5}

var sessionID = regexp.MustCompile(`session ID (\d+)`)

// model answers Codex like a model would: a prompt asking for background
// work gets an exec_command with a small yield_time_ms (the command runs
// on in the background), a continuation naming the finished command a
// write_stdin that reads it, other prompts a foreground exec_command, and
// every tool result a short text.
func model(command string) *scriptedmodel.Router {
	say := func(text string) func(scriptedmodel.Request) scriptedmodel.Step {
		return func(scriptedmodel.Request) scriptedmodel.Step { return scriptedmodel.Step{Text: text} }
	}
	call := func(tc func(scriptedmodel.Request) scriptedmodel.ToolCall) func(scriptedmodel.Request) scriptedmodel.Step {
		return func(r scriptedmodel.Request) scriptedmodel.Step {
			return scriptedmodel.Step{ToolCalls: []scriptedmodel.ToolCall{tc(r)}}
		}
	}
	asks := func(word string) func(scriptedmodel.Request) bool {
		return func(r scriptedmodel.Request) bool { return strings.Contains(r.NewUserText(), word) }
	}
	returns := func(tool, word string) func(scriptedmodel.Request) bool {
		return func(r scriptedmodel.Request) bool {
			for _, o := range r.FunctionOutputs() {
				if o.Name == tool && strings.Contains(o.Text, word) {
					return true
				}
			}
			return false
		}
	}
	return scriptedmodel.NewRouter(func(int) scriptedmodel.Usage { return stepUsage },
		scriptedmodel.Rule{Name: "launch", Match: asks("background"), Answer: call(func(scriptedmodel.Request) scriptedmodel.ToolCall {
			return scriptedmodel.ExecCommandCall(command, 300)
		})},
		scriptedmodel.Rule{Name: "launched", Match: returns("exec_command", "Process running"),
			Answer: say("The tests run in the background; I will report when they end.")},
		scriptedmodel.Rule{Name: "read", Match: asks("has finished"), Answer: call(func(r scriptedmodel.Request) scriptedmodel.ToolCall {
			sid := "0"
			if m := sessionID.FindStringSubmatch(r.NewUserText()); m != nil {
				sid = m[1]
			}
			return scriptedmodel.WriteStdinCall(sid, 5000)
		})},
		scriptedmodel.Rule{Name: "collected", Match: returns("write_stdin", "tests passed"), Answer: say("The tests passed.")},
		scriptedmodel.Rule{Name: "foreground", Match: asks("run"), Answer: call(func(scriptedmodel.Request) scriptedmodel.ToolCall {
			return scriptedmodel.ExecCommandCall("echo tests passed", 0)
		})},
		scriptedmodel.Rule{Name: "ran", Match: returns("exec_command", "tests passed"), Answer: say("The tests passed.")},
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
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("codex-example"))),
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
	// Codex warns about its helper binaries under the system's temporary
	// directory: its home goes under the user's cache directory.
	cache, err := os.UserCacheDir()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return err
	}
	dir, err := os.MkdirTemp(cache, "agentledger-codex-example-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	project := filepath.Join(dir, "project")
	if err := os.MkdirAll(project, 0o755); err != nil {
		return err
	}
	// The command waits for a gate the example opens once the caller got
	// its result, as real work would outlive the call.
	gate := filepath.Join(dir, "gate")
	command := fmt.Sprintf("for i in $(seq 1 1200); do [ -e %q ] && break; sleep 0.05; done; echo tests passed", gate)
	srv := scriptedmodel.New(scriptedmodel.Options{Responder: model(command).Respond}).Start()
	defer srv.Close()

	client, err := otelcodex.New(cfg.cli,
		otelcodex.WithTracerProvider(tp),
		otelcodex.WithLedger(ledger),
		otelcodex.WithHome(filepath.Join(dir, "home")),
		otelcodex.WithDir(project),
		otelcodex.WithUpstream(srv.URL()+"/v1"),
		otelcodex.WithEnv("OPENAI_API_KEY=scripted"),
	)
	if err != nil {
		return err
	}
	atResult := func(res otelcodex.Result) {
		sum, _ := ledger.Summary(res.InvocationID)
		st, _ := client.Session(res.SessionID)
		log.Info("caller got result", "invocation", res.InvocationID, "status", sum.Status,
			"input_tokens", sum.Usage.InputTokens, "session_owes_work", st.OwesWork, "answer", res.Text)
	}

	var ids []string
	switch cfg.scenario {
	case "run":
		res, err := client.Run(ctx, "run the tests")
		if err != nil {
			return err
		}
		atResult(res)
		ids = append(ids, res.InvocationID)
	case "session":
		s, err := client.Start(ctx)
		if err != nil {
			return err
		}
		res, err := s.Prompt(ctx, "run the tests in the background")
		if err != nil {
			return errors.Join(err, s.Kill())
		}
		atResult(res)
		ids = append(ids, res.InvocationID)
		if err := os.WriteFile(gate, nil, 0o644); err != nil {
			return errors.Join(err, s.Kill())
		}
		// The continuation runs once the command has ended; then the
		// session owes nothing and can be closed.
		if _, err := s.Wait(ctx, res.InvocationID); err != nil {
			return errors.Join(err, s.Kill())
		}
		if err := s.Close(ctx); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unknown scenario %q", cfg.scenario)
	}
	enc := json.NewEncoder(stdout)
	for _, id := range ids {
		sum, err := client.Wait(ctx, id)
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
// root and from examples/ (go -C examples run ./codex); rel itself when none
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
