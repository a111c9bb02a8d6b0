package otelanthropic

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/instrument/internal/genaitest"
)

func testMessage() anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 16,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("x"))}}
}

// A final transport error leaves the span waiting for a retry that never
// comes; the retry window ends it at the failed attempt's end, and a new
// first attempt of the same request ends it at once.
func TestTransportErrorParked(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	timers := genaitest.NewFakeTimers()
	cfg := newConfig([]Option{WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))})
	cfg.AfterFunc = timers.AfterFunc
	m := newMiddleware(cfg)
	c := anthropic.NewClient(option.WithBaseURL(strings.TrimSuffix(genaitest.ClosedURL(t), "v1/")), option.WithAPIKey("k"),
		option.WithMaxRetries(0), option.WithoutOpenTelemetry(), option.WithMiddleware(m.handle))

	before := time.Now()
	if _, err := c.Messages.New(context.Background(), testMessage()); err == nil {
		t.Fatal("want a connection error")
	}
	after := time.Now()
	if d := <-timers.Added; d != DefaultRetryWindow {
		t.Fatalf("first timer %v, want the retry window", d)
	}
	if n := len(rec.Ended()); n != 0 || m.Parked() != 1 {
		t.Fatalf("ended %d, parked %d before the window", n, m.Parked())
	}
	if _, err := c.Messages.New(context.Background(), testMessage()); err == nil {
		t.Fatal("want a connection error")
	}
	ended := rec.Ended()
	if len(ended) != 1 || len(rec.Started()) != 2 {
		t.Fatalf("ended %d, started %d, want the first call only ended", len(ended), len(rec.Started()))
	}
	s := ended[0]
	if s.EndTime().Before(before) || s.EndTime().After(after) {
		t.Errorf("end %v not within the call [%v, %v]", s.EndTime(), before, after)
	}
	a := genaitest.Attrs(s)
	if _, ok := a["error.type"]; !ok {
		t.Error("error.type missing")
	}
	genaitest.WantStr(t, a, "gen_ai.provider.name", "anthropic")
	timers.FireAll()
	if n := len(rec.Ended()); n != 2 || m.Parked() != 0 {
		t.Fatalf("after the window: ended %d, parked %d", n, m.Parked())
	}
}
