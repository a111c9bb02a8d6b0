package genaicall

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/instrument/internal/genaitest"
)

// A stale timer of an earlier parking does not end the call parked again.
func TestStaleTimerIgnored(t *testing.T) {
	timers := genaitest.NewFakeTimers()
	rec := tracetest.NewSpanRecorder()
	cfg := Config{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), AfterFunc: timers.AfterFunc}.WithDefaults()
	m := New(cfg, Scope{Name: "test", Provider: "test"})
	key := callKey{endpoint: 1}
	_, span := m.tracer.Start(context.Background(), "chat m")
	c := &call{m: m, span: span, operation: "chat"}
	m.park(key, c, context.Background(), 0)
	stale := timers.Scheduled(0)
	if m.take(key) != c {
		t.Fatal("take did not return the parked call")
	}
	m.park(key, c, context.Background(), 0)
	stale()
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("stale timer ended the call")
	}
	timers.Scheduled(1)()
	if n := len(rec.Ended()); n != 1 {
		t.Fatalf("ended = %d", n)
	}
}
