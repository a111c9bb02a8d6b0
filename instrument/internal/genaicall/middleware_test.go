package genaicall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/instrument/internal/genaitest"
)

// testParser reads a toy API: a body or event is {"model", "in", "out"},
// and the event "[DONE]" ends a stream; events with "hide" are dropped.
type testParser struct{}

type testBody struct {
	Model string `json:"model"`
	In    *int64 `json:"in"`
	Out   *int64 `json:"out"`
	Text  string `json:"text"`
	// Stream is the request's: gen_ai.request.stream.
	Stream bool `json:"stream"`
}

func (testParser) ParseResponse(b []byte, r *Result, capture bool) {
	var tb testBody
	if json.Unmarshal(b, &tb) != nil {
		return
	}
	r.Parsed = true
	if tb.Model != "" {
		r.Model = tb.Model
	}
	if tb.In != nil {
		r.Usage.Input = tb.In
	}
	if tb.Out != nil {
		r.Usage.Output = tb.Out
	}
	if capture {
		r.Text.WriteString(tb.Text)
	}
}

func (p testParser) ParseEvent(data []byte, r *Result, capture bool) (keep, terminal bool) {
	if string(data) == "[DONE]" {
		return true, true
	}
	p.ParseResponse(data, r, capture)
	return !bytes.Contains(data, []byte("hide")), false
}

type harness struct {
	m      *Middleware
	rec    *tracetest.SpanRecorder
	timers *genaitest.FakeTimers
	// sent holds the bodies next was given.
	sent []string
}

func newHarness(capture bool) *harness {
	h := &harness{rec: tracetest.NewSpanRecorder(), timers: genaitest.NewFakeTimers()}
	h.m = New(Config{
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.rec)),
		Propagators:    propagation.TraceContext{},
		CaptureContent: capture,
		AfterFunc:      h.timers.AfterFunc,
	}.WithDefaults(), Scope{Name: "example.com/otelfake", Version: "1", Provider: "fake"})
	return h
}

func describe(body []byte) Request {
	var tb testBody
	_ = json.Unmarshal(body, &tb)
	return Request{Endpoint: 1, Operation: "chat", Model: tb.Model, Stream: tb.Stream, Input: json.RawMessage(`[{"role":"user"}]`), Parser: testParser{}}
}

// attempt sends one attempt as a Stainless SDK does: retry is the
// X-Stainless-Retry-Count header, or none when negative.
func (h *harness) attempt(ctx context.Context, body string, retry int, res *http.Response, err error) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://127.0.0.1:9/v1/chat", strings.NewReader(body))
	if retry >= 0 {
		req.Header.Set(headerRetryCount, strconv.Itoa(retry))
	}
	return h.m.Handle(req, func(r *http.Request) (*http.Response, error) {
		b, _ := io.ReadAll(r.Body)
		h.sent = append(h.sent, string(b))
		return res, err
	}, describe)
}

func response(status int, contentType, body string) *http.Response {
	return &http.Response{StatusCode: status, Header: http.Header{"Content-Type": {contentType}}, Body: io.NopCloser(strings.NewReader(body))}
}

func attemptStatuses(s sdktrace.ReadOnlySpan) string {
	var out []string
	for _, e := range s.Events() {
		if e.Name != eventAttempt {
			continue
		}
		st := "-"
		for _, kv := range e.Attributes {
			if string(kv.Key) == attrHTTPStatusCode {
				st = kv.Value.Emit()
			}
		}
		out = append(out, st)
	}
	return strings.Join(out, " ")
}

// A retried attempt whose error body the SDK closed unread, then a
// success, are one span with the success's usage.
func TestHandleRetryIsOneSpan(t *testing.T) {
	h := newHarness(true)
	body := `{"model":"m1"}`
	res, err := h.attempt(context.Background(), body, 0, response(429, "application/json", `{"error":"slow down"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if h.m.Parked() != 1 || len(h.rec.Ended()) != 0 {
		t.Fatalf("parked %d, ended %d", h.m.Parked(), len(h.rec.Ended()))
	}
	res, err = h.attempt(context.Background(), body, 1, response(200, "application/json", `{"model":"m1-2026","in":7,"out":3,"text":"hello"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(res.Body); err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	s := genaitest.Only(t, h.rec)
	if s.Name() != "chat m1" {
		t.Errorf("name %q", s.Name())
	}
	a := genaitest.Attrs(s)
	genaitest.WantStr(t, a, "gen_ai.provider.name", "fake")
	genaitest.WantAbsent(t, a, "gen_ai.request.stream")
	genaitest.WantStr(t, a, "gen_ai.response.model", "m1-2026")
	genaitest.WantInt(t, a, "gen_ai.usage.input_tokens", 7)
	genaitest.WantInt(t, a, "gen_ai.usage.output_tokens", 3)
	genaitest.WantInt(t, a, "http.request.resend_count", 1)
	genaitest.WantStr(t, a, "gen_ai.input.messages", `[{"role":"user"}]`)
	genaitest.WantStr(t, a, "gen_ai.output.messages", `[{"parts":[{"content":"hello","type":"text"}],"role":"assistant"}]`)
	genaitest.WantAbsent(t, a, "error.type")
	if got := attemptStatuses(s); got != "429 200" {
		t.Errorf("attempts %q", got)
	}
	if h.m.Parked() != 0 {
		t.Errorf("parked %d", h.m.Parked())
	}
}

// An error body the caller reads ends the call with that error at once.
func TestHandleErrorBodyRead(t *testing.T) {
	h := newHarness(false)
	res, _ := h.attempt(context.Background(), `{}`, 0, response(400, "application/json", `{"error":"bad"}`), nil)
	_, _ = io.ReadAll(res.Body)
	_ = res.Body.Close()
	s := genaitest.Only(t, h.rec)
	genaitest.WantStr(t, genaitest.Attrs(s), "error.type", "400")
	if s.Name() != "chat" {
		t.Errorf("name %q", s.Name())
	}
}

// A stream ends its span at the terminal event, once; events the parser
// drops never reach the caller.
func TestHandleStream(t *testing.T) {
	h := newHarness(false)
	stream := "data: {\"model\":\"m\",\"in\":5}\n\ndata: {\"hide\":1,\"out\":2}\n\ndata: [DONE]\n\n"
	res, _ := h.attempt(context.Background(), `{"model":"m","stream":true}`, -1, response(200, "text/event-stream", stream), nil)
	got, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if want := "data: {\"model\":\"m\",\"in\":5}\n\ndata: [DONE]\n\n"; string(got) != want {
		t.Errorf("caller read %q", got)
	}
	_ = res.Body.Close()
	_ = res.Body.Close()
	a := genaitest.Attrs(genaitest.Only(t, h.rec))
	genaitest.WantInt(t, a, "gen_ai.usage.input_tokens", 5)
	genaitest.WantInt(t, a, "gen_ai.usage.output_tokens", 2)
	genaitest.WantStr(t, a, "gen_ai.request.stream", "true")
	genaitest.WantAbsent(t, a, "invocation.response.stream_closed_early", "error.type", "gen_ai.input.messages")
}

// A plain body closed before it was read is a call the caller gave up.
func TestHandlePlainClosedEarly(t *testing.T) {
	h := newHarness(false)
	res, _ := h.attempt(context.Background(), `{}`, 0, response(200, "application/json", `{"in":1}`), nil)
	_ = res.Body.Close()
	a := genaitest.Attrs(genaitest.Only(t, h.rec))
	genaitest.WantStr(t, a, "invocation.response.stream_closed_early", "true")
	genaitest.WantAbsent(t, a, genaitest.UsageKeys...)
}

// A new first attempt of the same request ends the call parked after a
// transport error; another caller's identical request is not tied to it.
func TestHandleFirstAttemptEndsParked(t *testing.T) {
	h := newHarness(false)
	// A dial error: the request never left, so the call is not billed.
	boom := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	tracer := sdktrace.NewTracerProvider().Tracer("caller")
	ctx, parent := tracer.Start(context.Background(), "turn")
	defer parent.End()
	if _, err := h.attempt(ctx, `{}`, 0, nil, boom); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if _, err := h.attempt(context.Background(), `{}`, 1, nil, boom); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	if n := len(h.rec.Ended()); n != 0 || h.m.Parked() != 2 {
		t.Fatalf("ended %d, parked %d: another caller's retry was tied to the call", n, h.m.Parked())
	}
	if _, err := h.attempt(ctx, `{}`, 0, nil, boom); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	ended := h.rec.Ended()
	if len(ended) != 1 || len(h.rec.Started()) != 3 {
		t.Fatalf("ended %d, started %d", len(ended), len(h.rec.Started()))
	}
	genaitest.WantStr(t, genaitest.Attrs(ended[0]), "error.type", fmt.Sprintf("%T", boom))
	genaitest.WantStr(t, genaitest.Attrs(ended[0]), "invocation.response.ending", "not_sent")
	h.timers.FireAll()
	if n := len(h.rec.Ended()); n != 3 || h.m.Parked() != 0 {
		t.Fatalf("after the windows: ended %d, parked %d", n, h.m.Parked())
	}
}

// A body the wrapper rewrites is sent upstream; retries are tied by the
// caller's body.
func TestHandleRewrittenBody(t *testing.T) {
	h := newHarness(false)
	rewrite := func(body []byte) Request {
		r := describe(body)
		r.Body = append(bytes.TrimSuffix(body, []byte("}")), []byte(`,"extra":true}`)...)
		return r
	}
	send := func(retry int, res *http.Response) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:9/v1/chat", strings.NewReader(`{"model":"m"}`))
		req.Header.Set(headerRetryCount, strconv.Itoa(retry))
		out, err := h.m.Handle(req, func(r *http.Request) (*http.Response, error) {
			b, _ := io.ReadAll(r.Body)
			h.sent = append(h.sent, string(b))
			return res, nil
		}, rewrite)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	_ = send(0, response(500, "application/json", `{}`)).Body.Close()
	res := send(1, response(200, "application/json", `{"in":4}`))
	_, _ = io.ReadAll(res.Body)
	if want := `{"model":"m","extra":true}`; len(h.sent) != 2 || h.sent[0] != want || h.sent[1] != want {
		t.Errorf("sent %q", h.sent)
	}
	genaitest.WantInt(t, genaitest.Attrs(genaitest.Only(t, h.rec)), "http.request.resend_count", 1)
}
