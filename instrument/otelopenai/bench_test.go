package otelopenai_test

import (
	"context"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/instrument/otelopenai"
)

// BenchmarkCall measures one call through the OpenAI SDK to a scripted
// model on loopback, read to its end: chat completions and Responses,
// plain and streamed, with the SDK alone (mode=unwrapped, the baseline)
// and with the middleware and a span-dropping TracerProvider
// (mode=wrapped). Compare the modes with benchstat -col /mode.
func BenchmarkCall(b *testing.B) {
	srv := genaitest.BenchServer("call_b", "shell", `{"cmd":"go test ./..."}`)
	defer srv.Close()
	newClient := func(wrapped bool) openai.Client {
		opts := []option.RequestOption{option.WithBaseURL(srv.OpenAIBaseURL()), option.WithAPIKey("k"), option.WithMaxRetries(0)}
		if wrapped {
			opts = append(opts, option.WithMiddleware(otelopenai.Middleware(otelopenai.WithTracerProvider(genaitest.BenchTracerProvider()))))
		}
		return openai.NewClient(opts...)
	}
	chat := params("benchmark")
	resp := responses.ResponseNewParams{Model: "gpt-test", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("benchmark")}}
	genaitest.BenchModes(b, newClient, []genaitest.BenchCall[openai.Client]{
		{Name: "api=chat/call=plain", Call: func(ctx context.Context, c openai.Client) error {
			_, err := c.Chat.Completions.New(ctx, chat)
			return err
		}},
		{Name: "api=chat/call=stream", Call: func(ctx context.Context, c openai.Client) error {
			return genaitest.Drain(c.Chat.Completions.NewStreaming(ctx, chat))
		}},
		{Name: "api=responses/call=plain", Call: func(ctx context.Context, c openai.Client) error {
			_, err := c.Responses.New(ctx, resp)
			return err
		}},
		{Name: "api=responses/call=stream", Call: func(ctx context.Context, c openai.Client) error {
			return genaitest.Drain(c.Responses.NewStreaming(ctx, resp))
		}},
	})
}
