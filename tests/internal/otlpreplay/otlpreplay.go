// Package otlpreplay hands spans the OpenTelemetry SDK exported to the
// collector's invocation processor, as an OTLP exporter would send them,
// so that a test can compare what the in-process ledger said with what
// the collector computes from the same spans.
package otlpreplay

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/internal/testbin"
	"github.com/agentledger/agentledger/processor/invocationprocessor"
)

// Collector is a running invocation processor with the default
// configuration whose summaries a test reads; spans are fed batch by
// batch.
type Collector struct {
	p    processor.Traces
	sink *consumertest.TracesSink
	done bool
}

// Start starts a Collector; it is shut down at the end of the test unless
// Shutdown was called.
func Start(tb testing.TB) *Collector {
	tb.Helper()
	f := invocationprocessor.NewFactory()
	sink := new(consumertest.TracesSink)
	p, err := f.CreateTraces(context.Background(), processortest.NewNopSettings(f.Type()), f.CreateDefaultConfig(), sink)
	if err != nil {
		tb.Fatal(err)
	}
	if err := p.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		tb.Fatal(err)
	}
	c := &Collector{p: p, sink: sink}
	tb.Cleanup(func() {
		if !c.done {
			_ = p.Shutdown(context.Background())
		}
	})
	return c
}

// Feed hands spans to the processor as one OTLP request.
func (c *Collector) Feed(tb testing.TB, spans []sdktrace.ReadOnlySpan) {
	tb.Helper()
	if err := c.p.ConsumeTraces(context.Background(), Traces(spans)); err != nil {
		tb.Fatal(err)
	}
}

// Shutdown shuts the processor down, which emits a summary of every
// invocation still open.
func (c *Collector) Shutdown(tb testing.TB) {
	tb.Helper()
	c.done = true
	if err := c.p.Shutdown(context.Background()); err != nil {
		tb.Fatal(err)
	}
}

// Latest returns the latest summary of invocation id emitted so far.
func (c *Collector) Latest(id string) (testbin.Summary, bool) {
	var last testbin.Summary
	found := false
	for _, td := range c.sink.AllTraces() {
		for _, s := range testbin.SummariesFromTraces(td) {
			if s.InvocationID == id && (!found || s.Revision >= last.Revision) {
				last, found = s, true
			}
		}
	}
	return last, found
}

// Last feeds spans to a new Collector, shuts it down and returns the last
// summary it emitted of invocation id.
func Last(tb testing.TB, spans []sdktrace.ReadOnlySpan, id string) testbin.Summary {
	tb.Helper()
	c := Start(tb)
	c.Feed(tb, spans)
	c.Shutdown(tb)
	s, ok := c.Latest(id)
	if !ok {
		tb.Fatalf("the processor emitted no summary of %s", id)
	}
	return s
}

// Traces converts exported spans to the collector's pdata as an OTLP
// exporter sends them: one resource and scope per span, with the SDK's
// dropped counts, status, events and links.
func Traces(spans []sdktrace.ReadOnlySpan) ptrace.Traces {
	td := ptrace.NewTraces()
	for _, s := range spans {
		rs := td.ResourceSpans().AppendEmpty()
		if r := s.Resource(); r != nil {
			putAttrs(rs.Resource().Attributes(), r.Attributes())
		}
		ss := rs.ScopeSpans().AppendEmpty()
		ss.Scope().SetName(s.InstrumentationScope().Name)
		ss.Scope().SetVersion(s.InstrumentationScope().Version)
		span := ss.Spans().AppendEmpty()
		sc := s.SpanContext()
		span.SetTraceID(pcommon.TraceID(sc.TraceID()))
		span.SetSpanID(pcommon.SpanID(sc.SpanID()))
		if p := s.Parent(); p.IsValid() {
			span.SetParentSpanID(pcommon.SpanID(p.SpanID()))
		}
		span.SetName(s.Name())
		span.SetKind(kindOf(s.SpanKind()))
		span.SetStartTimestamp(pcommon.NewTimestampFromTime(s.StartTime()))
		span.SetEndTimestamp(pcommon.NewTimestampFromTime(s.EndTime()))
		putAttrs(span.Attributes(), s.Attributes())
		span.SetDroppedAttributesCount(uint32(s.DroppedAttributes()))
		span.SetDroppedLinksCount(uint32(s.DroppedLinks()))
		span.SetDroppedEventsCount(uint32(s.DroppedEvents()))
		switch s.Status().Code {
		case codes.Error:
			span.Status().SetCode(ptrace.StatusCodeError)
			span.Status().SetMessage(s.Status().Description)
		case codes.Ok:
			span.Status().SetCode(ptrace.StatusCodeOk)
		}
		for _, ev := range s.Events() {
			e := span.Events().AppendEmpty()
			e.SetName(ev.Name)
			e.SetTimestamp(pcommon.NewTimestampFromTime(ev.Time))
			putAttrs(e.Attributes(), ev.Attributes)
			e.SetDroppedAttributesCount(uint32(ev.DroppedAttributeCount))
		}
		for _, l := range s.Links() {
			pl := span.Links().AppendEmpty()
			pl.SetTraceID(pcommon.TraceID(l.SpanContext.TraceID()))
			pl.SetSpanID(pcommon.SpanID(l.SpanContext.SpanID()))
			putAttrs(pl.Attributes(), l.Attributes)
			pl.SetDroppedAttributesCount(uint32(l.DroppedAttributeCount))
		}
	}
	return td
}

func kindOf(k trace.SpanKind) ptrace.SpanKind {
	switch k {
	case trace.SpanKindClient:
		return ptrace.SpanKindClient
	case trace.SpanKindServer:
		return ptrace.SpanKindServer
	case trace.SpanKindProducer:
		return ptrace.SpanKindProducer
	case trace.SpanKindConsumer:
		return ptrace.SpanKindConsumer
	}
	return ptrace.SpanKindInternal
}

// putAttrs copies attributes of every kind the SDK has.
func putAttrs(m pcommon.Map, kvs []attribute.KeyValue) {
	for _, kv := range kvs {
		k := string(kv.Key)
		switch kv.Value.Type() {
		case attribute.BOOL:
			m.PutBool(k, kv.Value.AsBool())
		case attribute.INT64:
			m.PutInt(k, kv.Value.AsInt64())
		case attribute.FLOAT64:
			m.PutDouble(k, kv.Value.AsFloat64())
		case attribute.STRING:
			m.PutStr(k, kv.Value.AsString())
		case attribute.STRINGSLICE:
			sl := m.PutEmptySlice(k)
			for _, v := range kv.Value.AsStringSlice() {
				sl.AppendEmpty().SetStr(v)
			}
		case attribute.INT64SLICE:
			sl := m.PutEmptySlice(k)
			for _, v := range kv.Value.AsInt64Slice() {
				sl.AppendEmpty().SetInt(v)
			}
		case attribute.BOOLSLICE:
			sl := m.PutEmptySlice(k)
			for _, v := range kv.Value.AsBoolSlice() {
				sl.AppendEmpty().SetBool(v)
			}
		case attribute.FLOAT64SLICE:
			sl := m.PutEmptySlice(k)
			for _, v := range kv.Value.AsFloat64Slice() {
				sl.AppendEmpty().SetDouble(v)
			}
		}
	}
}
