package instrument

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// errorRecorder is an otel.ErrorHandler that keeps what it is handed.
type errorRecorder struct {
	mu   sync.Mutex
	errs []error
}

func (r *errorRecorder) Handle(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

func (r *errorRecorder) all() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

// recordErrors installs an errorRecorder as the global handler for the
// test.
func recordErrors(t *testing.T) *errorRecorder {
	t.Helper()
	prev := otel.GetErrorHandler()
	rec := &errorRecorder{}
	otel.SetErrorHandler(rec)
	t.Cleanup(func() { otel.SetErrorHandler(prev) })
	return rec
}

func counterValue(t *testing.T, reader sdkmetric.Reader, name string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
				for _, dp := range sum.DataPoints {
					total += dp.Value
				}
			}
		}
	}
	return total
}

// TestTrackerWithoutSpanProcessorSaysSo (issue 9 item 9): a Tracker whose
// provider records spans that no SpanProcessor sees reports it once to
// otel.Handle and counts every such span.
func TestTrackerWithoutSpanProcessorSaysSo(t *testing.T) {
	errs := recordErrors(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	bare := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tracetest.NewSpanRecorder()))
	defer func() { _ = bare.Shutdown(context.Background()) }()
	tracker := NewTracker(WithTracerProvider(bare), WithMeterProvider(mp))

	ctx, inv := tracker.StartInvocation(context.Background(), "coder", "s1")
	_, job := tracker.StartBackground(ctx, "shell")
	job.EndWithoutFollowup(nil)
	inv.End()

	got := errs.all()
	if len(got) != 1 || !errors.Is(got[0], ErrNoSpanProcessor) {
		t.Errorf("errors handled = %v, want one ErrNoSpanProcessor", got)
	}
	if n := counterValue(t, reader, "agentledger.instrument.tracker.unledgered_spans"); n != 2 {
		t.Errorf("unledgered spans = %d, want 2", n)
	}
}

// TestTrackerWithSpanProcessorIsQuiet: the usual pipeline reports nothing.
func TestTrackerWithSpanProcessorIsQuiet(t *testing.T) {
	errs := recordErrors(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	p := newPipeline(t)
	tracker := NewTracker(WithTracerProvider(p.tp), WithMeterProvider(mp))
	_, inv := tracker.StartInvocation(context.Background(), "coder", "s1")
	inv.End()
	if got := errs.all(); len(got) != 0 {
		t.Errorf("errors handled = %v", got)
	}
	if n := counterValue(t, reader, "agentledger.instrument.tracker.unledgered_spans"); n != 0 {
		t.Errorf("unledgered spans = %d", n)
	}
}
