package otelanthropic_test

import (
	"context"
	"fmt"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/instrument/otelanthropic"
	"github.com/agentledger/agentledger/scriptedmodel"
)

func ExampleClientOptions() {
	// A scripted stand-in for the Anthropic API: 30 of the 100 input
	// tokens are cache reads, so the API reports input_tokens=70.
	srv := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{{
		Text:  "hello",
		Usage: scriptedmodel.Usage{InputTokens: 100, CacheReadTokens: 30, OutputTokens: 5},
	}}}).Start()
	defer srv.Close()

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	opts := otelanthropic.ClientOptions(otelanthropic.WithTracerProvider(tp))
	client := anthropic.NewClient(append(opts, option.WithBaseURL(srv.URL()), option.WithAPIKey("unused"))...)
	_, err := client.Messages.New(context.Background(), anthropic.MessageNewParams{
		Model:     "claude-test",
		MaxTokens: 64,
		Messages:  []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range rec.Ended() {
		fmt.Println(s.Name())
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "gen_ai.usage.input_tokens", "gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.output_tokens":
				fmt.Println(kv.Key, kv.Value.AsInt64())
			}
		}
	}
	// Output:
	// chat claude-test
	// gen_ai.usage.input_tokens 100
	// gen_ai.usage.output_tokens 5
	// gen_ai.usage.cache_read.input_tokens 30
}
