package otelopenai_test

import (
	"context"
	"fmt"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/instrument/otelopenai"
	"github.com/agentledger/agentledger/scriptedmodel"
)

func ExampleMiddleware() {
	// A scripted stand-in for the OpenAI API.
	srv := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{{
		Text:  "hello",
		Usage: scriptedmodel.Usage{InputTokens: 12, OutputTokens: 3},
	}}}).Start()
	defer srv.Close()

	// In an agent, the provider's pipeline holds instrument.SpanProcessor
	// in front of the exporter.
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	client := openai.NewClient(
		option.WithBaseURL(srv.OpenAIBaseURL()),
		option.WithAPIKey("unused"),
		option.WithMiddleware(otelopenai.Middleware(otelopenai.WithTracerProvider(tp))),
	)
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:    "gpt-test",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range rec.Ended() {
		fmt.Println(s.Name())
		for _, kv := range s.Attributes() {
			if kv.Key == "gen_ai.usage.input_tokens" || kv.Key == "gen_ai.usage.output_tokens" {
				fmt.Println(kv.Key, kv.Value.AsInt64())
			}
		}
	}
	// Output:
	// chat gpt-test
	// gen_ai.usage.input_tokens 12
	// gen_ai.usage.output_tokens 3
}
