// Package genaitest holds the test helpers that the GenAI client wrappers
// (otelopenai, otelanthropic) and their shared core use, so that their
// tests read the same spans the same way; the other adapters use
// WantRegistered.
package genaitest

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/agentledger/agentledger/instrument/internal/genaireg"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// UsageKeys are the usage attributes of a model-call span.
var UsageKeys = []string{
	"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
	"gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.reasoning.output_tokens",
	"gen_ai.usage.cache_creation.input_tokens",
}

// WantRegistered fails t for each attribute of s in the gen_ai namespace
// that is not in the GenAI registry (genaireg.WantRegistered).
func WantRegistered(t testing.TB, s sdktrace.ReadOnlySpan) {
	t.Helper()
	genaireg.WantRegistered(t, s)
}

// Attrs returns the attributes of s by key.
func Attrs(s sdktrace.ReadOnlySpan) map[string]attribute.Value {
	m := map[string]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

// WantInt fails t unless a holds key with the integer want.
func WantInt(t testing.TB, a map[string]attribute.Value, key string, want int64) {
	t.Helper()
	v, ok := a[key]
	if !ok || v.AsInt64() != want {
		t.Errorf("%s = %v (present %v), want %d", key, v.Emit(), ok, want)
	}
}

// WantStr fails t unless a holds key and it prints as want.
func WantStr(t testing.TB, a map[string]attribute.Value, key, want string) {
	t.Helper()
	if v, ok := a[key]; !ok || v.Emit() != want {
		t.Errorf("%s = %q (present %v), want %q", key, v.Emit(), ok, want)
	}
}

// WantAbsent fails t for each of keys that a holds.
func WantAbsent(t testing.TB, a map[string]attribute.Value, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if v, ok := a[k]; ok {
			t.Errorf("%s = %v, want absent", k, v.Emit())
		}
	}
}

// Only returns the one span rec saw, failing t unless exactly one was
// started and ended and its gen_ai attributes are the registry's
// (WantRegistered).
func Only(t testing.TB, rec *tracetest.SpanRecorder) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("ended spans = %d, want 1", len(spans))
	}
	if n := len(rec.Started()); n != 1 {
		t.Fatalf("started spans = %d, want 1", n)
	}
	WantRegistered(t, spans[0])
	return spans[0]
}

// Discard is a span processor that drops ended spans: a benchmark then
// measures the wrapper, not an exporter.
type Discard struct{}

// OnStart does nothing.
func (Discard) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd drops s.
func (Discard) OnEnd(sdktrace.ReadOnlySpan) {}

// Shutdown does nothing.
func (Discard) Shutdown(context.Context) error { return nil }

// ForceFlush does nothing.
func (Discard) ForceFlush(context.Context) error { return nil }

// VerifyTestMain runs m and fails it when a test left a goroutine behind:
// a parked call's timers and context watchers must all be stopped or
// fired. Idle keep-alive connections of the SDK clients' shared transport
// are not the wrappers' and are ignored.
func VerifyTestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

// FakeTimers records the functions a middleware schedules instead of
// scheduling them; a test fires them when it chooses.
type FakeTimers struct {
	// Added receives each scheduled delay when it has room.
	Added chan time.Duration

	// mu guards fns.
	mu  sync.Mutex
	fns []func()
}

// NewFakeTimers returns FakeTimers whose Added holds up to 16 delays.
func NewFakeTimers() *FakeTimers {
	return &FakeTimers{Added: make(chan time.Duration, 16)}
}

type fakeTimer struct{}

func (fakeTimer) Stop() bool { return true }

// AfterFunc records fn; the timer it returns does nothing when stopped.
func (f *FakeTimers) AfterFunc(d time.Duration, fn func()) interface{ Stop() bool } {
	f.mu.Lock()
	f.fns = append(f.fns, fn)
	f.mu.Unlock()
	select {
	case f.Added <- d:
	default:
	}
	return fakeTimer{}
}

// Scheduled returns the i-th function scheduled so far.
func (f *FakeTimers) Scheduled(i int) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fns[i]
}

// FireAll runs and forgets every function scheduled so far.
func (f *FakeTimers) FireAll() {
	f.mu.Lock()
	fns := f.fns
	f.fns = nil
	f.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// ClosedURL returns a loopback base URL nothing listens on.
func ClosedURL(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	return "http://" + addr + "/v1/"
}

// Find returns the span named name among spans, or nil.
func Find(spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	var found sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			found = s
		}
	}
	return found
}

// Stream is the part of an SDK's server-sent-event stream a test reads.
type Stream interface {
	Next() bool
	Err() error
	Close() error
}

// Drain reads st to its end, closes it and returns its error.
func Drain(st Stream) error {
	for st.Next() {
	}
	err := st.Err()
	_ = st.Close()
	return err
}

// BenchServer starts a scripted model that answers every request like a
// real agent turn: a paragraph of text in small deltas, the tool call
// toolID/toolName with args, and cached input.
func BenchServer(toolID, toolName, args string) *scriptedmodel.Server {
	return scriptedmodel.New(scriptedmodel.Options{Responder: func(scriptedmodel.Request) scriptedmodel.Step {
		return scriptedmodel.Step{
			Text:      "The answer is a paragraph of moderate length, streamed in small deltas like a real model does.",
			ToolCalls: []scriptedmodel.ToolCall{{ID: toolID, Name: toolName, Arguments: args}},
			Usage:     scriptedmodel.Usage{InputTokens: 1200, OutputTokens: 80, CacheReadTokens: 1000},
		}
	}}).Start()
}

// BenchTracerProvider returns a TracerProvider that drops every span.
func BenchTracerProvider() *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(Discard{}))
}

// BenchCall is one call a benchmark makes with a client of type C.
type BenchCall[C any] struct {
	// Name names the sub-benchmark, such as "api=chat/call=plain".
	Name string
	// Call makes the call and reads its answer to the end.
	Call func(ctx context.Context, client C) error
}

// BenchModes runs, for each of calls, the sub-benchmarks "mode=unwrapped"
// with newClient(false), the SDK alone, and "mode=wrapped" with
// newClient(true), the SDK with the wrapper, so that benchstat -col /mode
// compares them. Both clients are made before any call.
func BenchModes[C any](b *testing.B, newClient func(wrapped bool) C, calls []BenchCall[C]) {
	b.Helper()
	modes := []struct {
		name   string
		client C
	}{{"unwrapped", newClient(false)}, {"wrapped", newClient(true)}}
	ctx := context.Background()
	for _, tc := range calls {
		b.Run(tc.Name, func(b *testing.B) {
			for _, mode := range modes {
				b.Run("mode="+mode.name, func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if err := tc.Call(ctx, mode.client); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}

// WantCut checks the span of a call whose streamed response began and
// broke off: what was billed is unknown, so it carries no usage and no
// error status (the invocation closes incomplete, usage_missing, never
// final), is marked closed early, and holds the stream error as its one
// exception event.
func WantCut(t testing.TB, s sdktrace.ReadOnlySpan) {
	t.Helper()
	a := Attrs(s)
	WantAbsent(t, a, append([]string{"error.type"}, UsageKeys...)...)
	WantStr(t, a, "invocation.response.stream_closed_early", "true")
	if s.Status().Code != codes.Unset {
		t.Errorf("status = %v, want unset", s.Status())
	}
	exceptions := 0
	for _, ev := range s.Events() {
		if ev.Name == "exception" {
			exceptions++
		}
	}
	if exceptions != 1 {
		t.Errorf("events %v, want one exception: the stream error", s.Events())
	}
}
