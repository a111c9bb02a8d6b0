package otelopenai_test

import (
	"context"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/instrument/otelopenai"
)

func benchChat(b *testing.B, wrapped bool) {
	srv := genaitest.BenchServer("call_b", "shell", `{"cmd":"go test ./..."}`)
	defer srv.Close()
	opts := []option.RequestOption{option.WithBaseURL(srv.OpenAIBaseURL()), option.WithAPIKey("k"), option.WithMaxRetries(0)}
	if wrapped {
		opts = append(opts, option.WithMiddleware(otelopenai.Middleware(otelopenai.WithTracerProvider(genaitest.BenchTracerProvider()))))
	}
	client := openai.NewClient(opts...)
	p := params("benchmark")
	genaitest.BenchCalls(b, func(ctx context.Context) error {
		_, err := client.Chat.Completions.New(ctx, p)
		return err
	}, func(ctx context.Context) genaitest.Stream {
		return client.Chat.Completions.NewStreaming(ctx, p)
	})
}

func BenchmarkUnwrapped(b *testing.B) { benchChat(b, false) }

func BenchmarkWrapped(b *testing.B) { benchChat(b, true) }
