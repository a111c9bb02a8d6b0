package otelopenai_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/openai/openai-go/v3"
	openaioption "github.com/openai/openai-go/v3/option"

	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/instrument/otelopenai"
)

// BenchmarkLargeRequest measures one call whose request carries a long
// conversation (kb=100 and kb=500 kilobytes of messages) through the
// OpenAI SDK, plain and streamed, with the SDK alone (mode=unwrapped, the
// baseline) and with the middleware and a span-dropping TracerProvider
// (mode=wrapped): what the wrapper's reading of the request body costs.
// The streamed call does not ask for usage, so the wrapper adds
// stream_options.include_usage to the body. Compare the modes with
// benchstat -col /mode.
func BenchmarkLargeRequest(b *testing.B) {
	chatPlain := genaitest.CannedServer(b, "/v1/chat/completions", `{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}`)
	chatStream := genaitest.CannedServer(b, "/v1/chat/completions",
		`{"model":"gpt-test","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`)

	for _, kb := range []int{100, 500} {
		turns := genaitest.Conversation(kb)
		chat := openai.ChatCompletionNewParams{Model: "gpt-test"}
		for i, text := range turns {
			if i%2 == 0 {
				chat.Messages = append(chat.Messages, openai.UserMessage(text))
			} else {
				chat.Messages = append(chat.Messages, openai.AssistantMessage(text))
			}
		}
		if raw, err := json.Marshal(chat); err != nil || len(raw) < kb<<10 {
			b.Fatalf("conversation of %d bytes (%v), want %d KB", len(raw), err, kb)
		}
		size := fmt.Sprintf("kb=%d", kb)
		openaiClient := func(srv *httptest.Server) func(bool) openai.Client {
			return func(wrapped bool) openai.Client {
				opts := []openaioption.RequestOption{openaioption.WithBaseURL(srv.URL + "/v1/"), openaioption.WithAPIKey("k"), openaioption.WithMaxRetries(0)}
				if wrapped {
					opts = append(opts, openaioption.WithMiddleware(otelopenai.Middleware(otelopenai.WithTracerProvider(genaitest.BenchTracerProvider()))))
				}
				return openai.NewClient(opts...)
			}
		}
		genaitest.BenchModes(b, openaiClient(chatPlain), []genaitest.BenchCall[openai.Client]{
			{Name: "sdk=openai/call=plain/" + size, Call: func(ctx context.Context, c openai.Client) error {
				_, err := c.Chat.Completions.New(ctx, chat)
				return err
			}},
		})
		genaitest.BenchModes(b, openaiClient(chatStream), []genaitest.BenchCall[openai.Client]{
			{Name: "sdk=openai/call=stream/" + size, Call: func(ctx context.Context, c openai.Client) error {
				return genaitest.Drain(c.Chat.Completions.NewStreaming(ctx, chat))
			}},
		})
	}
}
