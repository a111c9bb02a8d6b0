package instrument

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// stubLedger feeds hand-made ended spans straight into a ledger, as the
// SpanProcessor's OnEnd does, for sequences the SDK cannot produce (self
// parents, cycles, reused ids, arbitrary arrival orders).
type stubLedger struct {
	t     *testing.T
	l     *Ledger
	clock *manualClock
}

func newStubLedger(t *testing.T, opts ...SpanProcessorOption) *stubLedger {
	t.Helper()
	clk := newManualClock()
	opts = append([]SpanProcessorOption{withClock(clk), WithRemoteSettle(0)}, opts...)
	return &stubLedger{t: t, l: newLedger(newProcessorConfig(opts), metricnoop.NewMeterProvider().Meter("t")), clock: clk}
}

// feed delivers spans in order; invocation.children is taken from each
// span's attributes, as the SpanProcessor passes it.
func (sl *stubLedger) feed(spans ...tracetest.SpanStub) {
	for _, s := range spans {
		sl.l.arrived(s.Snapshot(), countAbsent)
	}
}

// known reports whether the ledger has state for invocation "inv".
func (sl *stubLedger) known() bool {
	_, ok := sl.l.Summary("inv")
	return ok
}

func (sl *stubLedger) summary(id string) Summary {
	sl.t.Helper()
	s, ok := sl.l.Summary(id)
	if !ok {
		sl.t.Fatalf("ledger does not know invocation %s", id)
	}
	return s
}

// spanCtx is span n of trace tr.
func spanCtx(tr, n byte) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{tr}, SpanID: trace.SpanID{n}, TraceFlags: trace.FlagsSampled,
	})
}

var stubBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// stub is a span of invocation "inv" ending at endMS.
func stub(name string, self, parent trace.SpanContext, endMS int, attrs ...attribute.KeyValue) tracetest.SpanStub {
	return tracetest.SpanStub{
		Name: name, SpanContext: self, Parent: parent,
		StartTime:  stubBase.Add(time.Duration(endMS-1) * time.Millisecond),
		EndTime:    stubBase.Add(time.Duration(endMS) * time.Millisecond),
		Attributes: append([]attribute.KeyValue{attribute.String(contract.AttrInvocationID, "inv")}, attrs...),
	}
}

func rootStub(self trace.SpanContext, children int) tracetest.SpanStub {
	return stub("invoke_agent a", self, trace.SpanContext{}, 100,
		attribute.String(contract.AttrRole, contract.RoleRoot), attribute.Int(contract.AttrChildren, children))
}

func toolStub(self, parent trace.SpanContext, children int) tracetest.SpanStub {
	return stub("execute_tool shell", self, parent, 50,
		attribute.String(contract.AttrOperationName, contract.OpExecuteTool), attribute.Int(contract.AttrChildren, children))
}

func chatStub(self, parent trace.SpanContext, in, out int64) tracetest.SpanStub {
	return stub("chat m", self, parent, 40,
		attribute.String(contract.AttrOperationName, contract.OpChat), attribute.Int(contract.AttrChildren, 0),
		attribute.Int64(contract.AttrUsageInputTokens, in), attribute.Int64(contract.AttrUsageOutputTokens, out))
}

func jobStub(self, parent trace.SpanContext, followups int) tracetest.SpanStub {
	return stub("background shell", self, parent, 150,
		attribute.String(contract.AttrRole, contract.RoleBackground), attribute.Int(contract.AttrChildren, 0),
		attribute.Int(contract.AttrFollowups, followups))
}

func contStub(self trace.SpanContext, children int, links ...sdktrace.Link) tracetest.SpanStub {
	s := stub("continue_agent a", self, trace.SpanContext{}, 300,
		attribute.String(contract.AttrRole, contract.RoleContinuation), attribute.Int(contract.AttrChildren, children))
	s.Links = links
	return s
}

func linkTo(target trace.SpanContext, kind string) sdktrace.Link {
	return sdktrace.Link{SpanContext: target, Attributes: []attribute.KeyValue{attribute.String(contract.AttrLink, kind)}}
}

func withStatus(s tracetest.SpanStub, code codes.Code) tracetest.SpanStub {
	s.Status = sdktrace.Status{Code: code}
	return s
}

// permutations calls f with every order of n items (n small).
func permutations(n int, f func([]int)) {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	var rec func(k int)
	rec = func(k int) {
		if k == n {
			f(append([]int(nil), idx...))
			return
		}
		for i := k; i < n; i++ {
			idx[k], idx[i] = idx[i], idx[k]
			rec(k + 1)
			idx[k], idx[i] = idx[i], idx[k]
		}
	}
	rec(0)
}

func noopMeter() metric.Meter { return metricnoop.NewMeterProvider().Meter("t") }
