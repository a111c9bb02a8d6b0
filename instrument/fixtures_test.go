package instrument

import (
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/contract/fixtures"
)

// TestContractFixtures replays every shared contract case
// (internal/contract/fixtures) through the in-process Ledger and checks the
// outcome the collector processor must reach too.
//
// Spans are fed as ended spans into the ledger's arrival hook, as the
// SpanProcessor's OnEnd feeds it, with invocation.children taken from
// the case's attributes. A case's spans cannot all be produced through
// the SDK (self parents, cycles, reused ids, mistyped counts), so the
// hook is the one entry every case can use. What this replay leaves out
// is the span starts the SpanProcessor reports: in process the ledger
// also waits for spans it saw start and not end (rule 6), which a case's
// withheld spans would then be; the replay does not start them, so the
// outcomes are those of the collector, which sees only arrivals. The
// cases the SDK's API can produce also run through a real pipeline
// (TestContractFixturesThroughSDK); the starts the ledger waits for are
// tested in jobs_test.go.
func TestContractFixtures(t *testing.T) {
	cases, err := fixtures.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			clk := newManualClock()
			start := clk.Now()
			l := newLedger(newProcessorConfig([]SpanProcessorOption{
				withClock(clk),
				WithRemoteSettle(c.Config.RemoteSettle()),
				WithOpenTimeout(c.Config.OpenTimeout()),
			}), noopMeter())
			arrivals := c.Arrivals()
			for i, s := range c.Delivered() {
				if d := start.Add(arrivals[i]).Sub(clk.Now()); d > 0 {
					clk.Advance(d)
				}
				stub := fixtureStub(s)
				l.arrived(stub.Snapshot(), countAbsent)
			}
			check := func(when fixtures.When) {
				for _, want := range c.Expect {
					if want.Moment() == when {
						checkOutcome(t, l, want)
					}
				}
			}
			check(fixtures.WhenDelivered)
			clk.Advance(c.Config.RemoteSettle())
			check(fixtures.WhenSettled)
		})
	}
}

func invocationOf(s fixtures.Span) string {
	return s.Attributes[contract.AttrInvocationID].Str()
}

func checkOutcome(t *testing.T, l *Ledger, want fixtures.Outcome) {
	t.Helper()
	got, ok := l.Summary(want.Invocation)
	if !ok {
		t.Fatalf("%s: the ledger does not know invocation %s", want.Moment(), want.Invocation)
	}
	sorted := func(xs []string) []string {
		xs = slices.Clone(xs)
		slices.Sort(xs)
		if xs == nil {
			xs = []string{}
		}
		return xs
	}
	if string(got.Status) != string(want.Status) ||
		!slices.Equal(sorted(got.Reasons), sorted(want.Reasons)) ||
		!slices.Equal(sorted(got.Anomalies), sorted(want.Anomalies)) {
		t.Errorf("%s: %s reasons %v anomalies %v, want %s reasons %v anomalies %v", want.Moment(),
			got.Status, sorted(got.Reasons), sorted(got.Anomalies), want.Status, sorted(want.Reasons), sorted(want.Anomalies))
	}
	if want.Revision != nil && int64(got.Revision) != *want.Revision {
		t.Errorf("%s: revision %d, want %d", want.Moment(), got.Revision, *want.Revision)
	}
	u := got.Usage
	gotUsage := fixtures.Usage{Input: u.InputTokens, Output: u.OutputTokens, CacheRead: u.CacheReadInputTokens,
		CacheCreation: u.CacheCreationInputTokens, Reasoning: u.ReasoningOutputTokens}
	if gotUsage != want.Usage {
		t.Errorf("%s: usage %+v, want %+v", want.Moment(), gotUsage, want.Usage)
	}
	if after := (fixtures.AfterResult{Input: u.AfterResultInputTokens, Output: u.AfterResultOutputTokens}); after != want.AfterResult {
		t.Errorf("%s: after result %+v, want %+v", want.Moment(), after, want.AfterResult)
	}
}

// fixtureStub converts a case's span to an SDK span stub.
func fixtureStub(s fixtures.Span) tracetest.SpanStub {
	sc := func(tid fixtures.TraceID, sid fixtures.SpanID) trace.SpanContext {
		return trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID(tid), SpanID: trace.SpanID(sid), TraceFlags: trace.FlagsSampled})
	}
	stub := tracetest.SpanStub{
		Name:        s.Name,
		SpanContext: sc(s.TraceID, s.SpanID),
		StartTime:   stubBase.Add(time.Duration(s.StartNS)),
		EndTime:     stubBase.Add(time.Duration(s.EndNS)),
		Attributes:  fixtureAttrs(s.Attributes),

		DroppedAttributes: s.DroppedAttributes,
		DroppedLinks:      s.DroppedLinks,
	}
	if !s.Parent.IsZero() {
		// A parent is a span ID; OTLP and the SDK give it the child's trace.
		stub.Parent = sc(s.TraceID, s.Parent)
	}
	switch s.Status {
	case fixtures.StatusOK:
		stub.Status.Code = codes.Ok
	case fixtures.StatusError:
		stub.Status.Code = codes.Error
	}
	for _, l := range s.Links {
		stub.Links = append(stub.Links, sdktrace.Link{SpanContext: sc(l.TraceID, l.SpanID), Attributes: fixtureAttrs(l.Attributes),
			DroppedAttributeCount: l.DroppedAttributes})
	}
	return stub
}

func fixtureAttrs(m map[string]fixtures.Value) []attribute.KeyValue {
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
	out := make([]attribute.KeyValue, 0, len(m))
	for _, k := range keys {
		if v, ok := fixtureValue(m[k]); ok {
			out = append(out, attribute.KeyValue{Key: attribute.Key(k), Value: v})
		}
	}
	return out
}

// fixtureValue converts a typed value; arrays become slices when their
// elements share a type (the only arrays the SDK can hold).
func fixtureValue(v fixtures.Value) (attribute.Value, bool) {
	switch v.Kind() {
	case fixtures.KindStr:
		return attribute.StringValue(v.Str()), true
	case fixtures.KindInt:
		return attribute.Int64Value(v.Int()), true
	case fixtures.KindDouble:
		return attribute.Float64Value(v.Double()), true
	case fixtures.KindBool:
		return attribute.BoolValue(v.Bool()), true
	case fixtures.KindArray:
		var strs []string
		var ints []int64
		for _, e := range v.Array() {
			switch e.Kind() {
			case fixtures.KindStr:
				strs = append(strs, e.Str())
			case fixtures.KindInt:
				ints = append(ints, e.Int())
			default:
				return attribute.Value{}, false
			}
		}
		switch {
		case len(ints) == 0:
			return attribute.StringSliceValue(strs), true
		case len(strs) == 0:
			return attribute.Int64SliceValue(ints), true
		}
	}
	return attribute.Value{}, false
}
