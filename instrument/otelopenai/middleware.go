package otelopenai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/openai/openai-go/v3/option"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/instrument/internal/genaicall"
	"github.com/agentledger/agentledger/internal/contract"
)

// Attribute keys this package records beyond the contract's.
const (
	attrResponseID          = "gen_ai.response.id"
	attrRequestMaxTokens    = "gen_ai.request.max_tokens"
	attrRequestTemperature  = "gen_ai.request.temperature"
	attrRequestTopP         = "gen_ai.request.top_p"
	attrFinishReasons       = "gen_ai.response.finish_reasons"
	attrResponseToolCalls   = "gen_ai.response.tool_calls"
	attrStreamClosedEarly   = "gen_ai.response.stream_closed_early"
	attrInputMessages       = "gen_ai.input.messages"
	attrOutputMessages      = "gen_ai.output.messages"
	attrTokenType           = "gen_ai.token.type"
	attrServerAddress       = "server.address"
	attrServerPort          = "server.port"
	attrErrorType           = "error.type"
	attrHTTPStatusCode      = "http.response.status_code"
	attrResendCount         = "http.request.resend_count"
	providerOpenAI          = "openai"
	headerRetryCount        = "X-Stainless-Retry-Count"
	eventAttempt            = "attempt"
	errTypeStreamClosed     = "stream_error"
	errTypeRetriesAbandoned = "retry_abandoned"
)

// Middleware returns an OpenAI SDK middleware that traces chat
// completions, responses and embeddings calls; see the package doc. Other
// requests pass through untouched.
func Middleware(opts ...Option) option.Middleware {
	return newMiddleware(newConfig(opts)).handle
}

type middleware struct {
	cfg      genaicall.Config
	tracer   trace.Tracer
	tokens   metric.Int64Histogram
	duration metric.Float64Histogram
	seed     maphash.Seed

	// mu guards pending: calls whose last attempt failed in a way the SDK
	// retries, waiting for their next attempt.
	mu      sync.Mutex
	pending map[callKey][]parked
}

// callKey ties the attempts of one logical call together: the caller's
// span, the operation and the request body are the same on every attempt.
type callKey struct {
	trace trace.TraceID
	span  trace.SpanID
	op    operation
	body  uint64
}

func newMiddleware(cfg genaicall.Config) *middleware {
	m := &middleware{
		cfg:     cfg,
		tracer:  cfg.TracerProvider.Tracer(ScopeName, trace.WithInstrumentationVersion(Version())),
		seed:    maphash.MakeSeed(),
		pending: make(map[callKey][]parked),
	}
	meter := cfg.MeterProvider.Meter(ScopeName, metric.WithInstrumentationVersion(Version()))
	// Instrument creation only fails on invalid names; the no-op
	// instruments returned alongside the error are still usable.
	m.tokens, _ = meter.Int64Histogram("gen_ai.client.token.usage",
		metric.WithDescription("Number of input and output tokens used."),
		metric.WithUnit("{token}"),
		metric.WithExplicitBucketBoundaries(1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864))
	m.duration, _ = meter.Float64Histogram("gen_ai.client.operation.duration",
		metric.WithDescription("GenAI operation duration."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92))
	return m
}

// requestInfo is what the middleware reads from a request body.
type requestInfo struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages            json.RawMessage `json:"messages"`
	Input               json.RawMessage `json:"input"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxOutputTokens     *int64          `json:"max_output_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
}

func (m *middleware) handle(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	op, ok := classify(req)
	if !ok || req.Body == nil || req.Body == http.NoBody {
		return next(req)
	}
	body, err := readBody(req)
	if err != nil {
		return nil, fmt.Errorf("otelopenai: reading request body: %w", err)
	}
	var info requestInfo
	_ = json.Unmarshal(body, &info)
	key := callKey{op: op, body: maphash.Bytes(m.seed, body)}
	if sc := trace.SpanContextFromContext(req.Context()); sc.IsValid() {
		key.trace, key.span = sc.TraceID(), sc.SpanID()
	}

	injected := false
	if op == opChat && info.Stream && (info.StreamOptions == nil || info.StreamOptions.IncludeUsage == nil || !*info.StreamOptions.IncludeUsage) {
		if nb, err := withIncludeUsage(body); err == nil {
			setBody(req, nb)
			injected = true
		}
	}

	resend := 0
	hdr := req.Header.Get(headerRetryCount)
	if hdr != "" {
		resend, _ = strconv.Atoi(hdr)
	}
	var c *call
	if hdr == "" || resend > 0 {
		c = m.take(key)
	} else if old := m.take(key); old != nil {
		// A first attempt of the same request: the old call's last
		// failure was final after all.
		old.endParked()
	}
	if c == nil {
		c = m.start(req, op, info)
	}

	ctx := trace.ContextWithSpan(req.Context(), c.span)
	req = req.WithContext(ctx)
	m.cfg.Propagators.Inject(ctx, propagation.HeaderCarrier(req.Header))

	res, err := next(req)
	now := time.Now()
	if err != nil {
		c.attempt(resend, now, 0, errorType(err), err)
		m.park(key, c, ctx)
		return res, err
	}
	if res.StatusCode >= 400 {
		typ := strconv.Itoa(res.StatusCode)
		c.attempt(resend, now, res.StatusCode, typ, fmt.Errorf("HTTP %d", res.StatusCode))
		res.Body = genaicall.NewErrorBody(res.Body, func(read bool) {
			if read {
				c.end(time.Now(), nil, false)
			} else {
				m.park(key, c, ctx)
			}
		})
		return res, nil
	}
	c.attempt(resend, now, res.StatusCode, "", nil)
	c.clearError()
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		res.Body = genaicall.NewSSEBody(res.Body, func(data []byte) (bool, bool) {
			return op.parseEvent(data, &c.res, injected, c.m.cfg.CaptureContent)
		}, func(err error, early bool) {
			c.end(time.Now(), err, early)
		})
	} else {
		res.Body = genaicall.NewPlainBody(res.Body, func(b []byte, complete bool, err error) {
			if b != nil && (complete || err == nil) {
				op.parseResponse(b, &c.res, c.m.cfg.CaptureContent)
			}
			c.end(time.Now(), err, !complete && err == nil && !c.res.parsed)
		})
	}
	return res, nil
}

// readBody returns the request body and leaves req with a body that reads
// the same bytes.
func readBody(req *http.Request) ([]byte, error) {
	if req.GetBody != nil {
		rc, err := req.GetBody()
		if err == nil {
			defer rc.Close()
			return io.ReadAll(rc)
		}
	}
	b, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	setBody(req, b)
	return b, nil
}

func setBody(req *http.Request, b []byte) {
	req.Body = io.NopCloser(bytes.NewReader(b))
	req.ContentLength = int64(len(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
}

// withIncludeUsage returns body with stream_options.include_usage = true.
func withIncludeUsage(body []byte) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, err
	}
	so := map[string]json.RawMessage{}
	if raw, ok := fields["stream_options"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &so); err != nil {
			return nil, err
		}
	}
	so["include_usage"] = json.RawMessage("true")
	raw, err := json.Marshal(so)
	if err != nil {
		return nil, err
	}
	fields["stream_options"] = raw
	return json.Marshal(fields)
}

// errorType names a transport error for error.type, with low cardinality.
func errorType(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return fmt.Sprintf("%T", err)
}

// start begins the span of a new logical call.
func (m *middleware) start(req *http.Request, op operation, info requestInfo) *call {
	attrs := []attribute.KeyValue{
		attribute.String(contract.AttrOperationName, op.name()),
		attribute.String(contract.AttrProviderName, providerOpenAI),
	}
	if info.Model != "" {
		attrs = append(attrs, attribute.String(contract.AttrRequestModel, info.Model))
	}
	var maxTokens *int64
	for _, v := range []*int64{info.MaxCompletionTokens, info.MaxTokens, info.MaxOutputTokens} {
		if v != nil {
			maxTokens = v
			break
		}
	}
	if maxTokens != nil {
		attrs = append(attrs, attribute.Int64(attrRequestMaxTokens, *maxTokens))
	}
	if info.Temperature != nil {
		attrs = append(attrs, attribute.Float64(attrRequestTemperature, *info.Temperature))
	}
	if info.TopP != nil {
		attrs = append(attrs, attribute.Float64(attrRequestTopP, *info.TopP))
	}
	host := req.URL.Hostname()
	port := req.URL.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[req.URL.Scheme]
	}
	if host != "" {
		attrs = append(attrs, attribute.String(attrServerAddress, host))
	}
	p, perr := strconv.Atoi(port)
	if perr == nil {
		attrs = append(attrs, attribute.Int(attrServerPort, p))
	}
	if m.cfg.CaptureContent {
		in := info.Messages
		if len(in) == 0 {
			in = info.Input
		}
		if len(in) > 0 {
			attrs = append(attrs, attribute.String(attrInputMessages, string(in)))
		}
	}
	name := op.name()
	if info.Model != "" {
		name += " " + info.Model
	}
	start := time.Now()
	_, span := m.tracer.Start(req.Context(), name,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(start),
		trace.WithAttributes(attrs...))
	return &call{m: m, span: span, op: op, start: start, requestModel: info.Model, server: host, port: p}
}

// parked is a call waiting for its next attempt; gen tells its parkings
// apart, so that a stale timer of an earlier parking cannot end it.
type parked struct {
	c   *call
	gen uint64
}

// ctxGrace is how long a parked call outlives the end of its attempt's
// context. The SDKs cancel an attempt's own timeout context right before
// they start the next attempt, so the end of that context alone does not
// mean the caller gave up; when it did, no attempt comes within the grace.
const ctxGrace = time.Second

// park keeps c waiting for the SDK's next attempt, ending it at its last
// attempt's end if none comes: when the retry window passes, or shortly
// after the attempt's context ends.
func (m *middleware) park(key callKey, c *call, ctx context.Context) {
	c.mu.Lock()
	c.parkGen++
	gen := c.parkGen
	c.mu.Unlock()
	m.mu.Lock()
	m.pending[key] = append(m.pending[key], parked{c: c, gen: gen})
	m.mu.Unlock()
	expire := func() {
		if m.remove(key, c, gen) {
			c.endParked()
		}
	}
	timer := m.cfg.AfterFunc(m.cfg.RetryWindow, expire)
	stopCtx := context.AfterFunc(ctx, func() {
		g := m.cfg.AfterFunc(ctxGrace, expire)
		c.mu.Lock()
		c.timers = append(c.timers, g)
		c.mu.Unlock()
	})
	c.mu.Lock()
	c.timers = append(c.timers, timer)
	c.stopCtx = append(c.stopCtx, stopCtx)
	c.mu.Unlock()
}

// take removes and returns the oldest call parked under key, if any.
func (m *middleware) take(key callKey) *call {
	m.mu.Lock()
	ps := m.pending[key]
	if len(ps) == 0 {
		m.mu.Unlock()
		return nil
	}
	c := ps[0].c
	if len(ps) == 1 {
		delete(m.pending, key)
	} else {
		m.pending[key] = ps[1:]
	}
	m.mu.Unlock()
	c.unpark()
	return c
}

// remove removes c's parking gen from the calls parked under key and
// reports whether it was there.
func (m *middleware) remove(key callKey, c *call, gen uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	ps := m.pending[key]
	for i, p := range ps {
		if p.c == c && p.gen == gen {
			ps = append(ps[:i:i], ps[i+1:]...)
			if len(ps) == 0 {
				delete(m.pending, key)
			} else {
				m.pending[key] = ps
			}
			return true
		}
	}
	return false
}
