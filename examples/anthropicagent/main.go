// Command anthropicagent is a small agent on the Anthropic Go SDK whose
// tool starts a background job that outlives the call, instrumented with
// otelanthropic and the agentledger instrument package so that each
// invocation's token usage, including the continuation its job wakes after
// the caller got its result, is exact and final.
//
// By default it talks to a scripted Anthropic-compatible server started in
// process, and prints one JSON line per invocation on stdout with its
// final usage; logs go to stderr. With -otlp it also exports its spans over
// OTLP/gRPC to a collector with the invocation processor.
//
//	go run ./examples/anthropicagent
//	go run ./examples/anthropicagent -prompts 3 -otlp 127.0.0.1:4317
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
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/otelanthropic"
	"github.com/agentledger/agentledger/scriptedmodel"
)

type config struct {
	prompts int
	otlp    string
	model   string
	timeout time.Duration
	// exporter, when set, also receives every span (tests).
	exporter sdktrace.SpanExporter
	// responder, when set, answers in place of respond (tests).
	responder func(scriptedmodel.Request) scriptedmodel.Step
}

func main() {
	var cfg config
	flag.IntVar(&cfg.prompts, "prompts", 1, "number of invocations, one session each")
	flag.StringVar(&cfg.otlp, "otlp", "", "OTLP/gRPC endpoint host:port (insecure); none: in-process ledger only")
	flag.StringVar(&cfg.model, "model", "", "Anthropic-compatible base URL answering like the scripted responder; none: start the scripted server in process")
	flag.DurationVar(&cfg.timeout, "timeout", time.Minute, "longest wait for every invocation to be final")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(context.Background(), cfg, os.Stdout, log); err != nil {
		log.Error("anthropicagent failed", "err", err)
		os.Exit(1)
	}
}

// line is the JSON line printed per invocation, with the field names of
// examples/shellagent plus the cache-creation tokens Anthropic reports.
type line struct {
	InvocationID             string `json:"invocation_id"`
	SessionID                string `json:"session_id"`
	Status                   string `json:"status"`
	InputTokens              int64  `json:"input_tokens"`
	OutputTokens             int64  `json:"output_tokens"`
	CacheReadInputTokens     int64  `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64  `json:"cache_creation_input_tokens"`
	ReasoningOutputTokens    int64  `json:"reasoning_output_tokens"`
	AfterResultInputTokens   int64  `json:"after_result_input_tokens"`
	AfterResultOutputTokens  int64  `json:"after_result_output_tokens"`
	ModelCalls               int64  `json:"model_calls"`
	BackgroundJobs           int64  `json:"background_jobs"`
	Continuations            int64  `json:"continuations"`
	TimeToFinalMS            int64  `json:"time_to_final_ms"`
}

func lineOf(session string, s instrument.Summary) line {
	u := s.Usage
	return line{
		InvocationID: s.InvocationID, SessionID: session, Status: string(s.Status),
		InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheReadInputTokens: u.CacheReadInputTokens, CacheCreationInputTokens: u.CacheCreationInputTokens,
		ReasoningOutputTokens:  u.ReasoningOutputTokens,
		AfterResultInputTokens: u.AfterResultInputTokens, AfterResultOutputTokens: u.AfterResultOutputTokens,
		ModelCalls: u.ModelCalls, BackgroundJobs: u.BackgroundJobs, Continuations: u.Continuations,
		TimeToFinalMS: s.TimeToFinalMS(),
	}
}

// stepUsage is what every scripted response reports, in GenAI terms: of
// the 120 input tokens 80 are cache reads and 20 cache writes, so the API
// says input_tokens=20.
var stepUsage = scriptedmodel.Usage{InputTokens: 120, OutputTokens: 15, CacheReadTokens: 80, CacheCreationTokens: 20, ReasoningTokens: 5}

// respond answers like a model would: a tool result or a notification
// gets a text answer; a user prompt gets a run_task call for it.
func respond(r scriptedmodel.Request) scriptedmodel.Step {
	msgs, _ := r.Body["messages"].([]any)
	if len(msgs) == 0 {
		return scriptedmodel.Step{Status: 400, ErrorMessage: "no messages"}
	}
	last, _ := msgs[len(msgs)-1].(map[string]any)
	if blocks, ok := last["content"].([]any); ok && len(blocks) > 0 {
		if b, _ := blocks[0].(map[string]any); b["type"] == "tool_result" {
			return scriptedmodel.Step{Text: "The task runs in the background; I will report when it ends.", Usage: stepUsage}
		}
	}
	text := r.LastUserText()
	if len(text) > 0 && text[0] == '[' {
		return scriptedmodel.Step{Text: "Done: " + text, Usage: stepUsage}
	}
	args, _ := json.Marshal(map[string]string{"task": text})
	return scriptedmodel.Step{ToolCalls: []scriptedmodel.ToolCall{{Name: "run_task", Arguments: string(args)}}, Usage: stepUsage}
}

// newPipeline returns the tracer provider, with the ledger's span
// processor in front of the exporter (if any).
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
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("anthropicagent"))),
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
	baseURL := cfg.model
	if baseURL == "" {
		r := cfg.responder
		if r == nil {
			r = respond
		}
		srv := scriptedmodel.New(scriptedmodel.Options{Responder: r}).Start()
		defer srv.Close()
		baseURL = srv.URL()
	}
	opts := append(otelanthropic.ClientOptions(otelanthropic.WithTracerProvider(tp)),
		option.WithBaseURL(baseURL), option.WithAPIKey("scripted"), option.WithMaxRetries(2))

	// Jobs wait for release, so that their continuations run after the
	// callers got their results, as they would with real work.
	release := make(chan struct{})
	agent := &Agent{
		client:   anthropic.NewClient(opts...),
		model:    "claude-scripted",
		name:     "anthropicagent",
		tracker:  instrument.NewTracker(instrument.WithTracerProvider(tp)),
		tracer:   tp.Tracer("github.com/agentledger/agentledger/examples/anthropicagent"),
		log:      log,
		sessions: make(map[string]*session),
		work: func(task string) string {
			<-release
			return fmt.Sprintf("%d words", len(task))
		},
	}
	defer func() { err = errors.Join(err, agent.Wait(ctx)) }()
	defer closeOnce(release)

	type started struct{ session, id string }
	var invs []started
	for i := range max(cfg.prompts, 1) {
		session := fmt.Sprintf("session-%d-%d", os.Getpid(), i)
		id, answer, err := agent.Prompt(ctx, session, fmt.Sprintf("summarize the repository, part %d", i+1))
		if err != nil {
			return fmt.Errorf("prompt %d: %w", i, err)
		}
		at, _ := ledger.Summary(id)
		log.Info("caller got result", "session", session, "invocation", id, "status", at.Status,
			"reasons", at.Reasons, "input_tokens", at.Usage.InputTokens, "answer", answer)
		invs = append(invs, started{session, id})
	}
	closeOnce(release)

	enc := json.NewEncoder(stdout)
	var errs []error
	for _, inv := range invs {
		s, err := ledger.Wait(ctx, inv.id)
		errs = append(errs, err)
		if err := enc.Encode(lineOf(inv.session, s)); err != nil {
			return fmt.Errorf("write summary: %w", err)
		}
	}
	return errors.Join(errs...)
}

func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}
