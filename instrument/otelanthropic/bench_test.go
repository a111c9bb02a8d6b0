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
	newClient := func(wrapped bool) anthropic.Client {
		opts := []option.RequestOption{option.WithBaseURL(srv.URL()), option.WithAPIKey("k"), option.WithMaxRetries(0), option.WithoutOpenTelemetry()}
		if wrapped {
			opts = append(opts, otelanthropic.ClientOptions(otelanthropic.WithTracerProvider(genaitest.BenchTracerProvider()))...)
		}
		return anthropic.NewClient(opts...)
	}
	p := params("benchmark")
	genaitest.BenchModes(b, newClient, []genaitest.BenchCall[anthropic.Client]{
		{Name: "api=messages/call=plain", Call: func(ctx context.Context, c anthropic.Client) error {
			_, err := c.Messages.New(ctx, p)
			return err
		}},
		{Name: "api=messages/call=stream", Call: func(ctx context.Context, c anthropic.Client) error {
			return genaitest.Drain(c.Messages.NewStreaming(ctx, p))
		}},
	})
}
