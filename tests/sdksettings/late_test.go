package sdksettings_test

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/tests/internal/otlpreplay"
)

// TestLateDropRevisesFinal: an invocation the collector already closed
// final, with exact totals, loses a model call to the sampler after its
// root ended, from each context no open span counts (a worker's, an ended
// span's, another process's sampled span's). The declaration the
// instrumentation exports reaches the collector as a late member: its
// revision is incomplete with not_sampled:<call name>, and so is the
// in-process ledger; without it the collector's final would stand
// without the call's usage.
func TestLateDropRevisesFinal(t *testing.T) {
	for _, wrap := range []bool{true, false} {
		for _, kind := range []string{"worker", "ended span", "new root from ended span", "remote parent"} {
			name := kind
			if wrap {
				name = "Sampler, " + kind
			}
			t.Run(name, func(t *testing.T) {
				var sampler sdktrace.Sampler = dropNamed("chat late")
				if wrap {
					sampler = instrument.Sampler(sampler)
				}
				mem := tracetest.NewInMemoryExporter()
				sp := instrument.NewSpanProcessor(sdktrace.NewSimpleSpanProcessor(mem), instrument.WithRemoteSettle(0))
				tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp), sdktrace.WithSampler(sampler))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				tracker := instrument.NewTracker(instrument.WithTracerProvider(tp))
				call := func(ctx context.Context, name string, in int64, opts ...trace.SpanStartOption) {
					opts = append(opts, trace.WithSpanKind(trace.SpanKindClient),
						trace.WithAttributes(attribute.String(contract.AttrOperationName, contract.OpChat)))
					_, span := tp.Tracer("example.com/llm").Start(ctx, name, opts...)
					instrument.NoteUnrecorded(ctx, span, name)
					span.SetAttributes(attribute.Int64(contract.AttrUsageInputTokens, in), attribute.Int64(contract.AttrUsageOutputTokens, 7))
					span.End()
				}
				ctx, inv := tracker.StartInvocation(context.Background(), "coder", "session-late")
				call(ctx, "chat 1", 100)
				ectx, tool := tp.Tracer("example.com/agent").Start(ctx, "execute_tool edit")
				tool.End()
				rootSC := trace.SpanContextFromContext(ctx)
				inv.End()

				col := otlpreplay.Start(t)
				col.Feed(t, tracetest.SpanStubs(mem.GetSpans()).Snapshots())
				first, ok := col.Latest(inv.ID())
				if !ok || first.Status != contract.StatusFinal || first.InputTokens != 100 {
					t.Fatalf("before the late call the collector says %+v (found %v), want final with 100 input tokens", first, ok)
				}
				if s, _ := sp.Ledger().Summary(inv.ID()); s.Status != instrument.StatusFinal {
					t.Fatalf("before the late call the ledger says %s %v", s.Status, s.Reasons)
				}
				sent := len(mem.GetSpans())

				wctx, err := instrument.ContextWithInvocation(context.Background(), inv.ID())
				if err != nil {
					t.Fatal(err)
				}
				switch kind {
				case "worker":
					call(wctx, "chat late", 900)
				case "ended span":
					call(ectx, "chat late", 900)
				case "new root from ended span":
					call(ectx, "chat late", 900, trace.WithNewRoot())
				case "remote parent":
					call(trace.ContextWithRemoteSpanContext(wctx, rootSC), "chat late", 900)
				}
				if err := tp.ForceFlush(context.Background()); err != nil {
					t.Fatal(err)
				}
				late := mem.GetSpans()[sent:]
				if len(late) == 0 {
					t.Fatal("nothing was exported for the dropped call: the collector cannot know of it")
				}
				col.Feed(t, tracetest.SpanStubs(late).Snapshots())
				got, _ := col.Latest(inv.ID())
				if got.Status == contract.StatusFinal || got.Revision <= first.Revision ||
					!slices.Contains(got.IncompleteReasons, contract.ReasonNotSampled+":chat late") {
					t.Fatalf("after the late drop the collector says revision %d %s %v, want a later revision, not final, with not_sampled:chat late",
						got.Revision, got.Status, got.IncompleteReasons)
				}
				s, _ := sp.Ledger().Summary(inv.ID())
				if s.Status == instrument.StatusFinal || !slices.Contains(s.Reasons, contract.ReasonNotSampled+":chat late") {
					t.Fatalf("after the late drop the ledger says %s %v", s.Status, s.Reasons)
				}
			})
		}
	}
}
