package wireproxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/anthropicwire"
	"github.com/agentledger/agentledger/instrument/internal/genaicall"
	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/scriptedmodel"
)

func TestMain(m *testing.M) { genaitest.VerifyTestMain(m) }

// bound bounds every wait of a test: a behaviour that broke fails the
// test instead of hanging it.
const bound = 10 * time.Second

// describe is the adapters' Describe: Messages requests are model calls.
func describe(req *http.Request, body []byte) (genaicall.Request, bool) {
	if !anthropicwire.IsMessages(req) {
		return genaicall.Request{}, false
	}
	return anthropicwire.Describe(body, 1), true
}

// usage is the usage the scripted model reports in most tests, in the
// GenAI sense: Anthropic's input_tokens is 100-30-20 = 50.
var usage = scriptedmodel.Usage{InputTokens: 100, CacheReadTokens: 30, CacheCreationTokens: 20, OutputTokens: 7, ReasoningTokens: 3}

// seen is one request the upstream received.
type seen struct {
	Method, Path, RawQuery, Host string
	ContentLength                int64
	Header                       http.Header
	Body                         []byte
}

// upstream is a model endpoint on loopback: it records every request and
// the bytes it answers with.
type upstream struct {
	srv *httptest.Server

	// mu guards requests and written: handlers write them, tests read.
	mu       sync.Mutex
	requests []seen
	written  bytes.Buffer
}

// newUpstream serves h on a free loopback port; h sees the request's body
// as it arrived and writes through a recorder of the bytes it answers.
func newUpstream(t *testing.T, h http.Handler) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		u.mu.Lock()
		u.requests = append(u.requests, seen{
			Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Host: r.Host,
			ContentLength: r.ContentLength, Header: r.Header.Clone(), Body: body,
		})
		u.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(&recordingWriter{ResponseWriter: w, u: u}, r)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// scripted serves the scripted model's Messages API under prefix.
func scripted(t *testing.T, prefix string, steps ...scriptedmodel.Step) *upstream {
	t.Helper()
	model := scriptedmodel.New(scriptedmodel.Options{Steps: steps})
	return newUpstream(t, http.StripPrefix(prefix, model.Handler()))
}

func (u *upstream) seen() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seen(nil), u.requests...)
}

func (u *upstream) answered() []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return bytes.Clone(u.written.Bytes())
}

// only returns the one request the upstream received.
func (u *upstream) only(t *testing.T) seen {
	t.Helper()
	got := u.seen()
	if len(got) != 1 {
		t.Fatalf("upstream received %d requests, want 1", len(got))
	}
	return got[0]
}

type recordingWriter struct {
	http.ResponseWriter
	u *upstream
}

func (w *recordingWriter) Write(b []byte) (int, error) {
	w.u.mu.Lock()
	w.u.written.Write(b)
	w.u.mu.Unlock()
	return w.ResponseWriter.Write(b)
}

func (w *recordingWriter) Flush() { http.NewResponseController(w.ResponseWriter).Flush() }

// harness is a Proxy in front of an upstream, with the spans it makes
// and what its Decisions were told.
type harness struct {
	rec    *tracetest.SpanRecorder
	mw     *genaicall.Middleware
	proxy  *Proxy
	client *http.Client
	// ctx holds the span the model calls start under (not ended, so that
	// rec.Ended holds only model calls).
	ctx    context.Context
	parent trace.SpanContext
	// tool receives every id OnTool is told; done every usage Done is
	// given, with the number of spans ended by then. Both are buffered
	// for more calls than any test makes, so that no test must read them.
	tool chan string
	done chan doneCall

	// mu guards tools and dones.
	mu    sync.Mutex
	tools []string
	dones int

	closeOnce sync.Once
	closeErr  error
}

type doneCall struct {
	usage genaicall.Usage
	ended int
}

// start runs a Proxy to upstream with cfg; cfg's Upstream and Middleware
// are set here, and Describe and Attribute when cfg leaves them nil
// (Attribute then returns h.decision()).
func start(t *testing.T, upstream string, cfg Config) *harness {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	h := &harness{
		rec: rec,
		mw: genaicall.New(genaicall.Config{
			TracerProvider: tp,
			Propagators:    propagation.NewCompositeTextMapPropagator(),
		}.WithDefaults(), genaicall.Scope{Name: "test", Version: "0", Provider: "anthropic"}),
		client: &http.Client{Transport: &http.Transport{DisableCompression: true}},
		tool:   make(chan string, 16),
		done:   make(chan doneCall, 16),
	}
	var parent trace.Span
	h.ctx, parent = tp.Tracer("test").Start(context.Background(), "turn")
	h.parent = parent.SpanContext()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Upstream, cfg.Middleware = u, h.mw
	if cfg.Describe == nil {
		cfg.Describe = describe
	}
	if cfg.Attribute == nil {
		cfg.Attribute = func(*http.Request, []byte) Decision { return h.decision() }
	}
	h.proxy, err = Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		_ = h.close()
		h.client.CloseIdleConnections()
		// A call whose upstream failed waits for a retry: end it, so that
		// no timer outlives the test.
		h.mw.EndParked()
		_ = tp.Shutdown(context.Background())
	})
	return h
}

// decision is a Decision under h.ctx that tells h.
func (h *harness) decision() Decision {
	return Decision{Ctx: h.ctx, OnTool: h.onTool, Done: h.onDone}
}

func (h *harness) onTool(id string) {
	h.mu.Lock()
	h.tools = append(h.tools, id)
	h.mu.Unlock()
	h.tool <- id
}

func (h *harness) onDone(u genaicall.Usage) {
	h.mu.Lock()
	h.dones++
	h.mu.Unlock()
	h.done <- doneCall{usage: u, ended: len(h.rec.Ended())}
}

func (h *harness) told() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.tools...)
}

func (h *harness) doneCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dones
}

// waitDone returns what the next Done call was given.
func (h *harness) waitDone(t *testing.T) doneCall {
	t.Helper()
	select {
	case d := <-h.done:
		return d
	case <-time.After(bound):
		t.Fatal("Done was not called")
		return doneCall{}
	}
}

// close closes the proxy once; it waits for the requests in flight, so
// that their spans have ended and Done was called when it returns.
func (h *harness) close() error {
	h.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), bound)
		defer cancel()
		h.closeErr = h.proxy.Close(ctx)
	})
	return h.closeErr
}

// do sends req through the proxy; the request is bounded.
func (h *harness) do(t *testing.T, req *http.Request) *http.Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(req.Context(), bound)
	t.Cleanup(cancel)
	res, err := h.client.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	return res
}

// post sends body to the proxy's path (with its query).
func (h *harness) post(t *testing.T, path string, body []byte) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.proxy.URL()+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return h.do(t, req)
}

// readAll reads and closes res.Body.
func readAll(t *testing.T, res *http.Response) []byte {
	t.Helper()
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	return b
}

// messages returns a Messages request body.
func messages(stream bool, text string) []byte {
	return fmt.Appendf(nil, `{"model":"claude-test","max_tokens":64,"stream":%t,"messages":[{"role":"user","content":%q}]}`, stream, text)
}

// modelSpans returns the model-call spans ended so far.
func (h *harness) modelSpans() []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range h.rec.Ended() {
		if s.SpanKind() == trace.SpanKindClient {
			out = append(out, s)
		}
	}
	return out
}

// onlySpan returns the one model-call span, checked to be a child of
// the Decision's span.
func (h *harness) onlySpan(t *testing.T) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := h.modelSpans()
	if len(spans) != 1 {
		t.Fatalf("%d model-call spans, want 1", len(spans))
	}
	s := spans[0]
	if s.Parent().TraceID() != h.parent.TraceID() || s.Parent().SpanID() != h.parent.SpanID() {
		t.Errorf("span parent = %s/%s, want the Decision's span %s/%s",
			s.Parent().TraceID(), s.Parent().SpanID(), h.parent.TraceID(), h.parent.SpanID())
	}
	return s
}

func attrs(s sdktrace.ReadOnlySpan) map[string]attribute.Value {
	m := make(map[string]attribute.Value)
	for _, kv := range s.Attributes() {
		m[string(kv.Key)] = kv.Value
	}
	return m
}

// checkSpanUsage checks that s carries the usage want (as usageString
// formats it) and no error status; its input is Anthropic's input_tokens
// plus the cache reads and writes.
func checkSpanUsage(t *testing.T, s sdktrace.ReadOnlySpan, want string) {
	t.Helper()
	a := attrs(s)
	count := func(key string) *int64 {
		v, ok := a[key]
		if !ok {
			return nil
		}
		n := v.AsInt64()
		return &n
	}
	got := usageString(genaicall.Usage{
		Input:         count(contract.AttrUsageInputTokens),
		Output:        count(contract.AttrUsageOutputTokens),
		CacheRead:     count(contract.AttrUsageCacheReadTokens),
		CacheCreation: count(contract.AttrUsageCacheCreateTokens),
		Reasoning:     count(contract.AttrUsageReasoningTokens),
	})
	if got != want {
		t.Errorf("span usage %s, want %s", got, want)
	}
	if s.Status().Code != codes.Unset {
		t.Errorf("span status = %v %q, want unset", s.Status().Code, s.Status().Description)
	}
}

// usageString formats u, nil counts as "-".
func usageString(u genaicall.Usage) string {
	f := func(p *int64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	return fmt.Sprintf("in=%s out=%s cache_read=%s cache_creation=%s reasoning=%s",
		f(u.Input), f(u.Output), f(u.CacheRead), f(u.CacheCreation), f(u.Reasoning))
}

func genai(u scriptedmodel.Usage) string {
	return fmt.Sprintf("in=%d out=%d cache_read=%d cache_creation=%d reasoning=%d",
		u.InputTokens, u.OutputTokens, u.CacheReadTokens, u.CacheCreationTokens, u.ReasoningTokens)
}

var noUsage = usageString(genaicall.Usage{})

// TestStreamPassesThrough: a streamed Messages request reaches the
// upstream as the runtime sent it (method, path joined to the upstream's
// prefix, query, credentials and other headers, body) with nothing added;
// the runtime gets the upstream's bytes exactly; and one span under the
// Decision's context carries the response's usage.
func TestStreamPassesThrough(t *testing.T) {
	up := scripted(t, "/gateway", scriptedmodel.Step{Text: "hello there, world", Usage: usage})
	h := start(t, up.srv.URL+"/gateway", Config{})

	body := messages(true, "hi")
	req, err := http.NewRequest(http.MethodPost, h.proxy.URL()+"/v1/messages?beta=true", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	sent := http.Header{
		"Content-Type":            {"application/json"},
		"X-Api-Key":               {"sk-ant-api-test"},
		"Authorization":           {"Bearer sk-ant-oat-test"},
		"Anthropic-Version":       {"2023-06-01"},
		"Anthropic-Beta":          {"oauth-2025-04-20,interleaved-thinking-2025-05-14"},
		"User-Agent":              {"claude-cli/2.0.0 (external, sdk-cli)"},
		"X-Stainless-Retry-Count": {"0"},
		"X-Claude-Code-Session":   {"s-1"},
	}
	for k, vs := range sent {
		req.Header[k] = vs
	}
	res := h.do(t, req)
	got := readAll(t, res)

	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", res.StatusCode, got)
	}
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q, want text/event-stream", ct)
	}
	if id := res.Header.Get("Request-Id"); id != "req_scripted_1" {
		t.Errorf("response header request-id = %q, want the upstream's", id)
	}
	if want := up.answered(); !bytes.Equal(got, want) || !bytes.Contains(got, []byte("event: message_stop")) {
		t.Errorf("the runtime got\n%q\nthe upstream sent\n%q", got, want)
	}

	in := up.only(t)
	if in.Method != http.MethodPost || in.Path != "/gateway/v1/messages" || in.RawQuery != "beta=true" {
		t.Errorf("upstream got %s %s?%s, want POST /gateway/v1/messages?beta=true", in.Method, in.Path, in.RawQuery)
	}
	if want := up.srv.Listener.Addr().String(); in.Host != want {
		t.Errorf("upstream Host = %q, want its own %q", in.Host, want)
	}
	if !bytes.Equal(in.Body, body) || in.ContentLength != int64(len(body)) {
		t.Errorf("upstream body (length %d) = %q, want %q", in.ContentLength, in.Body, body)
	}
	for k, vs := range sent {
		if g := in.Header.Values(k); strings.Join(g, "|") != strings.Join(vs, "|") {
			t.Errorf("upstream header %s = %q, want %q", k, g, vs)
		}
	}
	for k := range in.Header {
		switch lk := strings.ToLower(k); {
		case strings.HasPrefix(lk, "x-forwarded"), lk == "forwarded", lk == "via",
			lk == "traceparent", lk == "tracestate", lk == "baggage":
			t.Errorf("the proxy added header %s: %q", k, in.Header.Values(k))
		}
	}

	s := h.onlySpan(t)
	checkSpanUsage(t, s, genai(usage))
	a := attrs(s)
	if s.Name() != "chat claude-test" || !a[contract.AttrRequestStream].AsBool() || a["gen_ai.response.id"].AsString() != "msg_scripted_1" {
		t.Errorf("span %q stream=%v id=%q, want chat claude-test, streamed, msg_scripted_1",
			s.Name(), a[contract.AttrRequestStream].Emit(), a["gen_ai.response.id"].AsString())
	}
	host, port, _ := net.SplitHostPort(up.srv.Listener.Addr().String())
	if a["server.address"].AsString() != host || fmt.Sprint(a["server.port"].AsInt64()) != port {
		t.Errorf("span server = %s:%d, want the upstream %s:%s", a["server.address"].AsString(), a["server.port"].AsInt64(), host, port)
	}
	if d := h.waitDone(t); usageString(d.usage) != genai(usage) {
		t.Errorf("Done got %s, want %s", usageString(d.usage), genai(usage))
	}
	if st := h.proxy.Stats(); st != (Stats{Calls: 1}) {
		t.Errorf("Stats = %+v, want one call", st)
	}
}

// TestJSONPassesThrough: a non-streamed response reaches the runtime
// byte for byte, its usage is on the span, and its tool uses are told
// before the runtime has the body.
func TestJSONPassesThrough(t *testing.T) {
	up := scripted(t, "", scriptedmodel.Step{Text: "ok", Usage: usage,
		ToolCalls: []scriptedmodel.ToolCall{{ID: "toolu_plain", Name: "bash", Arguments: `{"cmd":"ls"}`}}})
	h := start(t, up.srv.URL, Config{})

	body := messages(false, "hi")
	res := h.post(t, "/v1/messages", body)
	got := readAll(t, res)
	// The tools told by the time the runtime has read the body.
	told := h.told()

	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, Content-Type %q: %s", res.StatusCode, res.Header.Get("Content-Type"), got)
	}
	if want := up.answered(); !bytes.Equal(got, want) {
		t.Errorf("the runtime got\n%q\nthe upstream sent\n%q", got, want)
	}
	if in := up.only(t); !bytes.Equal(in.Body, body) || in.Path != "/v1/messages" {
		t.Errorf("upstream got %s %q, want /v1/messages %q", in.Path, in.Body, body)
	}
	if strings.Join(told, ",") != "toolu_plain" {
		t.Errorf("OnTool told %q before the runtime had the body, want [toolu_plain]", told)
	}
	d := h.waitDone(t)
	s := h.onlySpan(t)
	checkSpanUsage(t, s, genai(usage))
	if attrs(s)[contract.AttrRequestStream].AsBool() {
		t.Error("a non-streamed request recorded as streamed")
	}
	if usageString(d.usage) != genai(usage) {
		t.Errorf("Done got %s, want %s", usageString(d.usage), genai(usage))
	}
}

// sse formats one server-sent event as the Messages API sends it.
func sse(typ, data string) string { return "event: " + typ + "\ndata: " + data + "\n\n" }

const (
	// rawUsage is usage in Anthropic's terms.
	rawUsage = `{"input_tokens":50,"cache_read_input_tokens":30,"cache_creation_input_tokens":20,"output_tokens":1}`
	// rawUsageGenAI is rawUsage and 7 output tokens in the GenAI sense.
	rawUsageGenAI = "in=100 out=7 cache_read=30 cache_creation=20 reasoning=-"
	messageJSON   = `{"id":"msg_gz","type":"message","role":"assistant","model":"claude-test",` +
		`"content":[{"type":"text","text":"compressed"}],"stop_reason":"end_turn",` +
		`"usage":{"input_tokens":50,"cache_read_input_tokens":30,"cache_creation_input_tokens":20,"output_tokens":7}}`
)

var (
	eventMessageStart = sse("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant",`+
		`"model":"claude-test","content":[],"stop_reason":null,"usage":`+rawUsage+`}}`)
	eventMessageEnd = sse("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}`) +
		sse("message_stop", `{"type":"message_stop"}`)
	streamEvents = []string{
		eventMessageStart,
		sse("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
		sse("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"compressed"}}`),
		sse("content_block_stop", `{"type":"content_block_stop","index":0}`),
		eventMessageEnd,
	}
)

// TestCompressedResponse: the runtime's Accept-Encoding does not reach
// the upstream (the proxy's transport asks for gzip itself), and a gzip
// response reaches the runtime decompressed with its usage read, whatever
// encodings the runtime said it accepts.
func TestCompressedResponse(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%t", stream), func(t *testing.T) {
			up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var out io.Writer = w
				if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
					w.Header().Set("Content-Encoding", "gzip")
					gz := gzip.NewWriter(w)
					defer gz.Close()
					out = gz
				}
				flush := func() {
					if gz, ok := out.(*gzip.Writer); ok {
						_ = gz.Flush()
					}
					http.NewResponseController(w).Flush()
				}
				if !stream {
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(out, messageJSON)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				for _, ev := range streamEvents {
					_, _ = io.WriteString(out, ev)
					flush()
				}
			}))
			h := start(t, up.srv.URL, Config{})
			req, err := http.NewRequest(http.MethodPost, h.proxy.URL()+"/v1/messages", bytes.NewReader(messages(stream, "hi")))
			if err != nil {
				t.Fatal(err)
			}
			// As a Node client sends it; the client's own transport
			// decompresses nothing, since the header is set by hand.
			req.Header.Set("Accept-Encoding", "gzip, deflate, br, zstd")
			res := h.do(t, req)
			got := readAll(t, res)

			want := messageJSON
			if stream {
				want = strings.Join(streamEvents, "")
			}
			if ce := res.Header.Get("Content-Encoding"); ce != "" || string(got) != want {
				t.Errorf("the runtime got Content-Encoding %q and\n%q\nwant the plain body\n%q", ce, got, want)
			}
			if ae := up.only(t).Header.Values("Accept-Encoding"); strings.Join(ae, ",") != "gzip" {
				t.Errorf("upstream Accept-Encoding = %q, want the proxy transport's own gzip", ae)
			}
			if !bytes.HasPrefix(up.answered(), []byte{0x1f, 0x8b}) {
				t.Error("the upstream did not answer gzip: the test proves nothing")
			}
			d := h.waitDone(t)
			s := h.onlySpan(t)
			checkSpanUsage(t, s, rawUsageGenAI)
			if usageString(d.usage) != rawUsageGenAI {
				t.Errorf("Done got %s, want %s", usageString(d.usage), rawUsageGenAI)
			}
		})
	}
}

// TestOnToolBeforeRuntime: OnTool is told the id of every tool use as
// the proxy reads it: before the runtime can read the event that carries
// it, and while the rest of the response has not even been sent.
func TestOnToolBeforeRuntime(t *testing.T) {
	release := make(chan struct{})
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []string{
			eventMessageStart,
			sse("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"Bash","input":{}}}`),
			sse("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"command\":\"ls\"}"}}`),
			sse("content_block_stop", `{"type":"content_block_stop","index":0}`),
			sse("content_block_start", `{"type":"content_block_start","index":1,"content_block":{"type":"server_tool_use","id":"srvtoolu_2","name":"web_search","input":{}}}`),
			sse("content_block_stop", `{"type":"content_block_stop","index":1}`),
		} {
			_, _ = io.WriteString(w, ev)
			http.NewResponseController(w).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, eventMessageEnd)
	}))
	h := start(t, up.srv.URL, Config{})
	res := h.post(t, "/v1/messages", messages(true, "run ls"))
	defer res.Body.Close()
	br := bufio.NewReader(res.Body)

	// Read up to the second tool use; each tool use's id was told before
	// its event reached the runtime.
	for want := []string{"toolu_1", "srvtoolu_2"}; len(want) > 0; {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the stream before its end: %v", err)
		}
		if !strings.Contains(line, `"id":"`+want[0]+`"`) {
			continue
		}
		// The proxy may have read further than the runtime: the id must be
		// among those told.
		if told := h.told(); !slices.Contains(told, want[0]) {
			t.Errorf("the runtime read the tool use %s before OnTool was told it (told %q)", want[0], told)
		}
		want = want[1:]
	}
	// The upstream holds the end of the response until the tools are
	// told.
	for _, want := range []string{"toolu_1", "srvtoolu_2"} {
		select {
		case id := <-h.tool:
			if id != want {
				t.Errorf("OnTool told %q, want %q", id, want)
			}
		case <-time.After(bound):
			t.Fatalf("OnTool was not told %s before the end of the response", want)
		}
	}
	close(release)
	rest, err := io.ReadAll(br)
	if err != nil || !strings.HasSuffix(string(rest), eventMessageEnd) {
		t.Fatalf("the end of the stream: %q, %v", rest, err)
	}
	d := h.waitDone(t)
	if told := h.told(); strings.Join(told, ",") != "toolu_1,srvtoolu_2" {
		t.Errorf("OnTool told %q over the whole response, want each tool use once", told)
	}
	if usageString(d.usage) != rawUsageGenAI {
		t.Errorf("Done got %s, want %s", usageString(d.usage), rawUsageGenAI)
	}
	if tc := attrs(h.onlySpan(t))[contract.AttrResponseToolCalls].AsStringSlice(); strings.Join(tc, ",") != "Bash:toolu_1,web_search:srvtoolu_2" {
		t.Errorf("span tool calls = %q", tc)
	}
}

// TestDoneOnce: Done is called once, after the span ended, with the
// usage of the response, when the runtime is done with it.
func TestDoneOnce(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%t", stream), func(t *testing.T) {
			up := scripted(t, "", scriptedmodel.Step{Text: "done once", Usage: usage})
			h := start(t, up.srv.URL, Config{})
			res := h.post(t, "/v1/messages", messages(stream, "hi"))
			readAll(t, res)

			d := h.waitDone(t)
			if usageString(d.usage) != genai(usage) {
				t.Errorf("Done got %s, want %s", usageString(d.usage), genai(usage))
			}
			if d.ended != 1 {
				t.Errorf("Done was called with %d spans ended, want the call's span ended first", d.ended)
			}
			if err := h.close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if n := h.doneCount(); n != 1 {
				t.Errorf("Done called %d times, want once", n)
			}
			checkSpanUsage(t, h.onlySpan(t), genai(usage))
		})
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
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

// TestUpstreamUnreachable: the runtime gets a 502, the failure is
// counted, and Done gets an empty Usage; the span, ended when no retry
// comes, has an error and no usage.
func TestUpstreamUnreachable(t *testing.T) {
	h := start(t, "http://"+closedAddr(t), Config{})
	res := h.post(t, "/v1/messages", messages(true, "hi"))
	got := readAll(t, res)
	if res.StatusCode != http.StatusBadGateway || !strings.Contains(string(got), "model-wire proxy: upstream") {
		t.Errorf("status %d: %q, want 502 from the proxy", res.StatusCode, got)
	}
	if d := h.waitDone(t); usageString(d.usage) != noUsage {
		t.Errorf("Done got %s, want no usage", usageString(d.usage))
	}
	if st := h.proxy.Stats(); st != (Stats{Calls: 1, Failed: 1}) {
		t.Errorf("Stats = %+v, want one call, failed", st)
	}
	if err := h.close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := h.doneCount(); n != 1 {
		t.Errorf("Done called %d times, want once", n)
	}
	// The call waits for the runtime's retry; none comes.
	h.mw.EndParked()
	s := h.onlySpan(t)
	if s.Status().Code != codes.Error {
		t.Errorf("span status = %v, want error", s.Status().Code)
	}
	for k := range attrs(s) {
		if strings.HasPrefix(k, "gen_ai.usage.") {
			t.Errorf("a failed call has usage %s", k)
		}
	}
}

// TestUntraced: what Describe rejects goes through untraced and is
// counted as passed; so does a model call whose Decision has no context,
// and its Done is told of no usage.
func TestUntraced(t *testing.T) {
	t.Run("not a model call", func(t *testing.T) {
		up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"path":%q}`, r.URL.Path)
		}))
		var attributed atomic.Int64
		h := start(t, up.srv.URL, Config{Attribute: func(*http.Request, []byte) Decision {
			attributed.Add(1)
			return Decision{}
		}})
		count := messages(false, "how long is this?")
		res := h.post(t, "/v1/messages/count_tokens?beta=true", count)
		if got := readAll(t, res); string(got) != `{"path":"/v1/messages/count_tokens"}` {
			t.Errorf("count_tokens answered %q", got)
		}
		req, err := http.NewRequest(http.MethodGet, h.proxy.URL()+"/v1/models", nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, h.do(t, req)); string(got) != `{"path":"/v1/models"}` {
			t.Errorf("models answered %q", got)
		}
		reqs := up.seen()
		if len(reqs) != 2 ||
			reqs[0].Method != http.MethodPost || reqs[0].Path != "/v1/messages/count_tokens" || reqs[0].RawQuery != "beta=true" || !bytes.Equal(reqs[0].Body, count) ||
			reqs[1].Method != http.MethodGet || reqs[1].Path != "/v1/models" || len(reqs[1].Body) != 0 {
			t.Errorf("upstream got %+v", reqs)
		}
		if err := h.close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if n := len(h.rec.Ended()); n != 0 || attributed.Load() != 0 {
			t.Errorf("%d spans, Attribute called %d times, want none", n, attributed.Load())
		}
		if st := h.proxy.Stats(); st != (Stats{Passed: 2}) {
			t.Errorf("Stats = %+v, want two passed", st)
		}
	})
	t.Run("no context", func(t *testing.T) {
		up := scripted(t, "", scriptedmodel.Step{Usage: usage,
			ToolCalls: []scriptedmodel.ToolCall{{ID: "toolu_untraced", Name: "bash"}}})
		var h *harness
		h = start(t, up.srv.URL, Config{Attribute: func(*http.Request, []byte) Decision {
			return Decision{OnTool: h.onTool, Done: h.onDone}
		}})
		res := h.post(t, "/v1/messages", messages(true, "hi"))
		if got := readAll(t, res); !bytes.Equal(got, up.answered()) {
			t.Errorf("the runtime got\n%q\nthe upstream sent\n%q", got, up.answered())
		}
		if d := h.waitDone(t); usageString(d.usage) != noUsage {
			t.Errorf("Done got %s, want no usage", usageString(d.usage))
		}
		if err := h.close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if n, told := len(h.rec.Ended()), h.told(); n != 0 || len(told) != 0 || h.doneCount() != 1 {
			t.Errorf("%d spans, OnTool told %q, Done called %d times; want none, none, once", n, told, h.doneCount())
		}
		if st := h.proxy.Stats(); st != (Stats{Passed: 1}) {
			t.Errorf("Stats = %+v, want one passed", st)
		}
	})
}

// sized returns a Messages request body of exactly n bytes.
func sized(t *testing.T, n int) []byte {
	t.Helper()
	b := messages(false, "")
	if n < len(b) {
		t.Fatalf("no Messages body is %d bytes", n)
	}
	b = messages(false, strings.Repeat("x", n-len(b)))
	if len(b) != n {
		t.Fatalf("body of %d bytes, want %d", len(b), n)
	}
	return b
}

// TestOversized: a body over MaxBody goes upstream whole, untraced, and
// the adapter is told; one of MaxBody bytes is still traced.
func TestOversized(t *testing.T) {
	const max = 1 << 10
	for _, tc := range []struct {
		name    string
		size    int
		chunked bool
		traced  bool
	}{
		{"at MaxBody", max, false, true},
		{"one over", max + 1, false, false},
		{"4 KiB", 4 * max, false, false},
		{"4 KiB chunked", 4 * max, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := scripted(t, "", scriptedmodel.Step{Text: "big", Usage: usage})
			// mu guards oversized and described: the proxy's handlers write
			// them.
			var mu sync.Mutex
			var oversized []string
			described := 0
			h := start(t, up.srv.URL, Config{
				MaxBody: max,
				Oversized: func(r *http.Request) {
					mu.Lock()
					defer mu.Unlock()
					oversized = append(oversized, r.Method+" "+r.URL.Path)
				},
				Describe: func(r *http.Request, b []byte) (genaicall.Request, bool) {
					mu.Lock()
					described++
					mu.Unlock()
					return describe(r, b)
				},
			})
			body := sized(t, tc.size)
			var r io.Reader = bytes.NewReader(body)
			if tc.chunked {
				// No length: the request is sent chunked.
				r = io.MultiReader(r)
			}
			req, err := http.NewRequest(http.MethodPost, h.proxy.URL()+"/v1/messages", r)
			if err != nil {
				t.Fatal(err)
			}
			res := h.do(t, req)
			if got := readAll(t, res); res.StatusCode != http.StatusOK || !bytes.Equal(got, up.answered()) {
				t.Errorf("status %d: %q", res.StatusCode, got)
			}
			if in := up.only(t); !bytes.Equal(in.Body, body) {
				t.Errorf("upstream got %d bytes, want all %d", len(in.Body), len(body))
			}
			if err := h.close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			spans, st := len(h.modelSpans()), h.proxy.Stats()
			mu.Lock()
			defer mu.Unlock()
			if tc.traced {
				if spans != 1 || st != (Stats{Calls: 1}) || len(oversized) != 0 || described != 1 {
					t.Errorf("%d spans, Stats %+v, Oversized told %q, Describe called %d times; want a traced call",
						spans, st, oversized, described)
				}
				return
			}
			if spans != 0 || st != (Stats{Oversized: 1}) || strings.Join(oversized, ",") != "POST /v1/messages" || described != 0 {
				t.Errorf("%d spans, Stats %+v, Oversized told %q, Describe called %d times; want untraced, counted, told once",
					spans, st, oversized, described)
			}
		})
	}
}

// TestStreamCut: a stream the upstream cuts after message_start has no
// usage (what it would have cost is unknown) and no error status, and is
// marked closed early; Done is told of no usage either, as the span.
func TestStreamCut(t *testing.T) {
	up := scripted(t, "", scriptedmodel.Step{Text: "never finished", Usage: usage, CutAfter: 1})
	h := start(t, up.srv.URL, Config{})
	res := h.post(t, "/v1/messages", messages(true, "hi"))
	got, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err == nil {
		t.Error("the runtime read a cut stream to a clean end")
	}
	if want := up.answered(); !bytes.Equal(got, want) || !bytes.Contains(got, []byte("message_start")) {
		t.Errorf("the runtime got\n%q\nthe upstream sent\n%q", got, want)
	}
	d := h.waitDone(t)
	if err := h.close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s := h.onlySpan(t)
	a := attrs(s)
	for k, v := range a {
		if strings.HasPrefix(k, "gen_ai.usage.") {
			t.Errorf("a cut stream has %s = %s", k, v.Emit())
		}
	}
	if _, ok := a["error.type"]; ok || s.Status().Code != codes.Unset {
		t.Errorf("span status %v %q, error.type %q; want no error", s.Status().Code, s.Status().Description, a["error.type"].Emit())
	}
	if !a[contract.AttrResponseStreamClosedEarly].AsBool() {
		t.Errorf("span has no %s", contract.AttrResponseStreamClosedEarly)
	}
	if usageString(d.usage) != noUsage {
		t.Errorf("Done got %s for a cut stream whose span has no usage, want none", usageString(d.usage))
	}
	if st := h.proxy.Stats(); st != (Stats{Calls: 1}) {
		t.Errorf("Stats = %+v, want one call", st)
	}
}

// TestRuntimeHangsUp: when the runtime gives up on a traced call, before
// the response or in the middle of its stream, the upstream request is
// canceled too; the call has no usage.
func TestRuntimeHangsUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		// headers: the upstream starts the stream before it stalls.
		headers bool
	}{
		{"before the response", false},
		{"mid-stream", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			arrived, canceled, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
			up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.headers {
					w.Header().Set("Content-Type", "text/event-stream")
					_, _ = io.WriteString(w, eventMessageStart)
					http.NewResponseController(w).Flush()
				}
				close(arrived)
				select {
				case <-r.Context().Done():
					close(canceled)
				case <-release:
				}
			}))
			defer close(release)
			h := start(t, up.srv.URL, Config{})

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.proxy.URL()+"/v1/messages", bytes.NewReader(messages(tc.headers, "hi")))
			if err != nil {
				t.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() {
				res, err := h.client.Do(req)
				if err == nil {
					_, err = io.ReadAll(res.Body)
					_ = res.Body.Close()
				}
				errc <- err
			}()
			select {
			case <-arrived:
			case <-time.After(bound):
				t.Fatal("the request did not reach the upstream")
			}
			cancel()
			select {
			case <-canceled:
			case <-time.After(bound):
				t.Fatal("the runtime hung up and the upstream request went on")
			}
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Errorf("the runtime's request ended with %v, want canceled", err)
			}
			if d := h.waitDone(t); usageString(d.usage) != noUsage {
				t.Errorf("Done got %s, want no usage", usageString(d.usage))
			}
		})
	}
}

// TestStartValidates: Start refuses what it cannot run and says why.
func TestStartValidates(t *testing.T) {
	mw := genaicall.New(genaicall.Config{Propagators: propagation.NewCompositeTextMapPropagator()}.WithDefaults(),
		genaicall.Scope{Name: "test", Version: "0", Provider: "anthropic"})
	untraced := func(*http.Request, []byte) Decision { return Decision{} }
	valid := func() Config {
		return Config{Upstream: &url.URL{Scheme: "https", Host: "api.anthropic.com"}, Middleware: mw, Describe: describe, Attribute: untraced}
	}
	parse := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	for _, tc := range []struct {
		name string
		cfg  func(*Config)
		want string
	}{
		{"nil upstream", func(c *Config) { c.Upstream = nil }, "upstream must be an absolute URL"},
		{"relative upstream", func(c *Config) { c.Upstream = parse("/v1") }, "upstream must be an absolute URL"},
		{"no host", func(c *Config) { c.Upstream = parse("http:///v1") }, "upstream must be an absolute URL"},
		{"ftp upstream", func(c *Config) { c.Upstream = parse("ftp://example.com/") }, `upstream scheme "ftp" is not http or https`},
		{"no middleware", func(c *Config) { c.Middleware = nil }, "Middleware, Describe and Attribute are required"},
		{"no describe", func(c *Config) { c.Describe = nil }, "Middleware, Describe and Attribute are required"},
		{"no attribute", func(c *Config) { c.Attribute = nil }, "Middleware, Describe and Attribute are required"},
		{"bad listen", func(c *Config) { c.Listen = "127.0.0.1:http-alt-nonexistent" }, "wireproxy: listen:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := valid()
			tc.cfg(&cfg)
			p, err := Start(cfg)
			if err == nil {
				_ = p.Close(context.Background())
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "wireproxy: ") {
				t.Errorf("Start: %q, want it to name the package and say %q", err, tc.want)
			}
		})
	}
	t.Run("valid", func(t *testing.T) {
		p, err := Start(valid())
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		if !strings.HasPrefix(p.URL(), "http://127.0.0.1:") {
			t.Errorf("URL = %q, want a loopback port", p.URL())
		}
		if err := p.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
}

// refused reports whether nothing accepts connections at the proxy's
// address.
func refused(p *Proxy) bool {
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(p.URL(), "http://"), bound)
	if err == nil {
		_ = c.Close()
		return false
	}
	return true
}

// TestClose: Close returns, the port stops accepting, and the proxy's
// own connections to the upstream are closed; with a stream in flight,
// Close returns when its context ends and the stream's upstream request
// is canceled.
func TestClose(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		closed := make(chan struct{})
		var once sync.Once
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, `{"data":[]}`)
		}))
		srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed {
				once.Do(func() { close(closed) })
			}
		}
		srv.Start()
		t.Cleanup(srv.Close)
		h := start(t, srv.URL, Config{})
		req, err := http.NewRequest(http.MethodGet, h.proxy.URL()+"/v1/models", nil)
		if err != nil {
			t.Fatal(err)
		}
		readAll(t, h.do(t, req))
		if refused(h.proxy) {
			t.Fatal("the proxy refused connections before Close")
		}
		if err := h.close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if !refused(h.proxy) {
			t.Error("the proxy accepts connections after Close")
		}
		select {
		case <-closed:
		case <-time.After(bound):
			t.Error("the proxy's idle connection to the upstream outlived Close")
		}
	})
	t.Run("stream in flight", func(t *testing.T) {
		arrived, canceled, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
		up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, eventMessageStart)
			http.NewResponseController(w).Flush()
			close(arrived)
			select {
			case <-r.Context().Done():
				close(canceled)
			case <-release:
			}
		}))
		defer close(release)
		h := start(t, up.srv.URL, Config{})
		res := h.post(t, "/v1/messages", messages(true, "hi"))
		defer res.Body.Close()
		select {
		case <-arrived:
		case <-time.After(bound):
			t.Fatal("the request did not reach the upstream")
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := h.proxy.Close(ctx); !errors.Is(err, context.Canceled) {
			t.Errorf("Close with a stream in flight and its context done: %v, want context.Canceled", err)
		}
		if !refused(h.proxy) {
			t.Error("the proxy accepts connections after Close")
		}
		select {
		case <-canceled:
		case <-time.After(bound):
			t.Fatal("the stream's upstream request outlived Close")
		}
		if _, err := io.ReadAll(res.Body); err == nil {
			t.Error("the runtime read a stream cut by Close to a clean end")
		}
		if d := h.waitDone(t); usageString(d.usage) != noUsage {
			t.Errorf("Done got %s, want no usage", usageString(d.usage))
		}
	})
}

// TestOwnerContextDoesNotCancel: the Decision's context parents the span
// only. A caller that stopped waiting (its context, which the owner's
// derives from, done) does not cancel the runtime's request upstream.
func TestOwnerContextDoesNotCancel(t *testing.T) {
	arrived, release := make(chan struct{}), make(chan struct{})
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, eventMessageStart)
		http.NewResponseController(w).Flush()
		close(arrived)
		select {
		case <-r.Context().Done():
			return
		case <-release:
		}
		_, _ = io.WriteString(w, eventMessageEnd)
	}))
	owner, cancel := context.WithCancel(context.Background())
	var h *harness
	h = start(t, up.srv.URL, Config{Attribute: func(*http.Request, []byte) Decision {
		d := h.decision()
		d.Ctx = trace.ContextWithSpanContext(owner, h.parent)
		return d
	}})
	res := h.post(t, "/v1/messages", messages(true, "hi"))
	<-arrived
	cancel()
	close(release)
	body := readAll(t, res)
	if !bytes.Contains(body, []byte("message_stop")) {
		t.Fatalf("the stream ended early after the owner's context was done: %q", body)
	}
	if d := h.waitDone(t); d.usage.Output == nil {
		t.Errorf("Done got no usage: %+v", d.usage)
	}
}

// fakeTimers records the timers genaicall schedules, to fire them by hand.
type fakeTimers struct {
	mu     sync.Mutex
	timers []fakeTimer
}

type fakeTimer struct {
	d time.Duration
	f func()
}

type stopper struct{}

func (stopper) Stop() bool { return true }

func (ft *fakeTimers) afterFunc(d time.Duration, f func()) genaicall.Stopper {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	ft.timers = append(ft.timers, fakeTimer{d, f})
	return stopper{}
}

// fire runs the timers of duration d scheduled so far and reports how
// many there were.
func (ft *fakeTimers) fire(d time.Duration) int {
	ft.mu.Lock()
	var fs []func()
	for _, t := range ft.timers {
		if t.d == d {
			fs = append(fs, t.f)
		}
	}
	ft.mu.Unlock()
	for _, f := range fs {
		f()
	}
	return len(fs)
}

// retryRig is a Proxy whose upstream answers the first n requests with
// 529 overloaded and then a streamed message, with genaicall's timers
// fired by hand.
type retryRig struct {
	ft     fakeTimers
	rec    *tracetest.SpanRecorder
	mw     *genaicall.Middleware
	proxy  *Proxy
	client *http.Client
}

func newRetryRig(t *testing.T, overloaded int) *retryRig {
	t.Helper()
	r := &retryRig{rec: tracetest.NewSpanRecorder()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	r.mw = genaicall.New(genaicall.Config{
		TracerProvider: tp,
		Propagators:    propagation.NewCompositeTextMapPropagator(),
		AfterFunc:      r.ft.afterFunc,
	}.WithDefaults(), genaicall.Scope{Name: "test", Version: "0", Provider: "anthropic"})
	t.Cleanup(r.mw.EndParked)
	ctx, parent := tp.Tracer("test").Start(context.Background(), "turn")
	t.Cleanup(func() { parent.End() })
	model := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{{Text: "ok", Usage: usage}}})
	var mu sync.Mutex
	n := 0
	up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		n++
		fail := n <= overloaded
		mu.Unlock()
		if fail {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(529)
			_, _ = io.WriteString(w, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`)
			return
		}
		model.Handler().ServeHTTP(w, req)
	}))
	u, _ := url.Parse(up.srv.URL)
	var err error
	r.proxy, err = Start(Config{Upstream: u, Middleware: r.mw, Describe: describe,
		Attribute: func(*http.Request, []byte) Decision { return Decision{Ctx: ctx} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.proxy.Close(context.Background()) })
	r.client = &http.Client{Transport: &http.Transport{}}
	t.Cleanup(r.client.CloseIdleConnections)
	return r
}

// send posts the same streamed request as the runtime's attempt (its
// x-stainless-retry-count, as the Stainless SDKs send it), reads the
// answer to its end and returns its status.
func (r *retryRig) send(t *testing.T, attempt int) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, r.proxy.URL()+"/v1/messages", bytes.NewReader(messages(true, "hi")))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Stainless-Retry-Count", strconv.Itoa(attempt))
	res, err := r.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res.StatusCode
}

// TestRetryIsTheSameCall: a 529 the runtime read to its end, and the
// runtime's retries of the same request, are one model call: its span
// ends once, with the retry's usage and the resend count, however long
// after the first answer the retry comes within the hold, and although
// the runtime's first request (its context) ended long before. Whether
// the runtime's SDK counts its attempts (x-stainless-retry-count 0, 1, 2)
// or the runtime retries from a loop of its own, each attempt a first one
// to its SDK (always 0: Claude Code 2.1.328 on a 529).
func TestRetryIsTheSameCall(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count func(attempt int) int
	}{
		{"SDK retries", func(attempt int) int { return attempt }},
		{"runtime's own retry loop", func(int) int { return 0 }},
	} {
		t.Run(tc.name, func(t *testing.T) { testRetryIsTheSameCall(t, tc.count) })
	}
}

func testRetryIsTheSameCall(t *testing.T, count func(attempt int) int) {
	r := newRetryRig(t, 2)
	for i, want := range []int{529, 529, http.StatusOK} {
		if got := r.send(t, count(i)); got != want {
			t.Fatalf("attempt %d: status %d, want %d", i, got, want)
		}
		if i < 2 {
			if n := len(r.rec.Ended()); n != 0 {
				t.Fatalf("attempt %d: %d spans ended while the call waits for its retry", i, n)
			}
		}
	}
	if n := r.ft.fire(genaicall.ContextGrace); n != 0 {
		t.Errorf("%d grace timers: the proxy's call follows the runtime's request context", n)
	}
	deadline := time.Now().Add(bound)
	for len(r.rec.Ended()) == 0 && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	// The holds of the two failed attempts were stopped when their retry
	// came; firing them by hand changes nothing.
	r.ft.fire(DefaultRetryHold)
	ended := r.rec.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d model-call spans, want 1 for the call and its retries", len(ended))
	}
	s := ended[0]
	if s.Status().Code == codes.Error {
		t.Errorf("the call whose retry succeeded has status %v", s.Status())
	}
	checkSpanUsage(t, s, genai(usage))
	if got := attrs(s)["http.request.resend_count"]; got.AsInt64() != 2 {
		t.Errorf("resend_count = %v, want 2", got.Emit())
	}
}

// TestRetryHoldEnds: a retryable answer no retry follows ends, when the
// hold passes (and not before), as a failed call without usage.
func TestRetryHoldEnds(t *testing.T) {
	r := newRetryRig(t, 1)
	if got := r.send(t, 0); got != 529 {
		t.Fatalf("status %d, want 529", got)
	}
	if n := len(r.rec.Ended()); n != 0 {
		t.Fatalf("%d spans ended before the hold passed", n)
	}
	if n := r.ft.fire(genaicall.ContextGrace); n != 0 {
		t.Errorf("%d grace timers: the proxy's call follows the runtime's request context", n)
	}
	if n := r.ft.fire(genaicall.DefaultRetryWindow); n != 0 {
		t.Errorf("%d retry-window timers, want only the hold", n)
	}
	if n := r.ft.fire(DefaultRetryHold); n != 1 {
		t.Fatalf("%d hold timers, want 1", n)
	}
	ended := r.rec.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans after the hold, want the call's", len(ended))
	}
	if s := ended[0]; s.Status().Code != codes.Error {
		t.Errorf("status %v, want error (529 is not billed)", s.Status())
	}
	for k := range attrs(ended[0]) {
		if strings.HasPrefix(k, "gen_ai.usage.") {
			t.Errorf("a failed call has usage %s", k)
		}
	}
}

// TestBaseAlias: the path each request reaches the upstream at, for an
// upstream with and without a base path, a runtime whose base URL is the
// proxy's with and without that path, Anthropic and OpenAI requests;
// UpstreamPath tells the same path.
func TestBaseAlias(t *testing.T) {
	cases := []struct {
		base, req string
		alias     bool
		want      string
	}{
		// OpenAI style, upstream https://api.openai.com/v1.
		{"/v1", "/chat/completions", true, "/v1/chat/completions"},    // baseURL <proxy>
		{"/v1", "/v1/chat/completions", true, "/v1/chat/completions"}, // baseURL <proxy>/v1
		{"/v1", "/v1/chat/completions", false, "/v1/v1/chat/completions"},
		{"/v1", "/responses", true, "/v1/responses"},
		{"/v1", "/v1/responses", true, "/v1/responses"},
		{"/v1", "/v1/models", true, "/v1/models"},
		{"/v1", "/v1", true, "/v1/"},
		{"/v1", "/", true, "/v1/"},
		// Only a whole segment is the base.
		{"/v1", "/v10/chat/completions", true, "/v1/v10/chat/completions"},
		{"/v1", "/v1beta/models", true, "/v1/v1beta/models"},
		// Only one copy is dropped.
		{"/v1", "/v1/v1/chat/completions", true, "/v1/v1/chat/completions"},
		// A base with a trailing slash, and a longer one (a gateway's).
		{"/v1/", "/v1/chat/completions", true, "/v1/chat/completions"},
		{"/v1/", "/chat/completions", true, "/v1/chat/completions"},
		{"/api/v1", "/api/v1/chat/completions", true, "/api/v1/chat/completions"},
		{"/api/v1", "/chat/completions", true, "/api/v1/chat/completions"},
		{"/api/v1", "/v1/chat/completions", true, "/api/v1/v1/chat/completions"},
		{"/api/v1", "/api/chat/completions", true, "/api/v1/api/chat/completions"},
		// Anthropic style, upstream https://api.anthropic.com/v1 (what
		// @ai-sdk/anthropic's default baseURL names).
		{"/v1", "/messages", true, "/v1/messages"},
		{"/v1", "/v1/messages", true, "/v1/messages"},
		{"/v1", "/v1/messages/count_tokens", true, "/v1/messages/count_tokens"},
		// Anthropic style, upstream https://api.anthropic.com: no base,
		// nothing dropped, with the alias or without.
		{"", "/v1/messages", true, "/v1/messages"},
		{"", "/v1/messages", false, "/v1/messages"},
		{"", "/messages", true, "/messages"},
		{"/", "/v1/messages", true, "/v1/messages"},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s+%s,alias=%t", c.base, c.req, c.alias), func(t *testing.T) {
			if got := UpstreamPath(c.base, c.req, c.alias); got != c.want {
				t.Errorf("UpstreamPath(%q, %q, %t) = %q, want %q", c.base, c.req, c.alias, got, c.want)
			}
			up := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{}`)
			}))
			h := start(t, up.srv.URL+c.base, Config{BaseAlias: c.alias,
				Attribute: func(*http.Request, []byte) Decision { return Decision{} }})
			readAll(t, h.post(t, c.req+"?q=1", messages(false, "hi")))
			if got := up.only(t); got.Path != c.want || got.RawQuery != "q=1" {
				t.Errorf("upstream got %s?%s, want %s?q=1", got.Path, got.RawQuery, c.want)
			}
			if err := h.close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
		})
	}
}
