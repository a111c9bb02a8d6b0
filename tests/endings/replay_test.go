package endings_test

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/internal/testbin"
	"github.com/agentledger/agentledger/processor/invocationprocessor"
)

// verdict is what the collector's processor said of an invocation: the
// last summary it emitted.
type verdict struct {
	status  string
	reasons []string
	usage   usage
}

// replay feeds spans, as exported, to the collector's processor, shuts it
// down (which emits every summary) and returns its verdict on id.
func replay(t *testing.T, spans []sdktrace.ReadOnlySpan, id string) verdict {
	t.Helper()
	f := invocationprocessor.NewFactory()
	sink := new(consumertest.TracesSink)
	p, err := f.CreateTraces(context.Background(), processortest.NewNopSettings(f.Type()), f.CreateDefaultConfig(), sink)
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
	if last == nil || last.Status == "pending" {
		// Not closed on arrival: shutting down emits what it knows.
		if err := p.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		find()
	} else if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if last == nil {
		t.Fatal("the processor emitted no summary")
	}
	reasons := slices.Clone(last.IncompleteReasons)
	return verdict{status: last.Status, reasons: reasons, usage: usage{
		last.InputTokens, last.OutputTokens, last.CacheReadTokens, last.CacheCreationTokens, last.ReasoningTokens}}
}

// toTraces converts exported spans to the collector's pdata, as an OTLP
// exporter would send them: one resource and scope per span.
func toTraces(spans []sdktrace.ReadOnlySpan) ptrace.Traces {
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
		}
		for _, l := range s.Links() {
			pl := span.Links().AppendEmpty()
			pl.SetTraceID(pcommon.TraceID(l.SpanContext.TraceID()))
			pl.SetSpanID(pcommon.SpanID(l.SpanContext.SpanID()))
			putAttrs(pl.Attributes(), l.Attributes)
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
