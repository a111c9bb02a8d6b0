package sdksettings_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/internal/testbin"
	"github.com/agentledger/agentledger/processor/invocationprocessor"
)

// collectorSays feeds the exported spans, as OTLP carries them (dropped
// counts included), to the collector's processor and returns its last
// summary of id (after a shutdown when it was still pending).
func collectorSays(t *testing.T, spans []tracetest.SpanStub, id string) testbin.Summary {
	t.Helper()
	f := invocationprocessor.NewFactory()
	cfg := f.CreateDefaultConfig()
	sink := new(consumertest.TracesSink)
	p, err := f.CreateTraces(context.Background(), processortest.NewNopSettings(f.Type()), cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		t.Fatal(err)
	}
	if err := p.ConsumeTraces(context.Background(), toTraces(spans)); err != nil {
		t.Fatal(err)
	}
	var last *testbin.Summary
	find := func() {
		for _, td := range sink.AllTraces() {
			for _, s := range testbin.SummariesFromTraces(td) {
				if s.InvocationID == id && (last == nil || s.Revision >= last.Revision) {
					last = &s
				}
			}
		}
	}
	find()
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if last == nil || last.Status == "pending" {
		find()
	}
	if last == nil {
		t.Fatal("the processor emitted no summary")
	}
	return *last
}

// toTraces converts exported spans to pdata as an OTLP exporter sends
// them, with the SDK's dropped counts.
func toTraces(spans []tracetest.SpanStub) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "agent")
	ss := rs.ScopeSpans().AppendEmpty()
	for _, s := range spans {
		span := ss.Spans().AppendEmpty()
		span.SetTraceID(pcommon.TraceID(s.SpanContext.TraceID()))
		span.SetSpanID(pcommon.SpanID(s.SpanContext.SpanID()))
		if s.Parent.IsValid() {
			span.SetParentSpanID(pcommon.SpanID(s.Parent.SpanID()))
		}
		span.SetName(s.Name)
		span.SetStartTimestamp(pcommon.NewTimestampFromTime(s.StartTime))
		span.SetEndTimestamp(pcommon.NewTimestampFromTime(s.EndTime))
		putAttrs(span.Attributes(), s.Attributes)
		span.SetDroppedAttributesCount(uint32(s.DroppedAttributes))
		span.SetDroppedLinksCount(uint32(s.DroppedLinks))
		if s.Status.Code == codes.Error {
			span.Status().SetCode(ptrace.StatusCodeError)
		}
		for _, l := range s.Links {
			pl := span.Links().AppendEmpty()
			pl.SetTraceID(pcommon.TraceID(l.SpanContext.TraceID()))
			pl.SetSpanID(pcommon.SpanID(l.SpanContext.SpanID()))
			putAttrs(pl.Attributes(), l.Attributes)
			pl.SetDroppedAttributesCount(uint32(l.DroppedAttributeCount))
		}
	}
	return td
}

// putAttrs copies the scalar attributes (the rule reads no other kind).
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
		}
	}
}

var _ sdktrace.ReadOnlySpan = tracetest.SpanStub{}.Snapshot()
