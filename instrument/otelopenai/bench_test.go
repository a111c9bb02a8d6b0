package otelopenai_test

import (
	"context"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/instrument/otelopenai"
	"github.com/agentledger/agentledger/internal/scriptedmodel"
)

func benchChat(b *testing.B, wrapped bool) {
	srv := scriptedmodel.New(scriptedmodel.Options{Responder: func(scriptedmodel.Request) scriptedmodel.Step {
		return scriptedmodel.Step{
			Text:      "The answer is a paragraph of moderate length, streamed in small deltas like a real model does.",
			ToolCalls: []scriptedmodel.ToolCall{{ID: "call_b", Name: "shell", Arguments: `{"cmd":"go test ./..."}`}},
			Usage:     scriptedmodel.Usage{InputTokens: 1200, OutputTokens: 80, CacheReadTokens: 1000},
		}
	}}).Start()
	defer srv.Close()
	opts := []option.RequestOption{option.WithBaseURL(srv.OpenAIBaseURL()), option.WithAPIKey("k"), option.WithMaxRetries(0)}
	if wrapped {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(genaitest.Discard{}))
		opts = append(opts, option.WithMiddleware(otelopenai.Middleware(otelopenai.WithTracerProvider(tp))))
	}
	client := openai.NewClient(opts...)
	p := params("benchmark")
	ctx := context.Background()
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := client.Chat.Completions.New(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stream", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			st := client.Chat.Completions.NewStreaming(ctx, p)
			for st.Next() {
			}
			if err := st.Err(); err != nil {
				b.Fatal(err)
			}
			_ = st.Close()
		}
	})
}

func BenchmarkUnwrapped(b *testing.B) { benchChat(b, false) }

func BenchmarkWrapped(b *testing.B) { benchChat(b, true) }
