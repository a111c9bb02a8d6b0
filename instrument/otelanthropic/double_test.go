package otelanthropic_test

import (
	"context"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/otelanthropic"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// TestSDKSpansAndMiddlewareNeverFinal: the Anthropic SDK's own spans on
// the provider that also carries the wrapper's (Middleware alone) make
// two model-call spans of one call; the ledger says so
// (double_instrumented) instead of a final with the usage counted twice.
func TestSDKSpansAndMiddlewareNeverFinal(t *testing.T) {
	srv := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{toolStep}}).Start()
	defer srv.Close()
	exp := tracetest.NewInMemoryExporter()
	sp := instrument.NewSpanProcessor(sdktrace.NewSimpleSpanProcessor(exp))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(prev)

	tracker := instrument.NewTracker(instrument.WithTracerProvider(tp))
	ctx, inv := tracker.StartInvocation(context.Background(), "coder", "s1")
	client := anthropic.NewClient(option.WithBaseURL(srv.URL()), option.WithAPIKey("k"),
		option.WithMiddleware(otelanthropic.Middleware(otelanthropic.WithTracerProvider(tp))))
	if _, err := client.Messages.New(ctx, params("hi")); err != nil {
		t.Fatal(err)
	}
	inv.End()
	if n := len(exp.GetSpans()); n != 3 {
		t.Fatalf("%d spans exported, want root and two model-call spans", n)
	}
	s, ok := sp.Ledger().Summary(inv.ID())
	if !ok {
		t.Fatal("ledger does not know the invocation")
	}
	found := false
	for _, r := range s.Reasons {
		found = found || strings.HasPrefix(r, "double_instrumented:")
	}
	if s.Status == instrument.StatusFinal || !found {
		t.Fatalf("%s %v (usage %+v)", s.Status, s.Reasons, s.Usage)
	}
}
