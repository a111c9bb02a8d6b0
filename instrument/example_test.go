package instrument_test

import (
	"context"
	"fmt"
	"os/exec"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/instrument"
)

// modelCall stands in for an instrumented model client: a chat span with
// GenAI usage attributes.
func modelCall(ctx context.Context, tp *sdktrace.TracerProvider, in, out int) {
	_, span := tp.Tracer("example.com/llm").Start(ctx, "chat gpt-test")
	span.SetAttributes(
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.Int("gen_ai.usage.input_tokens", in),
		attribute.Int("gen_ai.usage.output_tokens", out),
	)
	span.End()
}

func ExampleNewSpanProcessor() {
	exporter := tracetest.NewInMemoryExporter() // in production: an OTLP exporter
	sp := instrument.NewSpanProcessor(sdktrace.NewBatchSpanProcessor(exporter))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracker := instrument.NewTracker(instrument.WithTracerProvider(tp))

	ctx, inv := tracker.StartInvocation(context.Background(), "coder", "session-1")
	modelCall(ctx, tp, 10, 2)
	modelCall(ctx, tp, 10, 2)
	inv.End()

	s, _ := sp.Ledger().Wait(context.Background(), inv.ID())
	fmt.Println(s.Status, s.Usage.InputTokens, s.Usage.OutputTokens, s.Usage.ModelCalls)
	// Output: final 20 4 2
}

func ExampleTracker_StartBackground() {
	sp := instrument.NewSpanProcessor(nil, instrument.WithRemoteSettle(0))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracker := instrument.NewTracker(instrument.WithTracerProvider(tp))

	ctx, inv := tracker.StartInvocation(context.Background(), "coder", "session-1")
	_, job := tracker.StartBackground(ctx, "shell")
	cmd := exec.Command("true")
	cmd.Env = append(cmd.Environ(), job.Env()...) // TRACEPARENT, BAGGAGE
	if err := cmd.Start(); err != nil {
		fmt.Println(err)
		return
	}
	inv.End() // the caller has its result; the job still runs
	fmt.Println(sp.Ledger().Session("session-1").OwesWork)

	job.EndWithoutFollowup(cmd.Wait()) // no completion notification will be posted
	s, _ := sp.Ledger().Summary(inv.ID())
	fmt.Println(s.Status, s.Usage.BackgroundJobs, sp.Ledger().Session("session-1").OwesWork)
	// Output:
	// true
	// final 1 false
}

func ExampleTracker_StartContinuation() {
	sp := instrument.NewSpanProcessor(nil)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracker := instrument.NewTracker(instrument.WithTracerProvider(tp))

	ctx, inv := tracker.StartInvocation(context.Background(), "coder", "session-1")
	modelCall(ctx, tp, 10, 2)
	_, job := tracker.StartBackground(ctx, "shell")
	inv.End()

	// The job ends; the runtime posts a notification holding its carrier.
	job.EndWithFollowup(nil)
	notification := job.Carrier()
	s, _ := sp.Ledger().Summary(inv.ID())
	fmt.Println(s.Status, s.Reasons)

	// The notification wakes a turn of the same invocation.
	cctx, cont, err := tracker.StartContinuation(context.Background(), "coder", "session-1", notification)
	if err != nil {
		fmt.Println(err)
		return
	}
	modelCall(cctx, tp, 10, 2)
	cont.End()

	s, _ = sp.Ledger().Summary(inv.ID())
	fmt.Println(s.Status, s.Usage.InputTokens, s.Usage.AfterResultInputTokens, s.Usage.Continuations)
	// Output:
	// pending [open_followup:background shell]
	// final 20 10 1
}

func ExampleTracker_CloseFollowup() {
	sp := instrument.NewSpanProcessor(nil)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracker := instrument.NewTracker(instrument.WithTracerProvider(tp))

	ctx, inv := tracker.StartInvocation(context.Background(), "coder", "session-1")
	_, job := tracker.StartBackground(ctx, "shell")
	inv.End()
	job.EndWithFollowup(nil)

	// The user interrupts the session: the notification will not resume it.
	if err := tracker.CloseFollowup(context.Background(), job.Carrier(), "interrupted", ""); err != nil {
		fmt.Println(err)
		return
	}
	s, _ := sp.Ledger().Summary(inv.ID())
	fmt.Println(s.Status)
	// Output: final
}
