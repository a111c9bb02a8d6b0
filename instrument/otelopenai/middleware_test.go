package otelopenai_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/instrument/otelopenai"
	"github.com/agentledger/agentledger/scriptedmodel"
)

type fixture struct {
	server *scriptedmodel.Server
	rec    *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	client openai.Client
}

func newFixture(t *testing.T, maxRetries int, steps ...scriptedmodel.Step) *fixture {
	return newFixtureOpts(t, maxRetries, nil, steps...)
}

func newFixtureOpts(t *testing.T, maxRetries int, opts []otelopenai.Option, steps ...scriptedmodel.Step) *fixture {
	t.Helper()
	f := &fixture{server: scriptedmodel.New(scriptedmodel.Options{Steps: steps}).Start(), rec: tracetest.NewSpanRecorder()}
	t.Cleanup(f.server.Close)
	f.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(f.rec))
	f.client = openai.NewClient(
		option.WithBaseURL(f.server.OpenAIBaseURL()),
		option.WithAPIKey("test"),
		option.WithMaxRetries(maxRetries),
		option.WithMiddleware(otelopenai.Middleware(append([]otelopenai.Option{otelopenai.WithTracerProvider(f.tp)}, opts...)...)),
	)
	return f
}

func params(text string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    "gpt-test",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
	}
}

var fullUsage = scriptedmodel.Usage{InputTokens: 100, OutputTokens: 40, CacheReadTokens: 60, ReasoningTokens: 25}

func TestChatPlain(t *testing.T) {
	f := newFixtureOpts(t, 0, []otelopenai.Option{otelopenai.WithPropagators(propagation.TraceContext{})}, scriptedmodel.Step{
		Text: "done", Model: "gpt-test-2026", ID: "chatcmpl-1", Usage: fullUsage,
		ToolCalls: []scriptedmodel.ToolCall{{ID: "call_1", Name: "shell"}, {ID: "call_2", Name: "read"}},
	})
	tracer := f.tp.Tracer("caller")
	ctx, parent := tracer.Start(context.Background(), "execute turn")
	p := params("hi")
	p.MaxCompletionTokens = openai.Int(512)
	p.Temperature = openai.Float(0.5)
	res, err := f.client.Chat.Completions.New(ctx, p)
	parent.End()
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage.PromptTokens != 100 {
		t.Fatalf("caller's usage = %d", res.Usage.PromptTokens)
	}
	s := genaitest.Find(f.rec.Ended(), "chat gpt-test")
	if s == nil {
		t.Fatalf("no chat span among %d", len(f.rec.Ended()))
	}
	if s.SpanKind() != trace.SpanKindClient || s.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("kind %v parent %v, want client child of caller", s.SpanKind(), s.Parent().SpanID())
	}
	genaitest.WantRegistered(t, s)
	a := genaitest.Attrs(s)
	genaitest.WantStr(t, a, "gen_ai.operation.name", "chat")
	genaitest.WantStr(t, a, "gen_ai.provider.name", "openai")
	genaitest.WantStr(t, a, "gen_ai.request.model", "gpt-test")
	genaitest.WantInt(t, a, "gen_ai.request.max_tokens", 512)
	genaitest.WantStr(t, a, "gen_ai.request.temperature", "0.5")
	genaitest.WantAbsent(t, a, "gen_ai.request.top_p")
	genaitest.WantStr(t, a, "gen_ai.response.model", "gpt-test-2026")
	genaitest.WantStr(t, a, "gen_ai.response.id", "chatcmpl-1")
	genaitest.WantStr(t, a, "gen_ai.response.finish_reasons", `["tool_calls"]`)
	genaitest.WantStr(t, a, "invocation.response.tool_calls", `["shell:call_1","read:call_2"]`)
	genaitest.WantStr(t, a, "server.address", "127.0.0.1")
	genaitest.WantInt(t, a, "gen_ai.usage.input_tokens", 100)
	genaitest.WantInt(t, a, "gen_ai.usage.output_tokens", 40)
	genaitest.WantInt(t, a, "gen_ai.usage.cache_read.input_tokens", 60)
	genaitest.WantInt(t, a, "gen_ai.usage.reasoning.output_tokens", 25)
	genaitest.WantAbsent(t, a, "gen_ai.usage.cache_creation.input_tokens", "error.type", "gen_ai.input.messages", "invocation.response.stream_closed_early", "gen_ai.request.stream")
	if _, ok := a["server.port"]; !ok {
		t.Error("server.port missing")
	}
	if s.Status().Code == codes.Error {
		t.Errorf("status %v", s.Status())
	}
	// The server saw the trace context of the model-call span.
	want := fmt.Sprintf("00-%s-%s-01", s.SpanContext().TraceID(), s.SpanContext().SpanID())
	if got := f.server.Requests()[0].Header.Get("Traceparent"); got != want {
		t.Errorf("traceparent = %q, want %q", got, want)
	}
}

func TestChatStreaming(t *testing.T) {
	for _, callerAsks := range []bool{false, true} {
		t.Run(fmt.Sprint("caller_include_usage=", callerAsks), func(t *testing.T) {
			f := newFixture(t, 0, scriptedmodel.Step{
				Text: "streamed", Usage: fullUsage,
				ToolCalls: []scriptedmodel.ToolCall{{ID: "call_s", Name: "grep", Arguments: `{"q":"x"}`}},
			})
			p := params("hi")
			if callerAsks {
				p.StreamOptions.IncludeUsage = openai.Bool(true)
			}
			st := f.client.Chat.Completions.NewStreaming(context.Background(), p)
			var acc openai.ChatCompletionAccumulator
			usageChunks := 0
			for st.Next() {
				ch := st.Current()
				if len(ch.Choices) == 0 {
					usageChunks++
				}
				acc.AddChunk(ch)
			}
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			if acc.Choices[0].Message.Content != "streamed" {
				t.Errorf("caller's content = %q", acc.Choices[0].Message.Content)
			}
			// The caller sees exactly what it asked for.
			wantChunks := 0
			if callerAsks {
				wantChunks = 1
			}
			if usageChunks != wantChunks {
				t.Errorf("caller saw %d usage-only chunks, want %d", usageChunks, wantChunks)
			}
			if r := f.server.Requests()[0]; !r.IncludeUsage {
				t.Error("request to the server did not ask for usage")
			}
			a := genaitest.Attrs(genaitest.Only(t, f.rec))
			genaitest.WantInt(t, a, "gen_ai.usage.input_tokens", 100)
			genaitest.WantInt(t, a, "gen_ai.usage.output_tokens", 40)
			genaitest.WantInt(t, a, "gen_ai.usage.cache_read.input_tokens", 60)
			genaitest.WantInt(t, a, "gen_ai.usage.reasoning.output_tokens", 25)
			genaitest.WantStr(t, a, "gen_ai.response.finish_reasons", `["tool_calls"]`)
			genaitest.WantStr(t, a, "invocation.response.tool_calls", `["grep:call_s"]`)
			genaitest.WantStr(t, a, "gen_ai.request.stream", "true")
			genaitest.WantStr(t, a, "gen_ai.response.id", "chatcmpl-scripted-1")
			genaitest.WantAbsent(t, a, "error.type", "invocation.response.stream_closed_early")
		})
	}
}

func TestChatStreamClosedEarly(t *testing.T) {
	f := newFixture(t, 0, scriptedmodel.Step{Text: "a long streamed answer", Usage: fullUsage})
	st := f.client.Chat.Completions.NewStreaming(context.Background(), params("hi"))
	if !st.Next() {
		t.Fatal(st.Err())
	}
	if n := len(f.rec.Ended()); n != 0 {
		t.Fatalf("span ended before the stream: %d", n)
	}
	_ = st.Close()
	_ = st.Close()
	a := genaitest.Attrs(genaitest.Only(t, f.rec))
	genaitest.WantStr(t, a, "invocation.response.stream_closed_early", "true")
	genaitest.WantStr(t, a, "gen_ai.request.stream", "true")
	genaitest.WantAbsent(t, a, genaitest.UsageKeys...)
}

func TestChatStreamCut(t *testing.T) {
	f := newFixture(t, 0, scriptedmodel.Step{Text: "a long streamed answer", Usage: fullUsage, CutAfter: 3})
	st := f.client.Chat.Completions.NewStreaming(context.Background(), params("hi"))
	for st.Next() {
	}
	if st.Err() == nil {
		t.Fatal("want a stream error")
	}
	genaitest.WantCut(t, genaitest.Only(t, f.rec))
}

func TestChatError(t *testing.T) {
	f := newFixture(t, 0, scriptedmodel.Step{Status: http.StatusBadRequest, ErrorMessage: "bad model"})
	_, err := f.client.Chat.Completions.New(context.Background(), params("hi"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 {
		t.Fatalf("err = %v", err)
	}
	s := genaitest.Only(t, f.rec)
	a := genaitest.Attrs(s)
	genaitest.WantStr(t, a, "error.type", "400")
	genaitest.WantAbsent(t, a, genaitest.UsageKeys...)
	if s.Status().Code != codes.Error {
		t.Errorf("status = %v", s.Status())
	}
	if n := len(s.Events()); n != 2 { // one attempt, one exception
		t.Errorf("events = %d", n)
	}
}

func TestChatRetry(t *testing.T) {
	retryNow := http.Header{"Retry-After-Ms": {"1"}}
	f := newFixture(t, 2,
		scriptedmodel.Step{Status: http.StatusTooManyRequests, Header: retryNow},
		scriptedmodel.Step{Status: http.StatusInternalServerError, Header: retryNow},
		scriptedmodel.Step{Text: "ok", Usage: scriptedmodel.Usage{InputTokens: 9, OutputTokens: 3}},
	)
	if _, err := f.client.Chat.Completions.New(context.Background(), params("hi")); err != nil {
		t.Fatal(err)
	}
	if n := len(f.server.Requests()); n != 3 {
		t.Fatalf("server saw %d requests", n)
	}
	s := genaitest.Only(t, f.rec)
	a := genaitest.Attrs(s)
	genaitest.WantInt(t, a, "gen_ai.usage.input_tokens", 9)
	genaitest.WantInt(t, a, "gen_ai.usage.output_tokens", 3)
	genaitest.WantInt(t, a, "http.request.resend_count", 2)
	genaitest.WantAbsent(t, a, "error.type")
	if s.Status().Code == codes.Error {
		t.Errorf("status = %v", s.Status())
	}
	var statuses []int64
	for _, e := range s.Events() {
		if e.Name != "attempt" {
			continue
		}
		for _, kv := range e.Attributes {
			if kv.Key == "http.response.status_code" {
				statuses = append(statuses, kv.Value.AsInt64())
			}
		}
	}
	if fmt.Sprint(statuses) != "[429 500 200]" {
		t.Errorf("attempt statuses = %v", statuses)
	}
}

func TestChatRetriesExhausted(t *testing.T) {
	retryNow := http.Header{"Retry-After-Ms": {"1"}}
	f := newFixture(t, 1,
		scriptedmodel.Step{Status: http.StatusTooManyRequests, Header: retryNow},
		scriptedmodel.Step{Status: http.StatusTooManyRequests, Header: retryNow},
		scriptedmodel.Step{Text: "not reached"},
	)
	if _, err := f.client.Chat.Completions.New(context.Background(), params("hi")); err == nil {
		t.Fatal("want an error")
	}
	s := genaitest.Only(t, f.rec)
	a := genaitest.Attrs(s)
	genaitest.WantStr(t, a, "error.type", "429")
	genaitest.WantInt(t, a, "http.request.resend_count", 1)
	if s.Status().Code != codes.Error {
		t.Errorf("status = %v", s.Status())
	}
}

func TestChatMissingUsage(t *testing.T) {
	f := newFixture(t, 0, scriptedmodel.Step{Text: "x", OmitUsage: true}, scriptedmodel.Step{Text: "y", OmitUsage: true})
	if _, err := f.client.Chat.Completions.New(context.Background(), params("hi")); err != nil {
		t.Fatal(err)
	}
	st := f.client.Chat.Completions.NewStreaming(context.Background(), params("hi"))
	for st.Next() {
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	spans := f.rec.Ended()
	if len(spans) != 2 {
		t.Fatalf("spans = %d", len(spans))
	}
	for _, s := range spans {
		a := genaitest.Attrs(s)
		genaitest.WantAbsent(t, a, genaitest.UsageKeys...)
		genaitest.WantStr(t, a, "gen_ai.response.finish_reasons", `["stop"]`)
	}
}

func TestConcurrentSessions(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	srv := scriptedmodel.New(scriptedmodel.Options{Responder: func(r scriptedmodel.Request) scriptedmodel.Step {
		var n int
		fmt.Sscanf(r.LastUserText(), "session %d", &n)
		if r.Header.Get("X-Stainless-Retry-Count") == "0" && n%3 == 0 {
			return scriptedmodel.Step{Status: 429, Header: http.Header{"Retry-After-Ms": {"1"}}}
		}
		return scriptedmodel.Step{Text: "ok", Usage: scriptedmodel.Usage{InputTokens: n, OutputTokens: 1}}
	}}).Start()
	defer srv.Close()
	client := openai.NewClient(option.WithBaseURL(srv.OpenAIBaseURL()), option.WithAPIKey("k"), option.WithMaxRetries(1),
		option.WithMiddleware(otelopenai.Middleware(otelopenai.WithTracerProvider(tp))))
	const sessions = 12
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := params(fmt.Sprintf("session %d", i+1))
			if i%2 == 0 {
				_, _ = client.Chat.Completions.New(context.Background(), p)
				return
			}
			st := client.Chat.Completions.NewStreaming(context.Background(), p)
			for st.Next() {
			}
			_ = st.Close()
		}()
	}
	wg.Wait()
	spans := rec.Ended()
	if len(spans) != sessions {
		t.Fatalf("spans = %d, want %d", len(spans), sessions)
	}
	var sum int64
	for _, s := range spans {
		sum += genaitest.Attrs(s)["gen_ai.usage.input_tokens"].AsInt64()
	}
	if want := int64(sessions * (sessions + 1) / 2); sum != want {
		t.Errorf("input tokens sum = %d, want %d", sum, want)
	}
}

func TestCaptureContent(t *testing.T) {
	srv := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{{Text: "secret answer"}}}).Start()
	defer srv.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	client := openai.NewClient(option.WithBaseURL(srv.OpenAIBaseURL()), option.WithAPIKey("k"),
		option.WithMiddleware(otelopenai.Middleware(otelopenai.WithTracerProvider(tp), otelopenai.WithCaptureContent(true), nil)))
	if _, err := client.Chat.Completions.New(context.Background(), params("secret question")); err != nil {
		t.Fatal(err)
	}
	a := genaitest.Attrs(rec.Ended()[0])
	genaitest.WantStr(t, a, "gen_ai.input.messages", `[{"content":"secret question","role":"user"}]`)
	genaitest.WantStr(t, a, "gen_ai.output.messages", `[{"parts":[{"content":"secret answer","type":"text"}],"role":"assistant"}]`)
}
