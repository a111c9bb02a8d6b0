package otelanthropic_test

import (
	"context"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/instrument/otelanthropic"
	"github.com/agentledger/agentledger/internal/scriptedmodel"
)

func benchMessages(b *testing.B, wrapped bool) {
	srv := scriptedmodel.New(scriptedmodel.Options{Responder: func(scriptedmodel.Request) scriptedmodel.Step {
		return scriptedmodel.Step{
			Text:      "The answer is a paragraph of moderate length, streamed in small deltas like a real model does.",
			ToolCalls: []scriptedmodel.ToolCall{{ID: "toolu_b", Name: "bash", Arguments: `{"command":"go test ./..."}`}},
			Usage:     scriptedmodel.Usage{InputTokens: 1200, OutputTokens: 80, CacheReadTokens: 1000},
		}
	}}).Start()
	defer srv.Close()
	// The SDK's own spans are off in both, so that only the wrapper differs.
	opts := []option.RequestOption{option.WithBaseURL(srv.URL()), option.WithAPIKey("k"), option.WithMaxRetries(0), option.WithoutOpenTelemetry()}
	if wrapped {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(genaitest.Discard{}))
		opts = append(opts, otelanthropic.ClientOptions(otelanthropic.WithTracerProvider(tp))...)
	}
	client := anthropic.NewClient(opts...)
	p := params("benchmark")
	ctx := context.Background()
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := client.Messages.New(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("stream", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			st := client.Messages.NewStreaming(ctx, p)
			for st.Next() {
			}
			if err := st.Err(); err != nil {
				b.Fatal(err)
			}
			_ = st.Close()
		}
	})
}

func BenchmarkUnwrapped(b *testing.B) { benchMessages(b, false) }

func BenchmarkWrapped(b *testing.B) { benchMessages(b, true) }
