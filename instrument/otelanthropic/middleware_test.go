package otelanthropic_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/instrument/otelanthropic"
	"github.com/agentledger/agentledger/scriptedmodel"
)

type fixture struct {
	server *scriptedmodel.Server
	rec    *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	client anthropic.Client
}

func newFixture(t *testing.T, maxRetries int, steps ...scriptedmodel.Step) *fixture {
	t.Helper()
	f := &fixture{server: scriptedmodel.New(scriptedmodel.Options{Steps: steps}).Start(), rec: tracetest.NewSpanRecorder()}
	t.Cleanup(f.server.Close)
	f.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f.rec))
	opts := append(otelanthropic.ClientOptions(otelanthropic.WithTracerProvider(f.tp)),
		option.WithBaseURL(f.server.URL()), option.WithAPIKey("test"), option.WithMaxRetries(maxRetries))
	f.client = anthropic.NewClient(opts...)
	return f
}

// fullUsage in GenAI terms: the server sends input_tokens = 100-30-20 = 50.
var fullUsage = scriptedmodel.Usage{InputTokens: 100, OutputTokens: 40, CacheReadTokens: 30, CacheCreationTokens: 20, ReasoningTokens: 10}

func params(text string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 256,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))}}
}

func checkFull(t *testing.T, a map[string]attribute.Value) {
	t.Helper()
	genaitest.WantStr(t, a, "gen_ai.operation.name", "chat")
	genaitest.WantStr(t, a, "gen_ai.provider.name", "anthropic")
	genaitest.WantStr(t, a, "gen_ai.request.model", "claude-test")
	genaitest.WantInt(t, a, "gen_ai.request.max_tokens", 256)
	genaitest.WantStr(t, a, "gen_ai.response.model", "claude-test")
	genaitest.WantStr(t, a, "gen_ai.response.finish_reasons", `["tool_use"]`)
	genaitest.WantStr(t, a, "invocation.response.tool_calls", `["bash:toolu_1"]`)
	genaitest.WantInt(t, a, "gen_ai.usage.input_tokens", 100)
	genaitest.WantInt(t, a, "gen_ai.usage.cache_read.input_tokens", 30)
	genaitest.WantInt(t, a, "gen_ai.usage.cache_creation.input_tokens", 20)
	genaitest.WantInt(t, a, "gen_ai.usage.output_tokens", 40)
	genaitest.WantInt(t, a, "gen_ai.usage.reasoning.output_tokens", 10)
	genaitest.WantAbsent(t, a, "error.type", "invocation.response.stream_closed_early")
}

var toolStep = scriptedmodel.Step{Text: "let me look", Usage: fullUsage,
	ToolCalls: []scriptedmodel.ToolCall{{ID: "toolu_1", Name: "bash", Arguments: `{"command":"ls"}`}}}

func TestMessagesPlain(t *testing.T) {
	f := newFixture(t, 0, toolStep)
	ctx, parent := f.tp.Tracer("caller").Start(context.Background(), "turn")
	msg, err := f.client.Messages.New(ctx, params("hi"))
	parent.End()
	if err != nil {
		t.Fatal(err)
	}
	if msg.Usage.InputTokens != 50 {
		t.Fatalf("caller's input_tokens = %d", msg.Usage.InputTokens)
	}
	s := genaitest.Find(f.rec.Ended(), "chat claude-test")
	if s == nil || len(f.rec.Ended()) != 2 {
		t.Fatalf("spans = %d", len(f.rec.Ended()))
	}
	if s.SpanKind() != trace.SpanKindClient || s.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("kind %v parent %v", s.SpanKind(), s.Parent().SpanID())
	}
	genaitest.WantRegistered(t, s)
	a := genaitest.Attrs(s)
	checkFull(t, a)
	genaitest.WantStr(t, a, "gen_ai.response.id", "msg_scripted_1")
	genaitest.WantAbsent(t, a, "gen_ai.request.stream")
}

func TestMessagesStreaming(t *testing.T) {
	f := newFixture(t, 0, toolStep)
	st := f.client.Messages.NewStreaming(context.Background(), params("hi"))
	var acc anthropic.Message
	for st.Next() {
		_ = acc.Accumulate(st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	if acc.Usage.OutputTokens != 40 {
		t.Errorf("caller's output tokens = %d", acc.Usage.OutputTokens)
	}
	a := genaitest.Attrs(genaitest.Only(t, f.rec))
	checkFull(t, a)
	genaitest.WantStr(t, a, "gen_ai.response.id", "msg_scripted_1")
	genaitest.WantStr(t, a, "gen_ai.request.stream", "true")
}

func TestMessagesStreamClosedEarly(t *testing.T) {
	f := newFixture(t, 0, scriptedmodel.Step{Text: "a long streamed answer", Usage: fullUsage})
	st := f.client.Messages.NewStreaming(context.Background(), params("hi"))
	for range 3 {
		st.Next()
	}
	_ = st.Close()
	_ = st.Close()
	a := genaitest.Attrs(genaitest.Only(t, f.rec))
	genaitest.WantStr(t, a, "invocation.response.stream_closed_early", "true")
	genaitest.WantStr(t, a, "invocation.response.ending", "caller_closed")
	// message_start carried the input usage and a partial output count;
	// what the message billed is unknown: no usage, no error status, so
	// the invocation closes incomplete (usage_missing), never final.
	genaitest.WantAbsent(t, a, append([]string{"error.type"}, genaitest.UsageKeys...)...)
}

func TestMessagesStreamCut(t *testing.T) {
	f := newFixture(t, 0, scriptedmodel.Step{Text: "a long streamed answer", Usage: fullUsage, CutAfter: 4})
	st := f.client.Messages.NewStreaming(context.Background(), params("hi"))
	for st.Next() {
	}
	if st.Err() == nil {
		t.Fatal("want a stream error")
	}
	genaitest.WantCut(t, genaitest.Only(t, f.rec))
}

func TestMessagesError(t *testing.T) {
	f := newFixture(t, 0, scriptedmodel.Step{Status: http.StatusBadRequest})
	_, err := f.client.Messages.New(context.Background(), params("hi"))
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Fatalf("err = %v", err)
	}
	s := genaitest.Only(t, f.rec)
	a := genaitest.Attrs(s)
	genaitest.WantStr(t, a, "error.type", "400")
	genaitest.WantAbsent(t, a, genaitest.UsageKeys...)
	if s.Status().Code != codes.Error {
		t.Errorf("status %v", s.Status())
	}
}

func TestMessagesRetry(t *testing.T) {
	now := http.Header{"Retry-After-Ms": {"1"}}
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			f := newFixture(t, 2, scriptedmodel.Step{Status: 429, Header: now}, scriptedmodel.Step{Status: 529, Header: now}, toolStep)
			if stream {
				st := f.client.Messages.NewStreaming(context.Background(), params("hi"))
				for st.Next() {
				}
				if err := st.Err(); err != nil {
					t.Fatal(err)
				}
				_ = st.Close()
			} else if _, err := f.client.Messages.New(context.Background(), params("hi")); err != nil {
				t.Fatal(err)
			}
			if n := len(f.server.Requests()); n != 3 {
				t.Fatalf("requests = %d", n)
			}
			s := genaitest.Only(t, f.rec)
			a := genaitest.Attrs(s)
			checkFull(t, a)
			genaitest.WantInt(t, a, "http.request.resend_count", 2)
			if s.Status().Code == codes.Error {
				t.Errorf("status %v", s.Status())
			}
		})
	}
}

func TestMessagesRetriesExhausted(t *testing.T) {
	now := http.Header{"Retry-After-Ms": {"1"}}
	f := newFixture(t, 1, scriptedmodel.Step{Status: 529, Header: now}, scriptedmodel.Step{Status: 529, Header: now})
	if _, err := f.client.Messages.New(context.Background(), params("hi")); err == nil {
		t.Fatal("want an error")
	}
	s := genaitest.Only(t, f.rec)
	genaitest.WantStr(t, genaitest.Attrs(s), "error.type", "529")
	genaitest.WantInt(t, genaitest.Attrs(s), "http.request.resend_count", 1)
}

func TestMessagesMissingUsage(t *testing.T) {
	f := newFixture(t, 0, scriptedmodel.Step{Text: "x", OmitUsage: true}, scriptedmodel.Step{Text: "y", OmitUsage: true})
	if _, err := f.client.Messages.New(context.Background(), params("hi")); err != nil {
		t.Fatal(err)
	}
	st := f.client.Messages.NewStreaming(context.Background(), params("hi"))
	for st.Next() {
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if n := len(f.rec.Ended()); n != 2 {
		t.Fatalf("spans = %d", n)
	}
	for _, s := range f.rec.Ended() {
		a := genaitest.Attrs(s)
		genaitest.WantAbsent(t, a, genaitest.UsageKeys...)
		genaitest.WantStr(t, a, "gen_ai.response.finish_reasons", `["end_turn"]`)
	}
}

// Without ClientOptions, the SDK's own span through the global provider
// would be a second model-call span with the same usage.
func TestClientOptionsTurnOffSDKSpans(t *testing.T) {
	srv := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{toolStep, toolStep}}).Start()
	defer srv.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(prev)

	var reported []error
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { reported = append(reported, err) }))
	defer otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))

	base := []option.RequestOption{option.WithBaseURL(srv.URL()), option.WithAPIKey("k")}
	bare := anthropic.NewClient(append(base, option.WithMiddleware(otelanthropic.Middleware()))...)
	if _, err := bare.Messages.New(context.Background(), params("hi")); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Ended()); n != 2 {
		t.Fatalf("with the SDK's spans on: %d spans, want 2 (the double count ClientOptions prevents)", n)
	}
	if len(reported) != 1 || !strings.Contains(reported[0].Error(), "ClientOptions") {
		t.Errorf("reported %v, want one warning naming ClientOptions", reported)
	}
	wrapped := anthropic.NewClient(append(base, otelanthropic.ClientOptions()...)...)
	if _, err := wrapped.Messages.New(context.Background(), params("hi")); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Ended()); n != 3 {
		t.Fatalf("with ClientOptions: %d more spans, want 1", n-2)
	}
}

func TestCaptureContent(t *testing.T) {
	srv := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{{Text: "secret answer"}, {Text: "streamed secret"}}}).Start()
	defer srv.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	opts := otelanthropic.ClientOptions(otelanthropic.WithTracerProvider(tp), otelanthropic.WithCaptureContent(true))
	client := anthropic.NewClient(append(opts, option.WithBaseURL(srv.URL()), option.WithAPIKey("k"))...)
	if _, err := client.Messages.New(context.Background(), params("secret question")); err != nil {
		t.Fatal(err)
	}
	st := client.Messages.NewStreaming(context.Background(), params("q2"))
	for st.Next() {
	}
	spans := rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("spans = %d", len(spans))
	}
	a := genaitest.Attrs(spans[0])
	genaitest.WantStr(t, a, "gen_ai.input.messages", `[{"content":[{"text":"secret question","type":"text"}],"role":"user"}]`)
	genaitest.WantStr(t, a, "gen_ai.output.messages", `[{"parts":[{"content":"secret answer","type":"text"}],"role":"assistant"}]`)
	genaitest.WantStr(t, genaitest.Attrs(spans[1]), "gen_ai.output.messages", `[{"parts":[{"content":"streamed secret","type":"text"}],"role":"assistant"}]`)
}
