package otelanthropic_test

import (
	"context"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/otelanthropic"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// TestMiddlewareUsesProviderOfContextSpan (issue 9 item 9): client options
// built without WithTracerProvider, called inside an invocation started
// from a provider other than the global one, record the model call with
// the provider of the span in the request's context (as otelhttp does).
func TestMiddlewareUsesProviderOfContextSpan(t *testing.T) {
	srv := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{toolStep}}).Start()
	defer srv.Close()
	sp := instrument.NewSpanProcessor(nil)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracker := instrument.NewTracker(instrument.WithTracerProvider(tp))
	client := anthropic.NewClient(append(otelanthropic.ClientOptions(),
		option.WithBaseURL(srv.URL()), option.WithAPIKey("test"), option.WithMaxRetries(0))...)

	ctx, inv := tracker.StartInvocation(context.Background(), "coder", "s1")
	if _, err := client.Messages.New(ctx, params("hi")); err != nil {
		t.Fatal(err)
	}
	inv.End()
	s, _ := sp.Ledger().Summary(inv.ID())
	if s.Status != contract.StatusFinal || s.Usage.ModelCalls != 1 || s.Usage.InputTokens != 100 || s.Usage.OutputTokens != 40 {
		t.Errorf("summary %+v, want final with the call's 100/40 tokens", s)
	}
}
