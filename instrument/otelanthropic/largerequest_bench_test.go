package otelanthropic_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/instrument/otelanthropic"
)

// BenchmarkLargeRequest measures one call whose request carries a long
// conversation (kb=100 and kb=500 kilobytes of messages) through the
// Anthropic SDK, plain and streamed, with the SDK alone (mode=unwrapped,
// the baseline) and with the wrapper and a span-dropping TracerProvider
// (mode=wrapped): what the wrapper's reading of the request body costs.
// Compare the modes with benchstat -col /mode.
func BenchmarkLargeRequest(b *testing.B) {
	messagesPlain := genaitest.CannedServer(b, "/v1/messages", `{"model":"claude-test","max_tokens":1024,"messages":[{"role":"user","content":"hi"}]}`)
	messagesStream := genaitest.CannedServer(b, "/v1/messages", `{"model":"claude-test","max_tokens":1024,"messages":[{"role":"user","content":"hi"}],"stream":true}`)

	for _, kb := range []int{100, 500} {
		turns := genaitest.Conversation(kb)
		messages := anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 1024}
		for i, text := range turns {
			if i%2 == 0 {
				messages.Messages = append(messages.Messages, anthropic.NewUserMessage(anthropic.NewTextBlock(text)))
			} else {
				messages.Messages = append(messages.Messages, anthropic.NewAssistantMessage(anthropic.NewTextBlock(text)))
			}
		}
		if raw, err := json.Marshal(messages); err != nil || len(raw) < kb<<10 {
			b.Fatalf("conversation of %d bytes (%v), want %d KB", len(raw), err, kb)
		}
		size := fmt.Sprintf("kb=%d", kb)
		anthropicClient := func(srv *httptest.Server) func(bool) anthropic.Client {
			return func(wrapped bool) anthropic.Client {
				opts := []anthropicoption.RequestOption{anthropicoption.WithBaseURL(srv.URL), anthropicoption.WithAPIKey("k"),
					anthropicoption.WithMaxRetries(0), anthropicoption.WithoutOpenTelemetry()}
				if wrapped {
					opts = append(opts, otelanthropic.ClientOptions(otelanthropic.WithTracerProvider(genaitest.BenchTracerProvider()))...)
				}
				return anthropic.NewClient(opts...)
			}
		}
		genaitest.BenchModes(b, anthropicClient(messagesPlain), []genaitest.BenchCall[anthropic.Client]{
			{Name: "sdk=anthropic/call=plain/" + size, Call: func(ctx context.Context, c anthropic.Client) error {
				_, err := c.Messages.New(ctx, messages)
				return err
			}},
		})
		genaitest.BenchModes(b, anthropicClient(messagesStream), []genaitest.BenchCall[anthropic.Client]{
			{Name: "sdk=anthropic/call=stream/" + size, Call: func(ctx context.Context, c anthropic.Client) error {
				return genaitest.Drain(c.Messages.NewStreaming(ctx, messages))
			}},
		})
	}
}
