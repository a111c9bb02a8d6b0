package instrument

import (
	"context"
	"slices"
	"sync"
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

// presetIDs is an IDGenerator that hands out the IDs set before each
// span start, so that a replay through the SDK reproduces a case's IDs.
type presetIDs struct {
	mu    sync.Mutex
	trace trace.TraceID
	span  trace.SpanID
}

func (g *presetIDs) set(tid trace.TraceID, sid trace.SpanID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.trace, g.span = tid, sid
}

func (g *presetIDs) NewIDs(context.Context) (trace.TraceID, trace.SpanID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.trace, g.span
}

func (g *presetIDs) NewSpanID(context.Context, trace.TraceID) trace.SpanID {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.span
}

// sdkProducible says why a case cannot be produced through the SDK's API,
// or "" when it can: each span ends once, a child is started under its
// started parent in the same trace, the SpanProcessor computes
// invocation.children itself (so the case's counts must be the number of
// its children), and every span ends (a withheld span would be a started
// span the in-process ledger waits for, which the collector cannot see).
func sdkProducible(c fixtures.Case) string {
	ids := map[fixtures.SpanID]fixtures.Span{}
	children := map[fixtures.SpanID]int64{}
	for _, s := range c.Spans {
		if _, dup := ids[s.SpanID]; dup {
			return "a span ID is delivered twice or reused"
		}
		ids[s.SpanID] = s
		if !s.Parent.IsZero() {
			children[s.Parent]++
		}
	}
	for _, s := range c.Spans {
		switch {
		case s.Withheld:
			return "a withheld span would be an open span the ledger waits for"
		case s.DroppedAttributes != 0 || s.DroppedLinks != 0 || slices.ContainsFunc(s.Links, func(l fixtures.Link) bool { return l.DroppedAttributes != 0 }):
			return "dropped counts are what the SDK's limits make, not what a replay sets"
		case s.Attributes[contract.AttrLateChild].Bool():
			return "late children and orphan jobs are what the SpanProcessor and Tracker mark, not what a replay sets"
		case !s.Parent.IsZero() && (s.Parent == s.SpanID || ids[s.Parent].TraceID != s.TraceID):
			return "malformed parentage cannot be started through the API"
		}
	}
	for _, s := range c.Spans {
		cur := s
		for steps := 0; !cur.Parent.IsZero(); steps++ {
			if steps > len(c.Spans) {
				return "a parent cycle cannot be started through the API"
			}
			cur = ids[cur.Parent]
		}
		if v, ok := s.Attributes[contract.AttrChildren]; !ok || v.Kind() != fixtures.KindInt || v.Int() != children[s.SpanID] {
			return "the case declares a count the SpanProcessor would not compute"
		}
	}
	for i, s := range c.Spans {
		if s.Attributes[contract.AttrFollowupReason].Str() != contract.ReasonAbandoned {
			continue
		}
		for _, later := range c.Spans[i+1:] {
			if later.StartNS > s.EndNS {
				return "a span starts after an abandoned followup closed the invocation, and the replay starts every span first"
			}
		}
	}
	return ""
}

// TestContractFixturesThroughSDK replays the cases the SDK's API can
// produce through a real pipeline (Tracker-less spans with the case's IDs,
// times, attributes and links, a SpanProcessor in front of an in-memory
// exporter): the SpanProcessor must export the case's invocation.children
// and the Ledger reach the case's outcome. The other cases say why they
// cannot run this way.
func TestContractFixturesThroughSDK(t *testing.T) {
	cases, err := fixtures.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			if why := sdkProducible(c); why != "" {
				t.Skip(why)
			}
			clk := newManualClock()
			start := clk.Now()
			exp := tracetest.NewInMemoryExporter()
			sp := NewSpanProcessor(sdktrace.NewSimpleSpanProcessor(exp), withClock(clk),
				WithRemoteSettle(c.Config.RemoteSettle()), WithOpenTimeout(c.Config.OpenTimeout()))
			ids := &presetIDs{}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp), sdktrace.WithIDGenerator(ids))
			defer func() { _ = tp.Shutdown(context.Background()) }()
			tracer := tp.Tracer("fixture")

			// Start every span, parents first, in start order; end them in
			// delivery order.
			started := map[fixtures.SpanID]trace.Span{}
			ctxs := map[fixtures.SpanID]context.Context{}
			for len(started) < len(c.Spans) {
				for _, s := range c.Spans {
					if _, ok := started[s.SpanID]; ok {
						continue
					}
					ctx := context.Background()
					if !s.Parent.IsZero() {
						pctx, ok := ctxs[s.Parent]
						if !ok {
							continue
						}
						ctx = pctx
					}
					ctx, err := ContextWithInvocation(ctx, invocationOf(s))
					if err != nil {
						t.Fatal(err)
					}
					stub := fixtureStub(s)
					attrs := make([]attribute.KeyValue, 0, len(stub.Attributes))
					for _, kv := range stub.Attributes {
						if kv.Key != contract.AttrChildren {
							attrs = append(attrs, kv)
						}
					}
					ids.set(stub.SpanContext.TraceID(), stub.SpanContext.SpanID())
					opts := []trace.SpanStartOption{trace.WithTimestamp(stub.StartTime), trace.WithAttributes(attrs...)}
					for _, l := range stub.Links {
						opts = append(opts, trace.WithLinks(trace.Link{SpanContext: l.SpanContext, Attributes: l.Attributes}))
					}
					sctx, span := tracer.Start(ctx, s.Name, opts...)
					started[s.SpanID], ctxs[s.SpanID] = span, sctx
				}
			}
			arrivals := c.Arrivals()
			for i, s := range c.Delivered() {
				if d := start.Add(arrivals[i]).Sub(clk.Now()); d > 0 {
					clk.Advance(d)
				}
				span := started[s.SpanID]
				switch s.Status {
				case fixtures.StatusOK:
					span.SetStatus(codes.Ok, "")
				case fixtures.StatusError:
					span.SetStatus(codes.Error, "failed")
				}
				span.End(trace.WithTimestamp(start.Add(time.Duration(s.EndNS))))
			}
			for _, got := range exp.GetSpans() {
				for _, s := range c.Spans {
					if trace.SpanID(s.SpanID) == got.SpanContext.SpanID() {
						if want := s.Attributes[contract.AttrChildren].Int(); intAttr(t, got, contract.AttrChildren) != want {
							t.Errorf("%s: exported invocation.children %d, the case declares %d", s.Name, intAttr(t, got, contract.AttrChildren), want)
						}
					}
				}
			}
			check := func(when fixtures.When) {
				for _, want := range c.Expect {
					if want.Moment() == when {
						checkOutcome(t, sp.Ledger(), want)
					}
				}
			}
			check(fixtures.WhenDelivered)
			clk.Advance(c.Config.RemoteSettle())
			check(fixtures.WhenSettled)
		})
	}
}
