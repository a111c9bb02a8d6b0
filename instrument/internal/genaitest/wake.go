package genaitest

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
)

// WakeExporter is a SpanExporter that sends the invocation id of each
// wake span it exports on Wakes, with the time of the export.
type WakeExporter struct {
	Wakes chan Export
}

// Export is one wake span's export.
type Export struct {
	Invocation string
	At         time.Time
}

// ExportSpans implements sdktrace.SpanExporter.
func (e *WakeExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	now := time.Now()
	for _, s := range spans {
		var role, inv string
		for _, a := range s.Attributes() {
			switch a.Key {
			case contract.AttrRole:
				role = a.Value.AsString()
			case contract.AttrInvocationID:
				inv = a.Value.AsString()
			}
		}
		if role == contract.RoleWake {
			select {
			case e.Wakes <- Export{inv, now}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// Shutdown implements sdktrace.SpanExporter.
func (*WakeExporter) Shutdown(context.Context) error { return nil }

// WakeProvider returns a provider with the ledger's SpanProcessor over a
// batch processor whose schedule is an hour away, exporting to a
// WakeExporter: a wake span that reaches it was flushed.
func WakeProvider(t testing.TB) (*sdktrace.TracerProvider, *WakeExporter) {
	t.Helper()
	exp := &WakeExporter{Wakes: make(chan Export, 64)}
	bsp := sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithBatchTimeout(time.Hour))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(instrument.NewSpanProcessor(bsp)))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

// WaitWake waits for the next wake span's export, at most 30s (the
// schedule is an hour), and returns it.
func (e *WakeExporter) WaitWake(t testing.TB) Export {
	t.Helper()
	select {
	case x := <-e.Wakes:
		return x
	case <-time.After(30 * time.Second):
		t.Fatal("no wake span exported within 30s: it waits for the exporter's schedule")
		return Export{}
	}
}
