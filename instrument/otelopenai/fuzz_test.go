package otelopenai_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/instrument/otelopenai"
	"github.com/agentledger/agentledger/internal/contract"
	"github.com/agentledger/agentledger/internal/scriptedmodel"
)

// fuzzEndpoint is one traced endpoint a fuzz target feeds: the request the
// caller sends and whether the response is an event stream.
type fuzzEndpoint struct {
	path   string
	req    string
	stream bool
}

var (
	fuzzChat          = fuzzEndpoint{"/v1/chat/completions", `{"model":"gpt-f","messages":[{"role":"user","content":"hi"}]}`, false}
	fuzzChatStream    = fuzzEndpoint{"/v1/chat/completions", `{"model":"gpt-f","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, true}
	fuzzChatInjected  = fuzzEndpoint{"/v1/chat/completions", `{"model":"gpt-f","stream":true,"messages":[{"role":"user","content":"hi"}]}`, true}
	fuzzResponses     = fuzzEndpoint{"/v1/responses", `{"model":"gpt-f","input":"hi"}`, false}
	fuzzResponsesSSE  = fuzzEndpoint{"/v1/responses", `{"model":"gpt-f","stream":true,"input":"hi"}`, true}
	fuzzEmbeddingsReq = fuzzEndpoint{"/v1/embeddings", `{"model":"emb-f","input":["a","b"]}`, false}
)

// scriptedBodies returns what the scripted model answers to ep's request:
// with full usage, and without usage.
func scriptedBodies(tb testing.TB, ep fuzzEndpoint) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, st := range []scriptedmodel.Step{
		{Text: "Sure, running it.", ToolCalls: []scriptedmodel.ToolCall{{ID: "call_f", Name: "shell", Arguments: `{"cmd":"ls"}`}},
			Usage: scriptedmodel.Usage{InputTokens: 1200, OutputTokens: 80, CacheReadTokens: 1000, ReasoningTokens: 30}},
		{Text: "no usage", OmitUsage: true},
	} {
		srv := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{st}}).Start()
		client := &http.Client{Transport: &http.Transport{}}
		res, err := client.Post(srv.URL()+ep.path, "application/json", strings.NewReader(ep.req))
		if err != nil {
			tb.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		_ = res.Body.Close()
		client.CloseIdleConnections()
		srv.Close()
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// addSeeds adds the scripted bodies of ep, read whole and cut in half,
// and extra hand-written bodies.
func addSeeds(f *testing.F, ep fuzzEndpoint, extra ...string) {
	for _, b := range scriptedBodies(f, ep) {
		f.Add(b, uint16(0))
		f.Add(b, uint16(len(b)/2))
	}
	for _, s := range extra {
		f.Add([]byte(s), uint16(0))
	}
}

// usageSources names, for each usage attribute, the JSON fields of the
// OpenAI APIs it may come from.
var usageSources = map[string][]string{
	contract.AttrUsageInputTokens:       {"prompt_tokens", "input_tokens"},
	contract.AttrUsageOutputTokens:      {"completion_tokens", "output_tokens"},
	contract.AttrUsageCacheReadTokens:   {"cached_tokens"},
	contract.AttrUsageCacheCreateTokens: {},
	contract.AttrUsageReasoningTokens:   {"reasoning_tokens"},
}

// jsonStrings returns every string a JSON text in body could hold,
// unescaped: an over-approximation of the object keys the parsers can see,
// whatever the event framing around them.
func jsonStrings(body []byte) []string {
	var out []string
	for i := 0; i < len(body); i++ {
		if body[i] != '"' {
			continue
		}
		for j := i + 1; j < len(body) && body[j] != '\n'; j++ {
			if body[j] == '\\' {
				j++
				continue
			}
			if body[j] == '"' {
				var s string
				if json.Unmarshal(body[i:j+1], &s) == nil {
					out = append(out, s)
				}
				break
			}
		}
	}
	return out
}

// carries reports whether any string of strs matches one of names the way
// encoding/json matches object keys (case-insensitively).
func carries(strs []string, names ...string) bool {
	for _, s := range strs {
		for _, n := range names {
			if strings.EqualFold(s, n) {
				return true
			}
		}
	}
	return false
}

// callThrough sends ep's request through the middleware to a fake
// upstream answering 200 with body, reads cut bytes of the response (all
// when cut is 0) and closes it. It fails t unless the call is exactly one
// span, ended once, whose usage is non-negative and carried by body.
func callThrough(t *testing.T, ep fuzzEndpoint, body []byte, cut uint16) {
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	mw := otelopenai.Middleware(
		otelopenai.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))),
		otelopenai.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		otelopenai.WithCaptureContent(true),
	)
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:9"+ep.path, strings.NewReader(ep.req))
	if err != nil {
		t.Fatal(err)
	}
	contentType := "application/json"
	if ep.stream {
		contentType = "text/event-stream"
	}
	res, err := mw(req, func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {contentType}},
			Body: io.NopCloser(bytes.NewReader(body))}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	for n := 0; cut == 0 || n < int(cut); {
		k, err := res.Body.Read(buf)
		n += k
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	_ = res.Body.Close()

	if s, e := len(rec.Started()), len(rec.Ended()); s != 1 || e != 1 {
		t.Fatalf("started %d spans, ended %d; want 1 and 1", s, e)
	}
	attrs := genaitest.Attrs(rec.Ended()[0])
	strs := jsonStrings(body)
	for key, sources := range usageSources {
		v, ok := attrs[key]
		if !ok {
			continue
		}
		if v.AsInt64() < 0 {
			t.Errorf("%s = %d, negative", key, v.AsInt64())
		}
		if !carries(strs, "usage") || !carries(strs, sources...) {
			t.Errorf("%s = %d, but the body carries no %v in a usage object", key, v.AsInt64(), sources)
		}
	}
	durations, minToken := collect(t, reader)
	if durations != 1 {
		t.Errorf("operation duration recorded %d times, want 1", durations)
	}
	if minToken < 0 {
		t.Errorf("token usage histogram holds %d", minToken)
	}
}

// collect returns how many operation durations reader holds and the
// smallest token count recorded (0 when none).
func collect(t *testing.T, reader sdkmetric.Reader) (durations uint64, minToken int64) {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					durations += p.Count
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					if v, ok := p.Min.Value(); ok && v < minToken {
						minToken = v
					}
				}
			}
		}
	}
	return durations, minToken
}

func FuzzChatCompletion(f *testing.F) {
	addSeeds(f, fuzzChat,
		`{"id":"c","model":"m","choices":[{"finish_reason":"stop","message":{"content":"x"}}],"usage":{"prompt_tokens":-3,"completion_tokens":9223372036854775807}}`,
		`{"id":"c","model":"m","choices":[],"usage":null}`,
		`{"ID":"c","USAGE":{"PROMPT_TOKENS":5}}`,
		`{"error":{"message":"m","type":"t"}}`,
	)
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) { callThrough(t, fuzzChat, body, cut) })
}

func FuzzChatStream(f *testing.F) {
	addSeeds(f, fuzzChatStream,
		"data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":-1,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":-5}}}\n\ndata: [DONE]\n\n",
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"t\",\"function\":{\"name\":\"n\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: {\"error\":{\"message\":\"boom\",\"code\":\"server_error\"}}\n\n",
		"data: {\"usage\":\ndata: {\"prompt_tokens\":4}}\n\n",
	)
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) {
		callThrough(t, fuzzChatStream, body, cut)
		callThrough(t, fuzzChatInjected, body, cut)
	})
}

func FuzzResponses(f *testing.F) {
	addSeeds(f, fuzzResponses,
		`{"id":"r","model":"m","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":-7,"output_tokens":1}}`,
		`{"id":"r","status":"failed","error":{"message":"m","code":"server_error"},"usage":null}`,
	)
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) { callThrough(t, fuzzResponses, body, cut) })
}

func FuzzResponsesEvents(f *testing.F) {
	addSeeds(f, fuzzResponsesSSE,
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"status\":\"completed\",\"usage\":{\"input_tokens\":3,\"output_tokens\":-2,\"output_tokens_details\":{\"reasoning_tokens\":-9}}}}\n\n",
		"event: error\ndata: {\"type\":\"error\",\"message\":\"m\",\"code\":42}\n\n",
		"data: {\"type\":\"response.created\",\"response\":null}\n\ndata: {\"type\":\"response.incomplete\",\"response\":{\"incomplete_details\":{\"reason\":\"\"}}}\n\n",
	)
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) { callThrough(t, fuzzResponsesSSE, body, cut) })
}

func FuzzEmbeddings(f *testing.F) {
	addSeeds(f, fuzzEmbeddingsReq,
		`{"model":"e","usage":{"prompt_tokens":-1,"total_tokens":-1}}`,
		`{"model":"e","usage":{"total_tokens":4}}`,
	)
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) { callThrough(t, fuzzEmbeddingsReq, body, cut) })
}
