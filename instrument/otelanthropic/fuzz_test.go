package otelanthropic_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/instrument/otelanthropic"
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
	fuzzMessages       = fuzzEndpoint{"/v1/messages", `{"model":"claude-f","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`, false}
	fuzzMessagesStream = fuzzEndpoint{"/v1/messages", `{"model":"claude-f","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, true}
)

// scriptedBodies returns what the scripted model answers to ep's request:
// with full usage, and without usage.
func scriptedBodies(tb testing.TB, ep fuzzEndpoint) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, st := range []scriptedmodel.Step{
		{Text: "Sure, running it.", ToolCalls: []scriptedmodel.ToolCall{{ID: "call_f", Name: "shell", Arguments: `{"cmd":"ls"}`}},
			Usage: scriptedmodel.Usage{InputTokens: 1200, OutputTokens: 80, CacheReadTokens: 900, CacheCreationTokens: 100, ReasoningTokens: 30}},
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
// Messages API it may come from.
var usageSources = map[string][]string{
	contract.AttrUsageInputTokens:       {"input_tokens"},
	contract.AttrUsageOutputTokens:      {"output_tokens"},
	contract.AttrUsageCacheReadTokens:   {"cache_read_input_tokens"},
	contract.AttrUsageCacheCreateTokens: {"cache_creation_input_tokens"},
	contract.AttrUsageReasoningTokens:   {"thinking_tokens"},
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
// span, ended once, whose usage is non-negative and carried by body, and
// returns the span's attributes.
func callThrough(t *testing.T, ep fuzzEndpoint, body []byte, cut uint16) map[string]attribute.Value {
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	mw := otelanthropic.Middleware(
		otelanthropic.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))),
		otelanthropic.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		otelanthropic.WithCaptureContent(true),
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
	// Cache tokens are counted in the input.
	if in, ok := attrs[contract.AttrUsageInputTokens]; ok {
		read, created := attrs[contract.AttrUsageCacheReadTokens].AsInt64(), attrs[contract.AttrUsageCacheCreateTokens].AsInt64()
		if n := in.AsInt64(); read > n || created > n-read {
			t.Errorf("input tokens %d < cache read %d + cache creation %d", n, read, created)
		}
	}
	durations, minToken := collect(t, reader)
	if durations != 1 {
		t.Errorf("operation duration recorded %d times, want 1", durations)
	}
	if minToken < 0 {
		t.Errorf("token usage histogram holds %d", minToken)
	}
	return attrs
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

func FuzzMessage(f *testing.F) {
	addSeeds(f, fuzzMessages,
		`{"id":"m","model":"c","stop_reason":"end_turn","content":[{"type":"text","text":"x"}],"usage":{"input_tokens":-3,"output_tokens":2,"cache_read_input_tokens":-1}}`,
		`{"id":"m","model":"c","usage":{"input_tokens":9223372036854775807,"cache_read_input_tokens":1,"cache_creation_input_tokens":1}}`,
		`{"usage":{"input_tokens":9223372036854775802,"cache_read_input_tokens":10,"cache_creation_input_tokens":9223372036854775807}}`,
		`{"usage":{"input_tokens":10,"cache_read_input_tokens":-3}}`,
		`{"id":"m","content":[{"type":"tool_use","id":"t","name":"bash"}],"usage":null}`,
		`{"type":"error","error":{"type":"overloaded_error","message":"m"}}`,
	)
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) { _ = callThrough(t, fuzzMessages, body, cut) })
}

func FuzzMessageEvents(f *testing.F) {
	addSeeds(f, fuzzMessagesStream,
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":5,\"cache_read_input_tokens\":9223372036854775807,\"output_tokens\":1}}}\n\n"+
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":-4,\"cache_creation_input_tokens\":-2}}\n\n"+
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":null}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\n",
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"m\"}}\n\n",
	)
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) { _ = callThrough(t, fuzzMessagesStream, body, cut) })
}

// Regression (found with FuzzMessage's seeds): a negative cache count was
// subtracted from the input, and an input plus cache counts beyond int64
// wrapped around to a small positive input.
func TestMergeIgnoresNegativeAndOverflow(t *testing.T) {
	a := callThrough(t, fuzzMessages, []byte(`{"usage":{"input_tokens":10,"cache_read_input_tokens":-3,"output_tokens":2}}`), 0)
	genaitest.WantInt(t, a, contract.AttrUsageInputTokens, 10)
	genaitest.WantInt(t, a, contract.AttrUsageOutputTokens, 2)
	genaitest.WantAbsent(t, a, contract.AttrUsageCacheReadTokens)

	a = callThrough(t, fuzzMessages, []byte(`{"usage":{"input_tokens":9223372036854775802,"cache_read_input_tokens":10,"cache_creation_input_tokens":9223372036854775807}}`), 0)
	genaitest.WantAbsent(t, a, contract.AttrUsageInputTokens)
	genaitest.WantInt(t, a, contract.AttrUsageCacheReadTokens, 10)

	a = callThrough(t, fuzzMessagesStream, []byte("data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":4,\"output_tokens\":1}}}\n\n"+
		"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":-1,\"cache_read_input_tokens\":6}}\n\n"), 0)
	genaitest.WantInt(t, a, contract.AttrUsageInputTokens, 10)
	genaitest.WantInt(t, a, contract.AttrUsageOutputTokens, 1)
}
