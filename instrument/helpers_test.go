package instrument

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/instrument/internal/clock"
)

// manualClock is a Clock that moves only when a test advances it.
type manualClock = clock.Manual

func newManualClock() *manualClock { return clock.NewManual() }

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
