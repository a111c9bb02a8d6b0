package instrument

import (
	"context"
	"sort"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// manualClock is a Clock that moves only when a test advances it.
type manualClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*manualTimer
}

type manualTimer struct {
	c       *manualClock
	when    time.Time
	f       func()
	stopped bool
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{c: c, when: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *manualTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := !t.stopped
	t.stopped = true
	for i, x := range t.c.timers {
		if x == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return was
		}
	}
	return false
}

// Advance moves the clock by d and runs, in order, the timers that are
// due, outside the clock's lock.
func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due, rest []*manualTimer
	for _, t := range c.timers {
		if !t.when.After(c.now) {
			due = append(due, t)
		} else {
			rest = append(rest, t)
		}
	}
	c.timers = rest
	c.mu.Unlock()
	sort.SliceStable(due, func(i, j int) bool { return due[i].when.Before(due[j].when) })
	for _, t := range due {
		t.stopped = true
		t.f()
	}
}

// pipeline is a TracerProvider with a SpanProcessor in front of a
// synchronous in-memory exporter.
type pipeline struct {
	tp      *sdktrace.TracerProvider
	sp      *SpanProcessor
	exp     *tracetest.InMemoryExporter
	clock   *manualClock
	tracker *Tracker
}

func newPipeline(t *testing.T, opts ...sdktrace.TracerProviderOption) *pipeline {
	return newPipelineWith(t, nil, opts...)
}

func newPipelineWith(t *testing.T, iopts []SpanProcessorOption, opts ...sdktrace.TracerProviderOption) *pipeline {
	t.Helper()
	p := &pipeline{exp: tracetest.NewInMemoryExporter(), clock: newManualClock()}
	iopts = append([]SpanProcessorOption{withClock(p.clock)}, iopts...)
	p.sp = NewSpanProcessor(sdktrace.NewSimpleSpanProcessor(p.exp), iopts...)
	p.tp = sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithSpanProcessor(p.sp)}, opts...)...)
	p.tracker = NewTracker(WithTracerProvider(p.tp))
	t.Cleanup(func() { _ = p.tp.Shutdown(context.Background()) })
	return p
}

// span returns the one exported span named name.
func (p *pipeline) span(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range p.exp.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one exported span %q, got %d", name, len(found))
	}
	return found[0]
}

func attrOf(s tracetest.SpanStub, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func intAttr(t *testing.T, s tracetest.SpanStub, key string) int64 {
	t.Helper()
	v, ok := attrOf(s, key)
	if !ok {
		t.Fatalf("span %q has no %s", s.Name, key)
	}
	return v.AsInt64()
}

func strAttr(s tracetest.SpanStub, key string) string {
	v, _ := attrOf(s, key)
	return v.AsString()
}

// attrString returns the first value of key as a string, "" when absent.
func attrString(attrs []attribute.KeyValue, key attribute.Key) string {
	for _, kv := range attrs {
		if kv.Key == key {
			return kv.Value.AsString()
		}
	}
	return ""
}
