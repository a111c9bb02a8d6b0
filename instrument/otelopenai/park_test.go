package otelopenai

import (
	"context"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/instrument/internal/genaicall"
	"github.com/agentledger/agentledger/instrument/internal/genaitest"
)

func newParkClient(t *testing.T, retries int) (openai.Client, *tracetest.SpanRecorder, *genaitest.FakeTimers, *middleware) {
	return newParkClientWith(t, retries, nil)
}

func newParkClientWith(t *testing.T, retries int, extra sdktrace.SpanProcessor) (openai.Client, *tracetest.SpanRecorder, *genaitest.FakeTimers, *middleware) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	if extra != nil {
		tp.RegisterSpanProcessor(extra)
	}
	timers := genaitest.NewFakeTimers()
	cfg := newConfig([]Option{WithTracerProvider(tp)})
	cfg.AfterFunc = timers.AfterFunc
	m := newMiddleware(cfg)
	c := openai.NewClient(option.WithBaseURL(genaitest.ClosedURL(t)), option.WithAPIKey("k"),
		option.WithMaxRetries(retries), option.WithMaxRetryDelay(time.Millisecond), option.WithMiddleware(m.handle))
	return c, rec, timers, m
}

func chat() openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}}
}

// A final transport error leaves the span waiting for a retry that never
// comes; the retry window ends it at the failed attempt's end.
func TestTransportErrorEndsAfterRetryWindow(t *testing.T) {
	c, rec, timers, m := newParkClient(t, 0)
	before := time.Now()
	if _, err := c.Chat.Completions.New(context.Background(), chat()); err == nil {
		t.Fatal("want a connection error")
	}
	after := time.Now()
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("ended before the window: %d", n)
	}
	timers.FireAll()
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("ended = %d", len(spans))
	}
	s := spans[0]
	if s.EndTime().Before(before) || s.EndTime().After(after) {
		t.Errorf("end %v not within the call [%v, %v]", s.EndTime(), before, after)
	}
	if n := m.Parked(); n != 0 {
		t.Errorf("pending = %d", n)
	}
	found := false
	for _, kv := range s.Attributes() {
		if kv.Key == "error.type" {
			found = true
		}
	}
	if !found {
		t.Error("error.type missing")
	}
}

// Transport errors retried by the SDK stay one span.
func TestTransportErrorRetriedIsOneSpan(t *testing.T) {
	c, rec, timers, _ := newParkClient(t, 2)
	_, _ = c.Chat.Completions.New(context.Background(), chat())
	// A new first attempt of the same request ends the parked call at once.
	_, _ = c.Chat.Completions.New(context.Background(), chat())
	if n := len(rec.Ended()); n != 1 {
		t.Fatalf("ended = %d, want the first call only", n)
	}
	if n := len(rec.Started()); n != 2 {
		t.Fatalf("started = %d, want 2", n)
	}
	attempts := 0
	for _, e := range rec.Ended()[0].Events() {
		if e.Name == "attempt" {
			attempts++
		}
	}
	if attempts != 3 {
		t.Errorf("attempt events = %d, want 3", attempts)
	}
	timers.FireAll()
	if n := len(rec.Ended()); n != 2 {
		t.Fatalf("ended = %d", n)
	}
}

// A cancelled context ends a parked call shortly, without waiting for the
// retry window.
func TestParkedCallEndsWithContext(t *testing.T) {
	c, rec, timers, _ := newParkClient(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	_, _ = c.Chat.Completions.New(ctx, chat())
	if d := <-timers.Added; d != DefaultRetryWindow {
		t.Fatalf("first timer %v, want the retry window", d)
	}
	cancel()
	// context.AfterFunc schedules the grace in its own goroutine.
	select {
	case d := <-timers.Added:
		if d != genaicall.ContextGrace {
			t.Fatalf("timer %v, want the grace", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no grace timer after cancel")
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("ended before the grace: %d", n)
	}
	timers.FireAll()
	if n := len(rec.Ended()); n != 1 {
		t.Fatalf("ended = %d", n)
	}
}
