package flush

import (
	"context"
	"errors"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"
)

// blockingExporter records the spans it is given and holds each export
// until release is closed (or the export's context ends).
type blockingExporter struct {
	tracetest.InMemoryExporter
	release chan struct{}
}

func (e *blockingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	select {
	case <-e.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return e.InMemoryExporter.ExportSpans(ctx, spans)
}

func TestFlushExportsEndedSpansBeforeReturning(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	// A schedule far away: only the flush can export.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Hour)))
	defer tp.Shutdown(context.Background())
	_, span := tp.Tracer("t").Start(context.Background(), "root")
	span.End()
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("exported %d spans before the flush", n)
	}
	f := New(tp, 0)
	if !f.Enabled() {
		t.Fatal("not enabled for the SDK's provider")
	}
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 1 {
		t.Fatalf("exported %d spans after the flush, want 1", n)
	}
}

func TestFlushIsBoundedByItsTimeout(t *testing.T) {
	exp := &blockingExporter{release: make(chan struct{})}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Hour)))
	defer func() {
		close(exp.release)
		_ = tp.Shutdown(context.Background())
	}()
	_, span := tp.Tracer("t").Start(context.Background(), "root")
	span.End()
	err := New(tp, 20*time.Millisecond).Flush()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Flush of a stuck exporter = %v, want the deadline", err)
	}
}

func TestFlushOff(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(time.Hour)))
	defer tp.Shutdown(context.Background())
	_, span := tp.Tracer("t").Start(context.Background(), "root")
	span.End()
	for name, f := range map[string]Flusher{"negative timeout": New(tp, -1), "no-op provider": New(noop.NewTracerProvider(), 0), "zero value": {}} {
		if f.Enabled() {
			t.Errorf("%s: enabled", name)
		}
		if err := f.Flush(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("exported %d spans with flushing off", n)
	}
}

// recordingProvider is a TracerProvider whose ForceFlush notes its
// context.
type recordingProvider struct {
	noop.TracerProvider
	ctx context.Context
}

func (p *recordingProvider) ForceFlush(ctx context.Context) error {
	p.ctx = ctx
	return nil
}

// TestFlushKeepsParkedCalls: a flush before a result asks the instrument
// SpanProcessor not to end the model calls held for a retry.
func TestFlushKeepsParkedCalls(t *testing.T) {
	p := &recordingProvider{}
	if err := New(p, 0).Flush(); err != nil {
		t.Fatal(err)
	}
	if p.ctx == nil || !KeepsParked(p.ctx) {
		t.Fatal("the flush's context does not keep parked calls")
	}
	if KeepsParked(context.Background()) {
		t.Fatal("any context keeps parked calls")
	}
}

// stepProvider is a TracerProvider whose ForceFlush tells started and
// waits for release.
type stepProvider struct {
	noop.TracerProvider
	started chan struct{}
	release chan struct{}
}

func (p *stepProvider) ForceFlush(context.Context) error {
	p.started <- struct{}{}
	<-p.release
	return nil
}

// TestBackgroundCoalesces: Kick returns while a flush runs; the asks made
// meanwhile make one flush more, not one each.
func TestBackgroundCoalesces(t *testing.T) {
	p := &stepProvider{started: make(chan struct{}), release: make(chan struct{})}
	b := NewBackground(New(p, time.Minute))
	done := make(chan error, 4)
	b.done = func(err error) { done <- err }
	b.Kick()
	<-p.started // the first flush runs, held
	b.Kick()
	b.Kick()
	p.release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-p.started // one more for the two asks
	p.release <- struct{}{}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	running, again := b.running, b.again
	b.mu.Unlock()
	if running || again {
		t.Fatalf("after the coalesced flush: running %v, again %v; want idle", running, again)
	}
	select {
	case <-p.started:
		t.Fatal("a third flush for asks a flush covered")
	default:
	}
	var off *Background = NewBackground(New(p, -1))
	if off != nil {
		t.Fatal("a Background for a Flusher that flushes nothing")
	}
	off.Kick() // nil: nothing
}
