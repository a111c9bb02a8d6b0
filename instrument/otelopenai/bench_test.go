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
	clients := map[string]openai.Client{}
	for _, mode := range []string{"unwrapped", "wrapped"} {
		opts := []option.RequestOption{option.WithBaseURL(srv.OpenAIBaseURL()), option.WithAPIKey("k"), option.WithMaxRetries(0)}
		if mode == "wrapped" {
			opts = append(opts, option.WithMiddleware(otelopenai.Middleware(otelopenai.WithTracerProvider(genaitest.BenchTracerProvider()))))
		}
		clients[mode] = openai.NewClient(opts...)
	}
	chat := params("benchmark")
	resp := responses.ResponseNewParams{Model: "gpt-test", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("benchmark")}}
	calls := []struct {
		name string
		call func(context.Context, openai.Client) error
	}{
		{"api=chat/call=plain", func(ctx context.Context, c openai.Client) error {
			_, err := c.Chat.Completions.New(ctx, chat)
			return err
		}},
		{"api=chat/call=stream", func(ctx context.Context, c openai.Client) error {
			return genaitest.Drain(c.Chat.Completions.NewStreaming(ctx, chat))
		}},
		{"api=responses/call=plain", func(ctx context.Context, c openai.Client) error {
			_, err := c.Responses.New(ctx, resp)
			return err
		}},
		{"api=responses/call=stream", func(ctx context.Context, c openai.Client) error {
			return genaitest.Drain(c.Responses.NewStreaming(ctx, resp))
		}},
	}
	ctx := context.Background()
	for _, tc := range calls {
		b.Run(tc.name, func(b *testing.B) {
			for _, mode := range []string{"unwrapped", "wrapped"} {
				client := clients[mode]
				b.Run("mode="+mode, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if err := tc.call(ctx, client); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}
