package otelanthropic_test

import (
	"context"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/instrument/otelanthropic"
)

// BenchmarkCall measures one Messages call through the Anthropic SDK to a
// scripted model on loopback, read to its end, plain and streamed, with
// the SDK alone (mode=unwrapped, the baseline) and with the middleware and
// a span-dropping TracerProvider (mode=wrapped). The SDK's own spans are
// off in both, so that only the wrapper differs. Compare the modes with
// benchstat -col /mode.
func BenchmarkCall(b *testing.B) {
	srv := genaitest.BenchServer("toolu_b", "bash", `{"command":"go test ./..."}`)
	defer srv.Close()
	clients := map[string]anthropic.Client{}
	for _, mode := range []string{"unwrapped", "wrapped"} {
		opts := []option.RequestOption{option.WithBaseURL(srv.URL()), option.WithAPIKey("k"), option.WithMaxRetries(0), option.WithoutOpenTelemetry()}
		if mode == "wrapped" {
			opts = append(opts, otelanthropic.ClientOptions(otelanthropic.WithTracerProvider(genaitest.BenchTracerProvider()))...)
		}
		clients[mode] = anthropic.NewClient(opts...)
	}
	p := params("benchmark")
	calls := []struct {
		name string
		call func(context.Context, anthropic.Client) error
	}{
		{"api=messages/call=plain", func(ctx context.Context, c anthropic.Client) error {
			_, err := c.Messages.New(ctx, p)
			return err
		}},
		{"api=messages/call=stream", func(ctx context.Context, c anthropic.Client) error {
			return genaitest.Drain(c.Messages.NewStreaming(ctx, p))
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
