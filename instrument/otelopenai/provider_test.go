package otelopenai_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/instrument/otelopenai"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// TestMiddlewareUsesProviderOfContextSpan (issue 9 item 9): a Middleware
// built without WithTracerProvider, called inside an invocation started
// from a provider other than the global one, records the model call with
// the provider of the span in the request's context (as otelhttp does), so
// the call reaches that provider's ledger.
func TestMiddlewareUsesProviderOfContextSpan(t *testing.T) {
	srv := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{{Text: "done", Usage: fullUsage}}}).Start()
	defer srv.Close()
	sp := instrument.NewSpanProcessor(nil)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracker := instrument.NewTracker(instrument.WithTracerProvider(tp))
	client := openai.NewClient(option.WithBaseURL(srv.OpenAIBaseURL()), option.WithAPIKey("test"), option.WithMaxRetries(0),
		option.WithMiddleware(otelopenai.Middleware()))

	ctx, inv := tracker.StartInvocation(context.Background(), "coder", "s1")
	if _, err := client.Chat.Completions.New(ctx, params("hi")); err != nil {
		t.Fatal(err)
	}
	inv.End()
	s, _ := sp.Ledger().Summary(inv.ID())
	if s.Status != contract.StatusFinal || s.Usage.ModelCalls != 1 || s.Usage.InputTokens != 100 || s.Usage.OutputTokens != 40 {
		t.Errorf("summary %+v, want final with the call's 100/40 tokens", s)
	}
}

// TestParkedCallExportedAtShutdown (issue 9 item 12): a call whose attempt
// failed in a way the SDK retries is held open for the retry window; when
// the process shuts its provider down within the window, the call's span
// is still exported (ended at its failed attempt), by the
// instrument.SpanProcessor the user's pipeline already has.
func TestParkedCallExportedAtShutdown(t *testing.T) {
	for _, flush := range []string{"Shutdown", "ForceFlush"} {
		t.Run(flush, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			sp := instrument.NewSpanProcessor(rec)
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
			defer func() { _ = tp.Shutdown(context.Background()) }()
			tracker := instrument.NewTracker(instrument.WithTracerProvider(tp))
			client := openai.NewClient(option.WithBaseURL(genaitest.ClosedURL(t)), option.WithAPIKey("k"), option.WithMaxRetries(0),
				option.WithMiddleware(otelopenai.Middleware(otelopenai.WithTracerProvider(tp))))

			ctx, inv := tracker.StartInvocation(context.Background(), "coder", "s1")
			if _, err := client.Chat.Completions.New(ctx, params("hi")); err == nil {
				t.Fatal("want a connection error")
			}
			inv.End()
			if n := len(rec.Ended()); n != 1 {
				t.Fatalf("exported %d spans before the flush, want the root only", n)
			}
			var err error
			if flush == "Shutdown" {
				err = tp.Shutdown(context.Background())
			} else {
				err = tp.ForceFlush(context.Background())
			}
			if err != nil {
				t.Fatal(err)
			}
			var found bool
			for _, s := range rec.Ended() {
				if s.Name() == "chat gpt-test" {
					found = s.Status().Code == codes.Error
				}
			}
			if !found {
				t.Fatalf("the parked call was not exported with an error status: %d spans", len(rec.Ended()))
			}
			if flush == "ForceFlush" {
				if s, _ := sp.Ledger().Summary(inv.ID()); s.Status != contract.StatusFinal || s.Usage.ModelCalls != 1 {
					t.Errorf("summary %+v, want final with the failed call", s)
				}
			}
		})
	}
}

// dropSecondCall is a sampler that decides per span (not by the parent):
// it drops the second span named "chat gpt-test" and samples the rest.
type dropSecondCall struct{ calls atomic.Int32 }

func (d *dropSecondCall) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	res := sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
	if p.Name == "chat gpt-test" && d.calls.Add(1) == 2 {
		res.Decision = sdktrace.Drop
	}
	return res
}

func (d *dropSecondCall) Description() string { return "dropSecondCall" }

// TestDroppedCallIsDeclared (contract v0.6 rule 3): with a sampler that
// decides per span and is not wrapped in instrument.Sampler, the second
// of two model calls is dropped; the wrapper reports it, so the ledger
// says incomplete (not_sampled), never final with half the usage, and the
// root declares it in invocation.unrecorded.
func TestDroppedCallIsDeclared(t *testing.T) {
	srv := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{
		{Text: "one", Usage: fullUsage}, {Text: "two", Usage: fullUsage}}}).Start()
	defer srv.Close()
	rec := tracetest.NewSpanRecorder()
	sp := instrument.NewSpanProcessor(rec)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp), sdktrace.WithSampler(&dropSecondCall{}))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracker := instrument.NewTracker(instrument.WithTracerProvider(tp))
	client := openai.NewClient(option.WithBaseURL(srv.OpenAIBaseURL()), option.WithAPIKey("test"), option.WithMaxRetries(0),
		option.WithMiddleware(otelopenai.Middleware(otelopenai.WithTracerProvider(tp))))

	ctx, inv := tracker.StartInvocation(context.Background(), "coder", "s1")
	for _, text := range []string{"one", "two"} {
		if _, err := client.Chat.Completions.New(ctx, params(text)); err != nil {
			t.Fatal(err)
		}
	}
	inv.End()
	s, err := sp.Ledger().Wait(context.Background(), inv.ID())
	if err != nil {
		t.Fatal(err)
	}
	if s.Status != contract.StatusIncomplete || !slices.Contains(s.Reasons, "not_sampled:chat gpt-test") ||
		!slices.Contains(s.Reasons, "not_sampled:invoke_agent coder") {
		t.Errorf("summary %+v, want incomplete with not_sampled for the call and the root", s)
	}
	for _, ro := range rec.Ended() {
		if ro.Name() != "invoke_agent coder" {
			continue
		}
		var n int64 = -1
		for _, kv := range ro.Attributes() {
			if kv.Key == contract.AttrUnrecorded {
				n = kv.Value.AsInt64()
			}
		}
		if n != 1 {
			t.Errorf("root invocation.unrecorded = %d, want 1", n)
		}
	}
}
