package otelclaudecode_test

import (
	"context"
	"fmt"
	"os"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/otelclaudecode"
)

// A one-shot run: the caller gets its result at the first result, while a
// background shell may still run; Wait returns once the process has
// exited and the invocation is final, with the usage of the turn the
// shell's notification woke.
func ExampleClient_Run() {
	sp := instrument.NewSpanProcessor(nil) // wrap your exporting processor
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	client, err := otelclaudecode.New("claude",
		otelclaudecode.WithTracerProvider(tp),
		otelclaudecode.WithLedger(sp.Ledger()),
		otelclaudecode.WithArgs("--model", "sonnet"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	ctx := context.Background()
	run, err := client.Run(ctx, "run the tests in the background")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	fmt.Println(run.Result.Text)
	sum, err := run.Wait(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	fmt.Println(sum.Status, sum.Usage.InputTokens, sum.Usage.AfterResultInputTokens)
}

// A warm session: each prompt is an invocation; a shell one prompt left
// running belongs to it, whatever prompt runs when it ends.
func ExampleProcess_Prompt() {
	sp := instrument.NewSpanProcessor(nil)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	client, err := otelclaudecode.New("claude", otelclaudecode.WithTracerProvider(tp), otelclaudecode.WithLedger(sp.Ledger()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	ctx := context.Background()
	session, err := client.Start(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	first, _ := session.Prompt(ctx, "start the build in the background")
	second, _ := session.Prompt(ctx, "meanwhile, what changed?")
	st, _ := session.State() // st.OwesWork while the build runs
	fmt.Println(st.OwesWork)
	_ = session.CloseInput() // the CLI exits once the build's turn is done
	for _, id := range []string{first.InvocationID, second.InvocationID} {
		sum, _ := session.Wait(ctx, id)
		fmt.Println(sum.Status)
	}
}
