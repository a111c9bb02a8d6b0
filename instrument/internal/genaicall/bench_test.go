package genaicall_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	openaioption "github.com/openai/openai-go/v3/option"

	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/instrument/otelanthropic"
	"github.com/agentledger/agentledger/instrument/otelopenai"
)

// conversationTurn is one turn of a coding agent's conversation: a tool
// result with source code (quotes, tabs and newlines to escape) and the
// assistant's answer.
const conversationTurn = "func (s *Server) next(w http.ResponseWriter, hr *http.Request) (Request, Step, bool) {\n" +
	"\traw, err := io.ReadAll(hr.Body)\n\tif err != nil {\n\t\thttp.Error(w, err.Error(), http.StatusBadRequest)\n" +
	"\t\treturn Request{}, Step{}, false\n\t}\n\tr := Request{Method: hr.Method, Path: hr.URL.Path, \"Raw\": raw}\n}\n"

// conversation returns alternating user and assistant texts of about kb
// kilobytes in all, as they stand in a long agent session.
func conversation(kb int) []string {
	var turns []string
	for size := 0; size < kb<<10; {
		text := fmt.Sprintf("turn %d: %s", len(turns), strings.Repeat(conversationTurn, 4))
		turns = append(turns, text)
		size += len(text)
	}
	return turns
}

// cannedServer answers every request with the response the scripted
// model gives to a small request of the same kind (path and body), after
// reading and dropping the request's body: unlike the scripted model, it
// neither parses nor keeps the large bodies the benchmark sends, so that
// what differs between the modes is the client side.
func cannedServer(b *testing.B, path, body string) *httptest.Server {
	b.Helper()
	model := genaitest.BenchServer("call_b", "shell", `{"cmd":"go test ./..."}`)
	defer model.Close()
	rec := httptest.NewRecorder()
	model.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
	if rec.Code != http.StatusOK {
		b.Fatalf("scripted model answered %d: %s", rec.Code, rec.Body)
	}
	answer, contentType := rec.Body.Bytes(), rec.Header().Get("Content-Type")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(answer)
	}))
	b.Cleanup(srv.Close)
	return srv
}

// BenchmarkLargeRequest measures one call whose request carries a long
// conversation (kb=100 and kb=500 kilobytes of messages) through the
// OpenAI and Anthropic SDKs, plain and streamed, with the SDK alone
// (mode=unwrapped, the baseline) and with the wrapper and a
// span-dropping TracerProvider (mode=wrapped): what the wrappers' reading
// of the request body costs. The streamed OpenAI call does not ask for
// usage, so the wrapper adds stream_options.include_usage to the body.
// Compare the modes with benchstat -col /mode.
func BenchmarkLargeRequest(b *testing.B) {
	chatPlain := cannedServer(b, "/v1/chat/completions", `{"model":"gpt-test","messages":[{"role":"user","content":"hi"}]}`)
	chatStream := cannedServer(b, "/v1/chat/completions",
		`{"model":"gpt-test","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}`)
	messagesPlain := cannedServer(b, "/v1/messages", `{"model":"claude-test","max_tokens":1024,"messages":[{"role":"user","content":"hi"}]}`)
	messagesStream := cannedServer(b, "/v1/messages", `{"model":"claude-test","max_tokens":1024,"messages":[{"role":"user","content":"hi"}],"stream":true}`)

	for _, kb := range []int{100, 500} {
		turns := conversation(kb)
		chat := openai.ChatCompletionNewParams{Model: "gpt-test"}
		messages := anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 1024}
		for i, text := range turns {
			if i%2 == 0 {
				chat.Messages = append(chat.Messages, openai.UserMessage(text))
				messages.Messages = append(messages.Messages, anthropic.NewUserMessage(anthropic.NewTextBlock(text)))
			} else {
				chat.Messages = append(chat.Messages, openai.AssistantMessage(text))
				messages.Messages = append(messages.Messages, anthropic.NewAssistantMessage(anthropic.NewTextBlock(text)))
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
