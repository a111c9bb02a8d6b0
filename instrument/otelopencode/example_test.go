package otelopencode_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/otelopencode"
)

// A prompt to an OpenCode server as an invocation: the answer comes back
// while a background subagent may still work; Wait returns once the
// invocation is final, with usage that includes the subagent and the turn
// its completion woke.
func ExampleClient_Prompt() {
	// The exporting pipeline goes through the ledger's span processor.
	exporter := tracetest.NewInMemoryExporter()
	sp := instrument.NewSpanProcessor(sdktrace.NewBatchSpanProcessor(exporter))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	client, err := otelopencode.New("http://127.0.0.1:4096", &http.Client{},
		otelopencode.WithTracerProvider(tp), otelopencode.WithLedger(sp.Ledger()))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = client.Shutdown(ctx) }()

	session, err := client.CreateSession(ctx, "example")
	if err != nil {
		log.Fatal(err)
	}
	res, err := client.Prompt(ctx, session, otelopencode.Prompt{Text: "Start the tests in the background."})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Text)
	if st, _ := client.Session(session); st.OwesWork {
		fmt.Println("a background job is still running; keep the session")
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	sum, err := client.Wait(wctx, res.InvocationID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(sum.Status, sum.Usage.InputTokens, sum.Usage.OutputTokens)
}

// Another OpenCode client (such as the generated SDK) records its prompts
// when its HTTP requests go through Client.Transport.
func ExampleClient_Transport() {
	client, err := otelopencode.New("http://127.0.0.1:4096", nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	hc := &http.Client{Transport: client.Transport(nil)}
	resp, err := hc.Post("http://127.0.0.1:4096/session/ses_1/message", "application/json", nil)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	fmt.Println(resp.Header.Get(otelopencode.HeaderInvocationID))
}

// Counting the model wire: the Client's proxy sits between OpenCode and
// the provider's real endpoint (or a gateway), and the provider's
// baseURL in opencode.json points at it before the server starts.
func ExampleWithModelProxy() {
	exporter := tracetest.NewInMemoryExporter()
	sp := instrument.NewSpanProcessor(sdktrace.NewBatchSpanProcessor(exporter))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	client, err := otelopencode.New("http://127.0.0.1:4096", &http.Client{},
		otelopencode.WithModelProxy("https://api.openai.com/v1"), // or a gateway's base URL
		otelopencode.WithModelProxyAddress("127.0.0.1:4097"),     // a fixed port keeps the config stable
		otelopencode.WithTracerProvider(tp), otelopencode.WithLedger(sp.Ledger()))
	if err != nil {
		log.Fatal(err)
	}
	// provider.openai.options.baseURL = the proxy; the API key stays where
	// OpenCode reads it, and the proxy passes it through.
	if err := otelopencode.WriteProviderConfig("opencode.json", "openai", client.ModelProxyURL()); err != nil {
		log.Fatal(err)
	}
	// Now start `opencode serve` in that directory, then client.Start and
	// prompt as in the Client.Prompt example: every model request is one
	// model-call span with its response's usage.
}
