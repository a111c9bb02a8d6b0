// Package endings_test is the property test of CONTRACT.md's "How a model
// call ended": every API the wrappers trace, streamed or not, through the
// real openai-go and anthropic-sdk-go clients, against a local server that
// serves random usage, ending in each way the table names. The in-process
// ledger's answer is checked against what the server served, and against
// the collector's processor fed the same exported spans.
package endings_test

import (
	"context"
	"flag"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go/v2"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	openaioption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/otelanthropic"
	"github.com/agentledger/agentledger/instrument/otelopenai"
)

var seedFlag = flag.Uint64("seed", 0, "seed of the served usage (0: a new one, logged)")

// scenarios are what the server and the caller do, with the ending each
// must give (CONTRACT.md's table) and whether its bill is known, none or
// unknown. "retried" is a 529 and its retry: one call, complete.
var scenarios = []struct {
	name   string
	ending string
}{
	{"complete", contract.EndingComplete},
	{"retried", contract.EndingComplete},
	{"error_status", contract.EndingErrorStatus},
	{"not_sent", contract.EndingNotSent},
	{"no_response", contract.EndingNoResponse},
	{"timeout", contract.EndingTimeout},
	{"cut", contract.EndingCut},
	{"caller_closed", contract.EndingCallerClosed},
	{"error_event", contract.EndingErrorEvent},
	{"no_usage", contract.EndingNoUsage},
}

// applies reports whether the scenario exists for the API: only the
// Responses API has an error object in a 200 non-streamed body.
func applies(a api, stream bool, scenario string) bool {
	return scenario != "error_event" || stream || a == openaiResponses
}

// billed is what the invocation owes for a call that ended with ending
// after the server served u: the usage when known, nothing when not
// billed; ok false when unknown.
func billed(ending string, u usage) (usage, bool) {
	switch ending {
	case contract.EndingComplete:
		return u, true
	case contract.EndingErrorStatus, contract.EndingNotSent:
		return usage{}, true
	}
	return usage{}, false
}

func TestEndings(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (go test -run TestEndings -seed %d repeats it)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for _, a := range []api{anthropicMessages, openaiChat, openaiResponses} {
		for _, stream := range []bool{false, true} {
			for _, sc := range scenarios {
				if !applies(a, stream, sc.name) {
					continue
				}
				u := randomUsage(rng, a)
				name := string(a) + "/stream=" + map[bool]string{false: "no", true: "yes"}[stream] + "/" + sc.name
				t.Run(name, func(t *testing.T) {
					runCase(t, a, stream, sc.name, sc.ending, u)
				})
			}
		}
	}
}

// randomUsage draws a usage whose parts are consistent (cache reads and
// creations within input, reasoning within output); the Anthropic API
// has no reasoning count, OpenAI's no cache creation.
func randomUsage(rng *rand.Rand, a api) usage {
	var u usage
	u.Output = 1 + rng.Int64N(4000)
	u.CacheRead = rng.Int64N(50000)
	if a == anthropicMessages {
		u.CacheCreation = rng.Int64N(20000)
	} else {
		u.Reasoning = rng.Int64N(u.Output + 1)
	}
	u.Input = u.CacheRead + u.CacheCreation + 1 + rng.Int64N(100000)
	return u
}

// pipeline is one process's OpenTelemetry pipeline: the instrument
// SpanProcessor (whose ledger answers) in front of an in-memory exporter.
type pipeline struct {
	exporter *tracetest.InMemoryExporter
	sp       *instrument.SpanProcessor
	tp       *sdktrace.TracerProvider
	tracker  *instrument.Tracker
}

func newPipeline(t *testing.T) *pipeline {
	p := &pipeline{exporter: tracetest.NewInMemoryExporter()}
	p.sp = instrument.NewSpanProcessor(sdktrace.NewSimpleSpanProcessor(p.exporter))
	p.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p.sp))
	t.Cleanup(func() { _ = p.tp.Shutdown(context.Background()) })
	p.tracker = instrument.NewTracker(instrument.WithTracerProvider(p.tp))
	return p
}

func runCase(t *testing.T, a api, stream bool, scenario, wantEnding string, served usage) {
	b := &behaviour{api: a, stream: stream, scenario: scenario, usage: served,
		received: make(chan struct{}), release: make(chan struct{})}
	if scenario == "caller_closed" && !stream {
		// A plain body is read whole by the SDK: the caller gives up
		// while it waits instead.
		b.scenario = "caller_closed_waiting"
	}
	srv := httptest.NewServer(http.HandlerFunc(b.handler))
	defer srv.Close()
	defer close(b.release)
	base := srv.URL
	if scenario == "not_sent" {
		base = "http://" + closedAddr(t)
	}
	p := newPipeline(t)

	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "session-"+scenario)
	callCtx := ctx
	switch b.scenario {
	case "timeout":
		callCtx = expireOn(ctx, b.received)
	case "caller_closed_waiting":
		var cancel context.CancelFunc
		callCtx, cancel = context.WithCancel(ctx)
		go func() { <-b.received; cancel() }()
	}
	retries := 0
	if scenario == "retried" {
		retries = 2
	}
	err := call(callCtx, a, stream, scenario == "caller_closed", base, retries, p.tp)
	inv.End()
	// A call whose last attempt failed waits for the SDK's retry, which
	// the caller knows will not come: a flush ends it now (the instrument
	// SpanProcessor ends parked calls before it flushes).
	if err := p.tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if scenario == "complete" || scenario == "retried" {
		if err != nil {
			t.Fatalf("call: %v", err)
		}
	}

	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sum, werr := p.sp.Ledger().Wait(wctx, inv.ID())
	if werr != nil {
		t.Fatalf("Wait: %v (%+v)", werr, sum)
	}
	spans := p.exporter.GetSpans().Snapshots()
	calls := modelCalls(spans)
	if len(calls) != 1 {
		t.Fatalf("%d model-call spans, want one call", len(calls))
	}
	ending := attr(calls[0], contract.AttrResponseEnding)
	if ending != wantEnding {
		t.Errorf("ending %q, want %q (call error %v)", ending, wantEnding, err)
	}

	// The property: final implies the totals the server billed; anything
	// else names a reason.
	want, known := billed(ending, served)
	got := usage{sum.Usage.InputTokens, sum.Usage.OutputTokens, sum.Usage.CacheReadInputTokens,
		sum.Usage.CacheCreationInputTokens, sum.Usage.ReasoningOutputTokens}
	switch {
	case sum.Status == instrument.StatusFinal && (!known || got != want):
		t.Errorf("final with %+v after %s; served %+v", got, ending, served)
	case sum.Status != instrument.StatusFinal && len(sum.Reasons) == 0:
		t.Errorf("%s without a reason", sum.Status)
	case known && sum.Status != instrument.StatusFinal:
		t.Errorf("%s %v for a call whose bill is known (%s)", sum.Status, sum.Reasons, ending)
	case !known && !slices.ContainsFunc(sum.Reasons, func(r string) bool { return strings.HasPrefix(r, contract.ReasonUsageMissing+":") }):
		t.Errorf("%s %v for a call whose bill is unknown (%s): want usage_missing", sum.Status, sum.Reasons, ending)
	}
	if sum.Usage.ModelCalls != 1 {
		t.Errorf("%d model calls, want 1", sum.Usage.ModelCalls)
	}

	// The collector, fed the same spans, says the same.
	col := replay(t, spans, inv.ID())
	if col.status != string(sum.Status) || col.usage != got || !slices.Equal(col.reasons, sum.Reasons) {
		t.Errorf("collector says %s %v %+v; in process %s %v %+v", col.status, col.reasons, col.usage, sum.Status, sum.Reasons, got)
	}
}

// call makes one model call of api a through the real SDK client with the
// wrapper; closeEarly reads two events of a stream and closes it.
func call(ctx context.Context, a api, stream, closeEarly bool, base string, retries int, tp *sdktrace.TracerProvider) error {
	switch a {
	case anthropicMessages:
		opts := append(otelanthropic.ClientOptions(otelanthropic.WithTracerProvider(tp)),
			anthropicoption.WithBaseURL(base), anthropicoption.WithAPIKey("unused"), anthropicoption.WithMaxRetries(retries))
		client := anthropic.NewClient(opts...)
		params := anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 256,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
		if !stream {
			_, err := client.Messages.New(ctx, params)
			return err
		}
		st := client.Messages.NewStreaming(ctx, params)
		return drain(st.Next, st.Err, st.Close, closeEarly)
	case openaiChat:
		client := openai.NewClient(openaioption.WithBaseURL(base+"/v1"), openaioption.WithAPIKey("unused"),
			openaioption.WithMaxRetries(retries), openaioption.WithMiddleware(otelopenai.Middleware(otelopenai.WithTracerProvider(tp))))
		params := openai.ChatCompletionNewParams{Model: "gpt-test",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}}
		if !stream {
			_, err := client.Chat.Completions.New(ctx, params)
			return err
		}
		st := client.Chat.Completions.NewStreaming(ctx, params)
		return drain(st.Next, st.Err, st.Close, closeEarly)
	default:
		client := openai.NewClient(openaioption.WithBaseURL(base+"/v1"), openaioption.WithAPIKey("unused"),
			openaioption.WithMaxRetries(retries), openaioption.WithMiddleware(otelopenai.Middleware(otelopenai.WithTracerProvider(tp))))
		params := responses.ResponseNewParams{Model: "gpt-test", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
		if !stream {
			_, err := client.Responses.New(ctx, params)
			return err
		}
		st := client.Responses.NewStreaming(ctx, params)
		return drain(st.Next, st.Err, st.Close, closeEarly)
	}
}

// drain reads a stream to its end (two events when closeEarly) and closes
// it.
func drain(next func() bool, errf func() error, closef func() error, closeEarly bool) error {
	n := 0
	for next() {
		n++
		if closeEarly && n == 2 {
			break
		}
	}
	err := errf()
	if cerr := closef(); err == nil {
		err = cerr
	}
	return err
}

// expireOn returns a context whose deadline passes when received is
// closed: a caller's timeout after the request reached the server,
// without a timer.
func expireOn(parent context.Context, received <-chan struct{}) context.Context {
	e := &expiring{Context: parent, done: make(chan struct{})}
	go func() {
		<-received
		e.once.Do(func() { close(e.done) })
	}()
	return e
}

type expiring struct {
	context.Context
	once sync.Once
	done chan struct{}
}

func (e *expiring) Done() <-chan struct{} { return e.done }

func (e *expiring) Err() error {
	select {
	case <-e.done:
		return context.DeadlineExceeded
	default:
		return nil
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// modelCalls returns the exported model-call spans.
func modelCalls(spans []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if attr(s, contract.AttrOperationName) == contract.OpChat {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}
