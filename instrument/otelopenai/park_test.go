package otelopenai

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/instrument/internal/genaicall"
)

// fakeTimers records the retry-window fallbacks instead of scheduling them.
type fakeTimers struct {
	mu    sync.Mutex
	fns   []func()
	added chan time.Duration
}

type fakeTimer struct{}

func (fakeTimer) Stop() bool { return true }

func (f *fakeTimers) afterFunc(d time.Duration, fn func()) genaicall.Stopper {
	f.mu.Lock()
	f.fns = append(f.fns, fn)
	f.mu.Unlock()
	select {
	case f.added <- d:
	default:
	}
	return fakeTimer{}
}

func (f *fakeTimers) fireAll() {
	f.mu.Lock()
	fns := f.fns
	f.fns = nil
	f.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// closedURL returns a loopback URL nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return "http://" + addr + "/v1/"
}

func newParkClient(t *testing.T, retries int) (openai.Client, *tracetest.SpanRecorder, *fakeTimers, *middleware) {
	return newParkClientWith(t, retries, nil)
}

func newParkClientWith(t *testing.T, retries int, extra sdktrace.SpanProcessor) (openai.Client, *tracetest.SpanRecorder, *fakeTimers, *middleware) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	if extra != nil {
		tp.RegisterSpanProcessor(extra)
	}
	timers := &fakeTimers{added: make(chan time.Duration, 16)}
	cfg := newConfig([]Option{WithTracerProvider(tp)})
	cfg.AfterFunc = timers.afterFunc
	m := newMiddleware(cfg)
	c := openai.NewClient(option.WithBaseURL(closedURL(t)), option.WithAPIKey("k"),
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
	timers.fireAll()
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("ended = %d", len(spans))
	}
	s := spans[0]
	if s.EndTime().Before(before) || s.EndTime().After(after) {
		t.Errorf("end %v not within the call [%v, %v]", s.EndTime(), before, after)
	}
	if len(m.pending) != 0 {
		t.Errorf("pending = %d", len(m.pending))
	}
	found := false
	for _, kv := range s.Attributes() {
		if kv.Key == attrErrorType {
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
		if e.Name == eventAttempt {
			attempts++
		}
	}
	if attempts != 3 {
		t.Errorf("attempt events = %d, want 3", attempts)
	}
	timers.fireAll()
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
	if d := <-timers.added; d != DefaultRetryWindow {
		t.Fatalf("first timer %v, want the retry window", d)
	}
	cancel()
	// context.AfterFunc schedules the grace in its own goroutine.
	select {
	case d := <-timers.added:
		if d != ctxGrace {
			t.Fatalf("timer %v, want the grace", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no grace timer after cancel")
	}
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("ended before the grace: %d", n)
	}
	timers.fireAll()
	if n := len(rec.Ended()); n != 1 {
		t.Fatalf("ended = %d", n)
	}
}

// A stale timer of an earlier parking does not end the call parked again.
func TestStaleTimerIgnored(t *testing.T) {
	timers := &fakeTimers{added: make(chan time.Duration, 16)}
	rec := tracetest.NewSpanRecorder()
	cfg := newConfig([]Option{WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))})
	cfg.AfterFunc = timers.afterFunc
	m := newMiddleware(cfg)
	key := callKey{op: opChat}
	_, span := m.tracer.Start(context.Background(), "chat m")
	c := &call{m: m, span: span, op: opChat}
	m.park(key, c, context.Background())
	timers.mu.Lock()
	stale := timers.fns[0]
	timers.mu.Unlock()
	if m.take(key) != c {
		t.Fatal("take did not return the parked call")
	}
	m.park(key, c, context.Background())
	stale()
	if n := len(rec.Ended()); n != 0 {
		t.Fatalf("stale timer ended the call")
	}
	timers.mu.Lock()
	current := timers.fns[1]
	timers.mu.Unlock()
	current()
	if n := len(rec.Ended()); n != 1 {
		t.Fatalf("ended = %d", n)
	}
}
