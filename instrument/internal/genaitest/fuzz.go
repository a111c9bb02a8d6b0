package genaitest

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
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/scriptedmodel"
)

// Next is the rest of an SDK's request chain after a middleware: the
// underlying type of both SDKs' option.MiddlewareNext.
type Next = func(*http.Request) (*http.Response, error)

// Middleware is the underlying type of both SDKs' option.Middleware, so
// that either wrapper's middleware can be passed as it is.
type Middleware = func(*http.Request, Next) (*http.Response, error)

// FuzzEndpoint is one traced endpoint a fuzz target feeds: the request the
// caller sends and whether the response is an event stream.
type FuzzEndpoint struct {
	// Path is the request path, such as "/v1/messages".
	Path string
	// Req is the JSON request body.
	Req string
	// Stream is whether the upstream answers with an event stream.
	Stream bool
}

// FuzzWrapper is what the fuzz helpers need to know of one GenAI client
// wrapper.
type FuzzWrapper struct {
	// New returns the wrapper's middleware, reporting to tp and mp and
	// capturing content.
	New func(tp trace.TracerProvider, mp metric.MeterProvider) Middleware
	// Usage is the usage of the scripted answer a seed is made from.
	Usage scriptedmodel.Usage
	// UsageSources names, for each usage attribute, the JSON fields of the
	// provider's API it may come from.
	UsageSources map[string][]string
}

// ScriptedBodies returns what the scripted model answers to ep's request:
// with w.Usage, and without usage.
func (w FuzzWrapper) ScriptedBodies(tb testing.TB, ep FuzzEndpoint) [][]byte {
	tb.Helper()
	var out [][]byte
	for _, st := range []scriptedmodel.Step{
		{Text: "Sure, running it.", ToolCalls: []scriptedmodel.ToolCall{{ID: "call_f", Name: "shell", Arguments: `{"cmd":"ls"}`}},
			Usage: w.Usage},
		{Text: "no usage", OmitUsage: true},
	} {
		srv := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{st}}).Start()
		client := &http.Client{Transport: &http.Transport{}}
		res, err := client.Post(srv.URL()+ep.Path, "application/json", strings.NewReader(ep.Req))
		if err != nil {
			client.CloseIdleConnections()
			srv.Close()
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

// AddSeeds adds to f the scripted bodies of ep, read whole and cut in
// half, and extra hand-written bodies, each with the byte count to read
// (0 for all) that CallThrough takes.
func (w FuzzWrapper) AddSeeds(f *testing.F, ep FuzzEndpoint, extra ...string) {
	f.Helper()
	for _, b := range w.ScriptedBodies(f, ep) {
		f.Add(b, uint16(0))
		f.Add(b, uint16(len(b)/2))
	}
	for _, s := range extra {
		f.Add([]byte(s), uint16(0))
	}
}

// CallThrough sends ep's request through the wrapper's middleware to a
// fake upstream answering 200 with body, reads cut bytes of the response
// (all when cut is 0) and closes it. It fails t unless the call is exactly
// one span, started and ended once, whose usage is non-negative and carried
// by body in a usage object, with one operation duration recorded and no
// negative token count; it returns the span's attributes.
func (w FuzzWrapper) CallThrough(t *testing.T, ep FuzzEndpoint, body []byte, cut uint16) map[string]attribute.Value {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	mw := w.New(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	req, err := http.NewRequest(http.MethodPost, "http://127.0.0.1:9"+ep.Path, strings.NewReader(ep.Req))
	if err != nil {
		t.Fatal(err)
	}
	res, err := mw(req, FakeUpstream(body, ep.Stream))
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
	attrs := Attrs(rec.Ended()[0])
	strs := JSONStrings(body)
	for key, sources := range w.UsageSources {
		v, ok := attrs[key]
		if !ok {
			continue
		}
		if v.AsInt64() < 0 {
			t.Errorf("%s = %d, negative", key, v.AsInt64())
		}
		if !Carries(strs, "usage") || !Carries(strs, sources...) {
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
	return attrs
}

// FakeUpstream returns a Next that answers every request 200 with body,
// typed as an event stream when stream is set and as JSON otherwise.
func FakeUpstream(body []byte, stream bool) Next {
	contentType := "application/json"
	if stream {
		contentType = "text/event-stream"
	}
	return func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {contentType}},
			Body: io.NopCloser(bytes.NewReader(body))}, nil
	}
}

// collect returns how many operation durations reader holds and the
// smallest token count recorded (0 when none).
func collect(t *testing.T, reader sdkmetric.Reader) (durations uint64, minToken int64) {
	t.Helper()
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

// JSONStrings returns every string a JSON text in body could hold,
// unescaped: an over-approximation of the object keys the parsers can see,
// whatever the event framing around them.
func JSONStrings(body []byte) []string {
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

// Carries reports whether any string of strs matches one of names the way
// encoding/json matches object keys (case-insensitively).
func Carries(strs []string, names ...string) bool {
	for _, s := range strs {
		for _, n := range names {
			if strings.EqualFold(s, n) {
				return true
			}
		}
	}
	return false
}
