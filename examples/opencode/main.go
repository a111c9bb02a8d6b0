// Command opencode sends one prompt to a running OpenCode server (opencode
// serve) through the agentledger OpenCode instrumentation and prints the
// invocation's usage twice as JSON lines: when the prompt's answer is back
// (often "pending": a background subagent is still working) and when the
// invocation is final (the job ended and the turn its completion woke is
// over). With -otlp the spans also go to an OTLP/gRPC collector, so the
// collector's invocation processor can compute the same summary.
//
// It starts nothing itself; see README.md for running opencode serve
// against the scripted model.
//
//	go run ./examples/opencode -server http://127.0.0.1:4096 -prompt "background: count the files"
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/otelopencode"
)

type config struct {
	server  string
	otlp    string
	prompt  string
	title   string
	session string
	timeout time.Duration
}

func main() {
	var cfg config
	flag.StringVar(&cfg.server, "server", "http://127.0.0.1:4096", "base URL of opencode serve")
	flag.StringVar(&cfg.otlp, "otlp", "", "OTLP/gRPC endpoint host:port (insecure); none: in-process ledger only")
	flag.StringVar(&cfg.prompt, "prompt", "background: summarise the repository", "the prompt")
	flag.StringVar(&cfg.title, "title", "agentledger example", "title of the new session (an untitled session costs an unreported title call)")
	flag.StringVar(&cfg.session, "session", "", "existing session id to prompt (default: a new session)")
	flag.DurationVar(&cfg.timeout, "timeout", 5*time.Minute, "longest wait for the invocation to be final")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(context.Background(), cfg, os.Stdout, log); err != nil {
		log.Error("opencode example failed", "err", err)
		os.Exit(1)
	}
}

// line is one JSON line of output.
type line struct {
	At                      string   `json:"at"`
	InvocationID            string   `json:"invocation_id"`
	SessionID               string   `json:"session_id"`
	Status                  string   `json:"status"`
	Answer                  string   `json:"answer,omitempty"`
	OwesWork                bool     `json:"session_owes_work"`
	InputTokens             int64    `json:"input_tokens"`
	OutputTokens            int64    `json:"output_tokens"`
	CacheReadInputTokens    int64    `json:"cache_read_input_tokens"`
	ReasoningOutputTokens   int64    `json:"reasoning_output_tokens"`
	AfterResultInputTokens  int64    `json:"after_result_input_tokens"`
	AfterResultOutputTokens int64    `json:"after_result_output_tokens"`
	ModelCalls              int64    `json:"model_calls"`
	BackgroundJobs          int64    `json:"background_jobs"`
	Continuations           int64    `json:"continuations"`
	Reasons                 []string `json:"reasons,omitempty"`
}

func lineOf(at string, s instrument.Summary, owes bool) line {
	u := s.Usage
	return line{
		At: at, InvocationID: s.InvocationID, SessionID: s.SessionID, Status: string(s.Status), OwesWork: owes,
		InputTokens: u.InputTokens, OutputTokens: u.OutputTokens,
		CacheReadInputTokens: u.CacheReadInputTokens, ReasoningOutputTokens: u.ReasoningOutputTokens,
		AfterResultInputTokens: u.AfterResultInputTokens, AfterResultOutputTokens: u.AfterResultOutputTokens,
		ModelCalls: u.ModelCalls, BackgroundJobs: u.BackgroundJobs, Continuations: u.Continuations,
		Reasons: s.Reasons,
	}
}

func run(ctx context.Context, cfg config, out io.Writer, log *slog.Logger) (err error) {
	// The exporting pipeline: the ledger's span processor wraps the
	// batcher, so every span gets invocation.id and invocation.children.
	var next sdktrace.SpanProcessor
	if cfg.otlp != "" {
		exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(cfg.otlp), otlptracegrpc.WithInsecure())
		if err != nil {
			return fmt.Errorf("otlp exporter: %w", err)
		}
		next = sdktrace.NewBatchSpanProcessor(exp)
	}
	sp := instrument.NewSpanProcessor(next)
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(sp),
		// Sampler declares any span the sampler drops inside an
		// invocation, so that nothing says final without it.
		sdktrace.WithSampler(instrument.Sampler(sdktrace.ParentBased(sdktrace.AlwaysSample()))),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("opencode-example"))),
	)
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = errors.Join(err, tp.Shutdown(sctx))
	}()

	client, err := otelopencode.New(cfg.server, &http.Client{},
		otelopencode.WithTracerProvider(tp),
		otelopencode.WithLedger(sp.Ledger()),
		otelopencode.WithLogger(log))
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := client.Start(sctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = errors.Join(err, client.Shutdown(sctx))
	}()

	session := cfg.session
	if session == "" {
		if session, err = client.CreateSession(ctx, cfg.title); err != nil {
			return err
		}
	}
	res, err := client.Prompt(ctx, session, otelopencode.Prompt{Text: cfg.prompt})
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	sum, _ := sp.Ledger().Summary(res.InvocationID)
	st, _ := client.Session(session)
	l := lineOf("result", sum, st.OwesWork)
	l.Answer = res.Text
	if err := enc.Encode(l); err != nil {
		return err
	}

	wctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	sum, err = client.Wait(wctx, res.InvocationID)
	if err != nil {
		return err
	}
	st, _ = client.Session(session)
	return enc.Encode(lineOf("final", sum, st.OwesWork))
}
