package genaicall

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
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/parked"
	"github.com/agentledger/agentledger/instrument/internal/unrecorded"
)

// Attribute keys recorded beyond the contract's: the registry's from the
// semconv package, ours from contract.
const (
	attrResponseID         = string(semconv.GenAIResponseIDKey)
	attrRequestMaxTokens   = string(semconv.GenAIRequestMaxTokensKey)
	attrRequestTemperature = string(semconv.GenAIRequestTemperatureKey)
	attrRequestTopP        = string(semconv.GenAIRequestTopPKey)
	attrFinishReasons      = string(semconv.GenAIResponseFinishReasonsKey)
	attrResponseToolCalls  = contract.AttrResponseToolCalls
	attrStreamClosedEarly  = contract.AttrResponseStreamClosedEarly
	attrEnding             = contract.AttrResponseEnding
	attrInputMessages      = string(semconv.GenAIInputMessagesKey)
	attrOutputMessages     = string(semconv.GenAIOutputMessagesKey)
	attrTokenType          = string(semconv.GenAITokenTypeKey)
	attrServerAddress      = string(semconv.ServerAddressKey)
	attrServerPort         = string(semconv.ServerPortKey)
	attrErrorType          = string(semconv.ErrorTypeKey)
	attrHTTPStatusCode     = string(semconv.HTTPResponseStatusCodeKey)
	attrResendCount        = string(semconv.HTTPRequestResendCountKey)
	// headerRetryCount is the attempt number the Stainless-generated SDKs
	// (OpenAI's and Anthropic's) send with every request.
	headerRetryCount = "X-Stainless-Retry-Count"
	eventAttempt     = "attempt"
)

// Scope names the wrapper a Middleware traces for.
type Scope struct {
	// Name is the instrumentation scope: the wrapper's import path.
	Name string
	// Version is the wrapper's version.
	Version string
	// Provider is gen_ai.provider.name.
	Provider string
}

// Request is what a wrapper read from the body of a request it traces.
type Request struct {
	// Endpoint tells the wrapper's endpoints apart; only attempts to the
	// same endpoint are tied into one call.
	Endpoint int
	// Operation is gen_ai.operation.name.
	Operation string
	// Model is gen_ai.request.model; empty when the body has none.
	Model string
	// Stream is set when the request asks for a streamed response:
	// gen_ai.request.stream = true.
	Stream bool
	// MaxTokens, Temperature and TopP are the request parameters of the
	// same names; nil when the body has none.
	MaxTokens         *int64
	Temperature, TopP *float64
	// Input is the request's messages, recorded as gen_ai.input.messages
	// when content is captured.
	Input json.RawMessage
	// Body, when not nil, is sent upstream instead of the caller's body.
	// Attempts are still tied together by the caller's body.
	Body []byte
	// Parser reads the response.
	Parser Parser
	// RetryHold, when positive, is how long an attempt answered with a
	// retryable status (IsRetryable) or failed in transport is held open
	// for a retry of the same request, whatever the caller did with the
	// answer's body and its context; then the call ends as failed. A
	// proxy sets it: it reads every body itself, and its caller's
	// context ends with each request, before the caller's SDK retries.
	RetryHold time.Duration
	// OnEnd, when set, is called once the call this attempt belongs to
	// has ended (its span too), with its ending and the usage its span
	// carries: empty unless the ending's bill is known.
	OnEnd func(Ending, Usage)
}

// IsRetryable reports whether an answer with status code is one the
// providers' SDKs retry: 408, 409, 429, any 5xx (Anthropic's 529
// overloaded among them).
func IsRetryable(status int) bool {
	switch {
	case status == http.StatusRequestTimeout, status == http.StatusConflict, status == http.StatusTooManyRequests:
		return true
	}
	return status >= 500 && status <= 599
}

// Parser reads a traced call's response into its Result. Its methods are
// called under the body watcher's lock, never concurrently.
type Parser interface {
	// ParseResponse reads a whole non-streamed response body.
	ParseResponse(body []byte, r *Result, capture bool)
	// ParseEvent reads the data of one server-sent event. It reports
	// whether the caller gets the event and whether it ends the stream.
	ParseEvent(data []byte, r *Result, capture bool) (keep, terminal bool)
}

// Middleware traces the model calls a wrapper hands it: one span per
// logical call over all its attempts, with the GenAI client metrics.
type Middleware struct {
	cfg      Config
	scope    Scope
	provider string
	// pkg prefixes errors: the wrapper's package name.
	pkg string
	// tracer is that of the configured TracerProvider; nil when none was
	// given, and each call then uses the provider of the span in its
	// request's context (tracerFor).
	tracer trace.Tracer
	// holder lets the instrument SpanProcessor end the parked calls before
	// it flushes or shuts down (EndParked).
	holder   *parked.Holder
	tokens   metric.Int64Histogram
	duration metric.Float64Histogram
	seed     maphash.Seed

	// mu guards pending: calls whose last attempt failed in a way the SDK
	// retries, waiting for their next attempt.
	mu      sync.Mutex
	pending map[callKey][]parking
}

// callKey ties the attempts of one logical call together: the caller's
// span, the endpoint and the request body are the same on every attempt.
type callKey struct {
	trace    trace.TraceID
	span     trace.SpanID
	endpoint int
	body     uint64
}

// New returns a Middleware with cfg, which should have its defaults.
func New(cfg Config, s Scope) *Middleware {
	m := &Middleware{
		cfg:      cfg,
		scope:    s,
		provider: s.Provider,
		pkg:      path.Base(s.Name),
		seed:     maphash.MakeSeed(),
		pending:  make(map[callKey][]parking),
	}
	if cfg.TracerProvider != nil {
		m.tracer = cfg.TracerProvider.Tracer(s.Name, trace.WithInstrumentationVersion(s.Version))
	}
	m.holder = parked.NewHolder(m.EndParked)
	meter := cfg.MeterProvider.Meter(s.Name, metric.WithInstrumentationVersion(s.Version))
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

// Handle traces req, one attempt of a call the wrapper chose to trace,
// sent on by next; describe reads the request body. The response body the
// caller gets is watched so that the span ends when the caller is done
// with it.
func (m *Middleware) Handle(req *http.Request, next func(*http.Request) (*http.Response, error), describe func(body []byte) Request) (*http.Response, error) {
	body, err := readBody(req)
	if err != nil {
		return nil, fmt.Errorf("%s: reading request body: %w", m.pkg, err)
	}
	info := describe(body)
	key := callKey{endpoint: info.Endpoint, body: maphash.Bytes(m.seed, body)}
	if sc := trace.SpanContextFromContext(req.Context()); sc.IsValid() {
		key.trace, key.span = sc.TraceID(), sc.SpanID()
	}
	if info.Body != nil {
		setBody(req, info.Body)
	}

	resend := 0
	hdr := req.Header.Get(headerRetryCount)
	if hdr != "" {
		resend, _ = strconv.Atoi(hdr)
	}
	var c *call
	// A proxy's request identical to a held attempt is its retry whatever
	// its retry count says: Claude Code (2.1.328) retries an overloaded
	// (529) request from its own loop, each attempt a first one to its SDK
	// (x-stainless-retry-count: 0).
	if hdr == "" || resend > 0 || info.RetryHold > 0 {
		c = m.take(key)
	} else if old := m.take(key); old != nil {
		// A first attempt of the same request: the old call's last
		// failure was final after all.
		old.endParked()
	}
	if c == nil {
		c = m.start(req, info)
	}
	c.mu.Lock()
	c.onEnd = info.OnEnd
	c.mu.Unlock()

	ctx := trace.ContextWithSpan(req.Context(), c.span)
	req = req.WithContext(ctx)
	m.cfg.Propagators.Inject(ctx, propagation.HeaderCarrier(req.Header))

	res, err := next(req)
	now := time.Now()
	if err != nil {
		c.attempt(resend, now, 0, errorType(err), err, transportEnding(err))
		m.park(key, c, ctx, info.RetryHold)
		return res, err
	}
	if res.StatusCode >= 400 {
		typ := strconv.Itoa(res.StatusCode)
		c.attempt(resend, now, res.StatusCode, typ, fmt.Errorf("HTTP %d", res.StatusCode), EndingErrorStatus)
		if info.RetryHold > 0 && IsRetryable(res.StatusCode) {
			// A proxy's caller may retry whatever it read: the call
			// waits for it.
			m.park(key, c, ctx, info.RetryHold)
			return res, nil
		}
		res.Body = newErrorBody(res.Body, func(read bool) {
			if read {
				c.mu.Lock()
				err := c.err
				c.mu.Unlock()
				c.end(time.Now(), EndingErrorStatus, err)
			} else {
				m.park(key, c, ctx, 0)
			}
		})
		return res, nil
	}
	c.attempt(resend, now, res.StatusCode, "", nil, "")
	c.clearError()
	p, capture := info.Parser, m.cfg.CaptureContent
	if strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		res.Body = newSSEBody(res.Body, func(data []byte) (bool, bool) {
			keep, terminal := p.ParseEvent(data, &c.res, capture)
			c.res.Done = c.res.Done || terminal
			return keep, terminal
		}, func(err error, early bool) {
			c.end(time.Now(), bodyEnding(&c.res, err, early), err)
		})
	} else {
		res.Body = newPlainBody(res.Body, res.ContentLength, func(b []byte, complete bool, err error) {
			if b != nil && (complete || err == nil) {
				p.ParseResponse(b, &c.res, capture)
				// A body that parsed is whole: JSON cut short does not.
				c.res.Done = c.res.Parsed
			}
			c.end(time.Now(), bodyEnding(&c.res, err, !complete && err == nil), err)
		})
	}
	return res, nil
}

// readBody returns the request body and leaves req with a body that reads
// the same bytes. The body is copied once, into a buffer of its
// Content-Length when known: a long conversation is hundreds of
// kilobytes, which io.ReadAll would copy again at each of its growths.
func readBody(req *http.Request) ([]byte, error) {
	if h, ok := req.Body.(*heldBody); ok && h.Len() == len(h.b) {
		// Read already (SetBody): no second copy.
		return h.b, nil
	}
	if req.GetBody != nil {
		rc, err := req.GetBody()
		if err == nil {
			defer rc.Close()
			return readAll(rc, req.ContentLength)
		}
	}
	b, err := readAll(req.Body, req.ContentLength)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	setBody(req, b)
	return b, nil
}

// maxPresize bounds the buffer readAll makes up front from a declared
// length.
const maxPresize = 64 << 20

// readAll reads r to its end; size, when positive, is how much r is
// declared to hold.
func readAll(r io.Reader, size int64) ([]byte, error) {
	if size <= 0 || size > maxPresize {
		return io.ReadAll(r)
	}
	// bytes.MinRead of room beyond size lets ReadFrom see EOF without
	// growing the buffer.
	buf := bytes.NewBuffer(make([]byte, 0, size+bytes.MinRead))
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}

func setBody(req *http.Request, b []byte) { SetBody(req, b) }

// heldBody is a request body already read into b.
type heldBody struct {
	*bytes.Reader
	b []byte
}

func (*heldBody) Close() error { return nil }

// SetBody gives req the body b, which the caller has read already (a
// proxy that looked at it): Handle then takes b as the request's body
// without reading or copying it again.
func SetBody(req *http.Request, b []byte) {
	req.Body = &heldBody{bytes.NewReader(b), b}
	req.ContentLength = int64(len(b))
	req.GetBody = func() (io.ReadCloser, error) { return &heldBody{bytes.NewReader(b), b}, nil }
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
func (m *Middleware) start(req *http.Request, info Request) *call {
	attrs := []attribute.KeyValue{
		attribute.String(contract.AttrOperationName, info.Operation),
		attribute.String(contract.AttrProviderName, m.provider),
	}
	if info.Model != "" {
		attrs = append(attrs, attribute.String(contract.AttrRequestModel, info.Model))
	}
	if info.Stream {
		attrs = append(attrs, attribute.Bool(contract.AttrRequestStream, true))
	}
	if info.MaxTokens != nil {
		attrs = append(attrs, attribute.Int64(attrRequestMaxTokens, *info.MaxTokens))
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
	if m.cfg.CaptureContent && len(info.Input) > 0 {
		attrs = append(attrs, attribute.String(attrInputMessages, string(info.Input)))
	}
	name := info.Operation
	if info.Model != "" {
		name += " " + info.Model
	}
	start := time.Now()
	ctx := parked.ContextWithHolder(req.Context(), m.holder)
	_, span := m.tracerFor(ctx).Start(ctx, name,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(start),
		trace.WithAttributes(attrs...))
	// A call the sampler dropped is declared (contract v0.6 rule 3).
	unrecorded.Note(ctx, span, name)
	return &call{m: m, span: span, operation: info.Operation, start: start, requestModel: info.Model, server: host, port: p}
}

// tracerFor returns the tracer of the configured TracerProvider, or, when
// none was given, of the provider of the span in ctx (as otelhttp does),
// so that a call inside an invocation reaches that invocation's pipeline;
// the global provider when ctx has no span.
func (m *Middleware) tracerFor(ctx context.Context) trace.Tracer {
	if m.tracer != nil {
		return m.tracer
	}
	tp := otel.GetTracerProvider()
	if span := trace.SpanFromContext(ctx); span.SpanContext().IsValid() {
		tp = span.TracerProvider()
	}
	return tp.Tracer(m.scope.Name, trace.WithInstrumentationVersion(m.scope.Version))
}

// parking is a call waiting for its next attempt; gen tells its parkings
// apart, so that a stale timer of an earlier parking cannot end it.
type parking struct {
	c   *call
	gen uint64
}

// ContextGrace is how long a parked call outlives the end of its attempt's
// context. The SDKs cancel an attempt's own timeout context right before
// they start the next attempt, so the end of that context alone does not
// mean the caller gave up; when it did, no attempt comes within the grace.
const ContextGrace = time.Second

// park keeps c waiting for the SDK's next attempt, ending it at its last
// attempt's end if none comes: when the retry window passes, or shortly
// after the attempt's context ends. With a positive hold (a proxy's
// call, Request.RetryHold) it waits exactly hold, and the end of the
// attempt's context means nothing.
func (m *Middleware) park(key callKey, c *call, ctx context.Context, hold time.Duration) {
	c.mu.Lock()
	c.parkGen++
	gen := c.parkGen
	c.mu.Unlock()
	m.mu.Lock()
	m.pending[key] = append(m.pending[key], parking{c: c, gen: gen})
	m.mu.Unlock()
	expire := func() {
		if m.remove(key, c, gen) {
			c.endParked()
		}
	}
	if hold > 0 {
		timer := m.cfg.AfterFunc(hold, expire)
		c.mu.Lock()
		c.timers = append(c.timers, timer)
		c.mu.Unlock()
		return
	}
	timer := m.cfg.AfterFunc(m.cfg.RetryWindow, expire)
	stopCtx := context.AfterFunc(ctx, func() {
		g := m.cfg.AfterFunc(ContextGrace, expire)
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
func (m *Middleware) take(key callKey) *call {
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
func (m *Middleware) remove(key callKey, c *call, gen uint64) bool {
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

// EndParked ends every parked call now, at its last attempt's end, as if
// no retry came: the instrument SpanProcessor calls it before it flushes
// or shuts down its pipeline, so that a process exiting within the retry
// window still exports the calls. A retry that comes later starts a new
// span.
func (m *Middleware) EndParked() {
	m.mu.Lock()
	var calls []*call
	for _, ps := range m.pending {
		for _, p := range ps {
			calls = append(calls, p.c)
		}
	}
	clear(m.pending)
	m.mu.Unlock()
	for _, c := range calls {
		c.endParked()
	}
}

// Parked returns how many parkings of calls wait for a next attempt.
func (m *Middleware) Parked() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, ps := range m.pending {
		n += len(ps)
	}
	return n
}
