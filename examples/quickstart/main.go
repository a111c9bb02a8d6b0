// Command quickstart is the README's copy-paste example: it wraps an openai-go
// client, runs one invocation whose shell job runs in the background, and
// prints the invocation's ledger line twice: when the caller gets its result
// (pending) and when the job's completion turn has made it final.
//
//	go run ./examples/quickstart                         # scripted model in process, no export
//	go run ./examples/quickstart -otlp 127.0.0.1:4317    # also export to otelcol-agentledger
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/otelopenai"
	"github.com/agentledger/agentledger/scriptedmodel"
)

func main() {
	otlp := flag.String("otlp", "", "OTLP gRPC endpoint (host:port) of a collector; empty: in-process ledger only")
	baseURL := flag.String("model", "", "OpenAI-compatible base URL; empty: a scripted model in this process")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, *otlp, *baseURL); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, w io.Writer, otlp, baseURL string) error {
	if baseURL == "" { // no model can be reached here: answer from a script
		srv := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{
			{Text: "Started the tests in the background.", Usage: scriptedmodel.Usage{InputTokens: 12, OutputTokens: 5}},
			{Text: "The tests passed.", Usage: scriptedmodel.Usage{InputTokens: 20, OutputTokens: 4}},
		}}).Start()
		defer srv.Close()
		baseURL = srv.OpenAIBaseURL()
	}

	// 1. The ledger span processor wraps the exporting one.
	var next sdktrace.SpanProcessor
	if otlp != "" {
		exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(otlp), otlptracegrpc.WithInsecure())
		if err != nil {
			return fmt.Errorf("otlp exporter: %w", err)
		}
		next = sdktrace.NewBatchSpanProcessor(exp)
	}
	sp := instrument.NewSpanProcessor(next)
	// Sampler declares any span the sampler drops inside an invocation
	// (here none: ParentBased samples what its sampled parent does), so
	// that a sampler that decides per span never makes a wrong final.
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp),
		sdktrace.WithSampler(instrument.Sampler(sdktrace.ParentBased(sdktrace.AlwaysSample()))))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracker := instrument.NewTracker(instrument.WithTracerProvider(tp))
	ledger := sp.Ledger()

	// 2. Every model call through this client becomes a "chat {model}" span.
	client := openai.NewClient(
		option.WithBaseURL(baseURL),
		option.WithAPIKey(os.Getenv("OPENAI_API_KEY")),
		option.WithMiddleware(otelopenai.Middleware(otelopenai.WithTracerProvider(tp))),
	)
	ask := func(ctx context.Context, prompt string) error {
		_, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model:    "gpt-4o-mini",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
		})
		return err
	}

	// 3. One invocation: a model call that starts a background job, then the
	// caller gets its result while the job still runs.
	ictx, inv := tracker.StartInvocation(ctx, "quickstart", "session-1")
	if err := ask(ictx, "run the tests in the background"); err != nil {
		return err
	}
	_, job := tracker.StartBackground(ictx, "shell")
	cmd := exec.CommandContext(ctx, "sh", "-c", "sleep 0.2; echo tests passed")
	cmd.Env = append(os.Environ(), job.Env()...) // TRACEPARENT, TRACESTATE, BAGGAGE
	if err := cmd.Start(); err != nil {
		return err
	}
	inv.End()
	printLine(w, ledger, inv.ID()) // pending: the job owes a followup

	// 4. The job ends and its completion notification (which carries
	// job.Carrier()) wakes a continuation turn of the same invocation.
	job.EndWithFollowup(cmd.Wait())
	notification := job.Carrier()
	cctx, cont, err := tracker.StartContinuation(ctx, "quickstart", "session-1", notification)
	if err != nil {
		return err
	}
	if err := ask(cctx, "the background job finished: tests passed"); err != nil {
		return err
	}
	cont.End()

	// 5. Final by the contract's rule (the remote settle time covers the
	// subprocess, which could have exported spans of its own).
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := ledger.Wait(wctx, inv.ID()); err != nil {
		return err
	}
	printLine(w, ledger, inv.ID())
	return nil
}

func printLine(w io.Writer, l *instrument.Ledger, id string) {
	s, _ := l.Summary(id)
	fmt.Fprintf(w, "%s status=%s input=%d output=%d after_result_input=%d after_result_output=%d continuations=%d\n",
		id, s.Status, s.Usage.InputTokens, s.Usage.OutputTokens,
		s.Usage.AfterResultInputTokens, s.Usage.AfterResultOutputTokens, s.Usage.Continuations)
}
