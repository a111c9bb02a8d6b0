package otelanthropic_test

import (
	"context"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/instrument/otelanthropic"
)

func benchMessages(b *testing.B, wrapped bool) {
	srv := genaitest.BenchServer("toolu_b", "bash", `{"command":"go test ./..."}`)
	defer srv.Close()
	// The SDK's own spans are off in both, so that only the wrapper differs.
	opts := []option.RequestOption{option.WithBaseURL(srv.URL()), option.WithAPIKey("k"), option.WithMaxRetries(0), option.WithoutOpenTelemetry()}
	if wrapped {
		opts = append(opts, otelanthropic.ClientOptions(otelanthropic.WithTracerProvider(genaitest.BenchTracerProvider()))...)
	}
	client := anthropic.NewClient(opts...)
	p := params("benchmark")
	genaitest.BenchCalls(b, func(ctx context.Context) error {
		_, err := client.Messages.New(ctx, p)
		return err
	}, func(ctx context.Context) genaitest.Stream {
		return client.Messages.NewStreaming(ctx, p)
	})
}

func BenchmarkUnwrapped(b *testing.B) { benchMessages(b, false) }

func BenchmarkWrapped(b *testing.B) { benchMessages(b, true) }
