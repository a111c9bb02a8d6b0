package otelopencode

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/instrument"
)

// ErrNotStarted is returned by Prompt before Start: without the event
// stream the Client would miss the work the prompt leaves running.
var ErrNotStarted = errors.New("otelopencode: client not started (call Start)")

// ErrNoLedger is returned by Wait and Session of a Client made without
// WithLedger.
var ErrNoLedger = errors.New("otelopencode: no ledger (use WithLedger)")

// Client talks to an OpenCode server (opencode serve) and records every
// prompt as an invocation: the root span for the prompt call, a model-call
// span per assistant message, execute_tool spans, background jobs and the
// continuations their completion notifications start, from the server's
// event stream. Start it before prompting. A Client is safe for concurrent
// use.
type Client struct {
	base    *url.URL
	hc      *http.Client
	cfg     config
	tracker *instrument.Tracker
	m       *mapper

	events, ignored, malformed, reconnects, evicted, evictedJobs atomic.Int64
	mEvents, mMalformed, mReconnects, mEvicted, mEvictedJobs     metric.Int64Counter

	// mu guards cancel, done and connected.
	mu        sync.Mutex
	cancel    context.CancelFunc
	done      chan struct{}
	connected chan struct{}

	ids idSource
}

// New returns a Client for the OpenCode server at baseURL (for example
// http://127.0.0.1:4096) that sends its requests with hc
// (http.DefaultClient when nil). A Timeout on hc also cuts the event
// stream, which the Client then reconnects.
func New(baseURL string, hc *http.Client, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("otelopencode: base URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("otelopencode: base URL %q: scheme must be http or https", baseURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if hc == nil {
		hc = http.DefaultClient
	}
	cfg := newConfig(opts)
	tracker := instrument.NewTracker(instrument.WithTracerProvider(cfg.tracerProvider), instrument.WithPropagators(cfg.propagators))
	tracer := cfg.tracerProvider.Tracer(ScopeName, trace.WithInstrumentationVersion(Version()))
	c := &Client{
		base:      u,
		hc:        hc,
		cfg:       cfg,
		tracker:   tracker,
		m:         newMapper(tracer, tracker, cfg.maxSessions, cfg.maxJobs),
		connected: make(chan struct{}),
	}
	meter := cfg.meterProvider.Meter(ScopeName, metric.WithInstrumentationVersion(Version()))
	// Errors from instrument creation leave a usable no-op instrument.
	c.mEvents, _ = meter.Int64Counter("agentledger.opencode.events",
		metric.WithDescription("Events read from the OpenCode event stream."), metric.WithUnit("{event}"))
	c.mMalformed, _ = meter.Int64Counter("agentledger.opencode.events.malformed",
		metric.WithDescription("Events of the OpenCode event stream that could not be decoded (skipped)."), metric.WithUnit("{event}"))
	c.mReconnects, _ = meter.Int64Counter("agentledger.opencode.reconnects",
		metric.WithDescription("Reconnections of the OpenCode event stream."), metric.WithUnit("{reconnect}"))
	c.mEvicted, _ = meter.Int64Counter("agentledger.opencode.sessions.evicted",
		metric.WithDescription("Sessions that owed nothing, forgotten beyond the session limit (WithMaxSessions)."), metric.WithUnit("{session}"))
	c.mEvictedJobs, _ = meter.Int64Counter("agentledger.opencode.jobs.evicted",
		metric.WithDescription("Background jobs dropped from tracking beyond the job limit (WithMaxJobs); their followup is closed with reason cancelled."), metric.WithUnit("{job}"))
	c.m.onEvict = func() {
		c.evicted.Add(1)
		c.mEvicted.Add(context.Background(), 1)
	}
	c.m.onDropJob = func() {
		c.evictedJobs.Add(1)
		c.mEvictedJobs.Add(context.Background(), 1)
	}
	return c, nil
}

// Stats are counts of the Client's event stream.
type Stats struct {
	// Events is the number of events read.
	Events int64
	// Ignored counts events of types the mapping does not use.
	Ignored int64
	// Malformed counts events that could not be decoded; they are skipped.
	Malformed int64
	// Reconnects counts reconnections of the stream.
	Reconnects int64
	// EvictedSessions counts sessions that owed nothing and were
	// forgotten beyond WithMaxSessions.
	EvictedSessions int64
	// EvictedJobs counts background jobs dropped from tracking, with
	// their followup closed, beyond WithMaxJobs.
	EvictedJobs int64
}

// Stats returns the counts of the event stream so far.
func (c *Client) Stats() Stats {
	return Stats{
		Events:          c.events.Load(),
		Ignored:         c.ignored.Load(),
		Malformed:       c.malformed.Load(),
		Reconnects:      c.reconnects.Load(),
		EvictedSessions: c.evicted.Load(),
		EvictedJobs:     c.evictedJobs.Load(),
	}
}

// Start starts reading the server's event stream (GET /event) in a
// goroutine and returns once it is connected, or with ctx's error (the
// goroutine then keeps trying; stop it with Shutdown). The stream is
// reconnected whenever it breaks, and the sessions with open work are then
// read again from the server, so no completion is lost.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.done == nil {
		runCtx, cancel := context.WithCancel(context.Background())
		c.cancel = cancel
		c.done = make(chan struct{})
		go c.run(runCtx, c.done)
	}
	connected := c.connected
	c.mu.Unlock()
	select {
	case <-connected:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("otelopencode: connecting the event stream: %w", ctx.Err())
	}
}

// Shutdown stops reading the event stream and waits for the goroutine to
// end, or for ctx. Spans still open (jobs running, continuations) stay
// open: their invocations are not final.
func (c *Client) Shutdown(ctx context.Context) error {
	c.mu.Lock()
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("otelopencode: shutdown: %w", ctx.Err())
	}
}

func (c *Client) started() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done != nil
}

func (c *Client) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	wait := c.cfg.minBackoff
	everConnected := false
	for {
		connected, err := c.stream(ctx, everConnected)
		if ctx.Err() != nil {
			return
		}
		if connected {
			everConnected = true
			wait = c.cfg.minBackoff
		}
		if err != nil {
			c.cfg.logger.Warn("otelopencode: event stream ended", "error", err, "retry_in", wait)
		}
		c.reconnects.Add(1)
		c.mReconnects.Add(ctx, 1)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, c.cfg.maxBackoff)
	}
}

// stream reads the event stream until it ends; connected reports whether
// the server's server.connected event arrived.
func (c *Client) stream(ctx context.Context, reconnect bool) (connected bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url("/event"), nil)
	if err != nil {
		return false, fmt.Errorf("otelopencode: %w", err)
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("otelopencode: GET /event: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("otelopencode: GET /event: %s", resp.Status)
	}
	r := newSSEReader(resp.Body)
	for {
		data, err := r.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return connected, nil
			}
			return connected, err
		}
		c.events.Add(1)
		c.mEvents.Add(ctx, 1)
		if c.dispatch(data) == evServerConnected && !connected {
			connected = true
			if reconnect {
				// Whatever happened while disconnected is read back from
				// the server; events after this one only add to it.
				c.reconcile(ctx)
			}
			c.mu.Lock()
			select {
			case <-c.connected:
			default:
				close(c.connected)
			}
			c.mu.Unlock()
		}
	}
}

// dispatch decodes and applies one event and returns its type. A
// malformed event, or one whose handling fails, is counted, logged and
// skipped: the stream goes on.
func (c *Client) dispatch(data []byte) (typ string) {
	defer func() {
		if r := recover(); r != nil {
			c.malformed.Add(1)
			c.mMalformed.Add(context.Background(), 1)
			c.cfg.logger.Warn("otelopencode: event not handled", "panic", fmt.Sprint(r), "data", truncate(data))
		}
	}()
	ev, known, err := parseEvent(data)
	if err != nil {
		c.malformed.Add(1)
		c.mMalformed.Add(context.Background(), 1)
		c.cfg.logger.Warn("otelopencode: malformed event skipped", "error", err, "data", truncate(data))
		return ""
	}
	if !known {
		c.ignored.Add(1)
		return ev.Type
	}
	c.m.handle(ev)
	return ev.Type
}

func truncate(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// reconcile reads back from the server what a broken stream may have
// missed: the messages of the sessions that owe something, and of the
// tracked sessions the server reports running (a turn may have started
// while the stream was down), then marks the idle ones idle.
func (c *Client) reconcile(ctx context.Context) {
	running, err := c.running(ctx)
	if err != nil {
		c.cfg.logger.Warn("otelopencode: reading session status", "error", err)
	}
	sessions := c.m.toReconcile(running)
	if len(sessions) == 0 {
		return
	}
	for _, id := range sessions {
		msgs, err := c.messages(ctx, id)
		if err != nil {
			c.cfg.logger.Warn("otelopencode: reading session messages", "session", id, "error", err)
			continue
		}
		c.m.applyMessages(msgs)
	}
	// Read again: a session may have finished while its messages were read.
	if running, err = c.running(ctx); err != nil {
		c.cfg.logger.Warn("otelopencode: reading session status", "error", err)
		return
	}
	var idle []string
	for _, id := range sessions {
		if !running[id] {
			idle = append(idle, id)
		}
	}
	c.m.applyIdle(idle)
}

// running returns the sessions the server reports busy or retrying (GET
// /session/status lists only those that are not idle).
func (c *Client) running(ctx context.Context) (map[string]bool, error) {
	var status map[string]json.RawMessage
	if err := c.getJSON(ctx, "/session/status", &status); err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(status))
	for id, st := range status {
		if bytes.Contains(st, []byte(`"busy"`)) || bytes.Contains(st, []byte(`"retry"`)) {
			out[id] = true
		}
	}
	return out, nil
}

func (c *Client) messages(ctx context.Context, session string) ([]messageWithParts, error) {
	var msgs []messageWithParts
	if err := c.getJSON(ctx, "/session/"+url.PathEscape(session)+"/message", &msgs); err != nil {
		return nil, err
	}
	return msgs, nil
}

func (c *Client) url(path string) string {
	u := *c.base
	u.Path += path
	return u.String()
}

func (c *Client) getJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.url(path), nil)
	if err != nil {
		return fmt.Errorf("otelopencode: %w", err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("otelopencode: GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("otelopencode: GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("otelopencode: GET %s: %w", path, err)
	}
	return nil
}

func (c *Client) postJSON(ctx context.Context, path string, body any, v any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("otelopencode: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url(path), rd)
	if err != nil {
		return fmt.Errorf("otelopencode: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.cfg.propagators.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("otelopencode: POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("otelopencode: POST %s: %s: %s", path, resp.Status, bytes.TrimSpace(msg))
	}
	if v == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("otelopencode: POST %s: %w", path, err)
	}
	return nil
}

// CreateSession creates a session and returns its id. Give it a title:
// OpenCode generates a title for an untitled session with an extra model
// call that no event reports, so its usage cannot be counted.
func (c *Client) CreateSession(ctx context.Context, title string) (string, error) {
	body := map[string]any{}
	if title != "" {
		body["title"] = title
	}
	var s struct {
		ID string `json:"id"`
	}
	if err := c.postJSON(ctx, "/session", body, &s); err != nil {
		return "", err
	}
	if s.ID == "" {
		return "", errors.New("otelopencode: POST /session: no session id in the answer")
	}
	return s.ID, nil
}

// Abort aborts what runs in a session (POST /session/:id/abort). OpenCode
// then cancels the session's running turn and its background subagents;
// their promised notifications are closed as interrupted.
func (c *Client) Abort(ctx context.Context, session string) error {
	return c.postJSON(ctx, "/session/"+url.PathEscape(session)+"/abort", nil, nil)
}

// Prompt is one prompt: the body of POST /session/:id/message.
type Prompt struct {
	// Text is sent as one text part when Parts is empty.
	Text string
	// Parts are OpenCode message parts, sent as they are.
	Parts []any
	// Agent names the OpenCode agent (default: the session's).
	Agent string
	// ProviderID and ModelID choose the model (default: the agent's).
	ProviderID, ModelID string
}

// Result is OpenCode's answer to a prompt.
type Result struct {
	// InvocationID is the invocation the prompt started.
	InvocationID string
	// MessageID is the id of the assistant message OpenCode returned.
	MessageID string
	// Text is the text of that message's text parts.
	Text string
	// Raw is the answer's JSON body.
	Raw json.RawMessage
}

// Prompt sends a prompt to a session and waits for OpenCode's answer (POST
// /session/:id/message) as an invocation: its root span starts now and
// ends when the answer is here and the spans of the answer's model calls
// and tool calls have started. Background jobs the prompt launched go on;
// Wait tells when the invocation is final.
func (c *Client) Prompt(ctx context.Context, session string, p Prompt) (*Result, error) {
	if !c.started() {
		return nil, ErrNotStarted
	}
	raw, err := json.Marshal(promptBody(p))
	if err != nil {
		return nil, fmt.Errorf("otelopencode: %w", err)
	}
	var res *Result
	_, err = c.invoke(ctx, session, raw, func(ctx context.Context, body []byte) ([]byte, error) {
		var out json.RawMessage
		if err := c.postJSON(ctx, "/session/"+url.PathEscape(session)+"/message", json.RawMessage(body), &out); err != nil {
			return nil, err
		}
		return out, nil
	}, func(id string, answer []byte) {
		res = &Result{InvocationID: id, Raw: answer}
		var mp messageWithParts
		if json.Unmarshal(answer, &mp) == nil {
			res.MessageID = mp.Info.ID
			for _, pt := range mp.Parts {
				if pt.Type == "text" {
					res.Text += pt.Text
				}
			}
		}
	})
	return res, err
}

// PromptAsync sends a prompt without waiting for the answer (POST
// /session/:id/prompt_async) as an invocation and returns its id. The
// caller gets OpenCode's answer from the session later, so the root span
// ends when the session is first idle after a turn answered the prompt;
// work left running after that is after the result, as with Prompt.
func (c *Client) PromptAsync(ctx context.Context, session string, p Prompt) (string, error) {
	if !c.started() {
		return "", ErrNotStarted
	}
	body := promptBody(p)
	msgID := c.ids.next(time.Now(), c.m.nextAfter(session))
	body["messageID"] = msgID
	agent := c.cfg.agent
	if p.Agent != "" {
		agent = p.Agent
	}
	rctx, inv := c.tracker.StartInvocation(ctx, agent, session)
	c.m.registerAsync(session, msgID, rctx, func() { inv.End() })
	err := c.postJSON(rctx, "/session/"+url.PathEscape(session)+"/prompt_async", body, nil)
	if err != nil {
		c.m.promptDone(session, msgID)
		inv.Span().RecordError(err)
		inv.Span().SetStatus(codes.Error, err.Error())
		c.m.endSpan(func() { inv.End() })
		return inv.ID(), err
	}
	return inv.ID(), nil
}

func promptBody(p Prompt) map[string]any {
	body := map[string]any{}
	if len(p.Parts) > 0 {
		body["parts"] = p.Parts
	} else {
		body["parts"] = []any{map[string]any{"type": "text", "text": p.Text}}
	}
	if p.Agent != "" {
		body["agent"] = p.Agent
	}
	if p.ModelID != "" || p.ProviderID != "" {
		body["model"] = map[string]string{"providerID": p.ProviderID, "modelID": p.ModelID}
	}
	return body
}

// invoke runs one prompt as an invocation: body is the JSON object of POST
// /session/:id/message, send delivers it and returns the answer's body,
// done sees the invocation id and answer before the root ends.
func (c *Client) invoke(ctx context.Context, session string, body []byte, send func(context.Context, []byte) ([]byte, error), done func(string, []byte)) (string, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return "", fmt.Errorf("otelopencode: prompt body is not a JSON object: %w", err)
	}
	var msgID string
	if raw, ok := fields["messageID"]; ok {
		_ = json.Unmarshal(raw, &msgID)
	}
	if msgID == "" {
		msgID = c.ids.next(time.Now(), c.m.nextAfter(session))
		fields["messageID"], _ = json.Marshal(msgID)
	}
	agent := c.cfg.agent
	if raw, ok := fields["agent"]; ok {
		var a string
		if json.Unmarshal(raw, &a) == nil && a != "" {
			agent = a
		}
	}
	body, err := json.Marshal(fields)
	if err != nil {
		return "", fmt.Errorf("otelopencode: %w", err)
	}
	ctx, inv := c.tracker.StartInvocation(ctx, agent, session)
	c.m.registerPrompt(session, msgID, ctx)
	answer, err := send(ctx, body)
	c.sync(ctx, session, answer, err)
	c.m.promptDone(session, msgID)
	if err != nil {
		inv.Span().RecordError(err)
		inv.Span().SetStatus(codes.Error, err.Error())
	}
	if done != nil {
		done(inv.ID(), answer)
	}
	c.m.endSpan(func() { inv.End() })
	return inv.ID(), err
}

// sync makes sure the spans of everything the answered prompt did have
// started before its root ends: it waits for the event stream to deliver
// the answer's completion, or else reads the session's messages.
func (c *Client) sync(ctx context.Context, session string, answer []byte, sendErr error) {
	var mp messageWithParts
	if sendErr == nil && json.Unmarshal(answer, &mp) == nil && mp.Info.ID != "" {
		timer := time.NewTimer(c.cfg.syncTimeout)
		defer timer.Stop()
	wait:
		for {
			ok, next := c.m.completed(session, mp.Info.ID)
			if ok {
				return
			}
			select {
			case <-next:
			case <-timer.C:
				break wait
			case <-ctx.Done():
				break wait
			}
		}
	}
	// Not seen in time (or no answer): read what the server has. A
	// cancelled ctx must not stop this, or the root would end without
	// children the server did run.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.syncTimeout)
	defer cancel()
	msgs, err := c.messages(rctx, session)
	if err != nil {
		c.cfg.logger.Warn("otelopencode: reading session messages", "session", session, "error", err)
		return
	}
	c.m.applyMessages(msgs)
}

// Wait blocks until invocation id is final (or incomplete) in the ledger,
// or ctx ends. When it returns, every span of the invocation that this
// Client ended has also been handed to the span processors after the
// ledger (the exporter): a ForceFlush of the TracerProvider after Wait
// exports them all.
func (c *Client) Wait(ctx context.Context, id string) (instrument.Summary, error) {
	if c.cfg.ledger == nil {
		return instrument.Summary{}, ErrNoLedger
	}
	sum, err := c.cfg.ledger.Wait(ctx, id)
	c.m.settled()
	return sum, err
}

// Session returns what a session still owes its invocations: running
// background jobs, expected followups, running continuations. A runtime
// must not unload the session while OwesWork is true.
func (c *Client) Session(session string) (instrument.SessionState, error) {
	if c.cfg.ledger == nil {
		return instrument.SessionState{}, ErrNoLedger
	}
	return c.cfg.ledger.Session(session), nil
}

// HeaderInvocationID is the response header in which Transport returns the
// invocation id of a prompt.
const HeaderInvocationID = "Agentledger-Invocation-Id"

// promptPath matches POST /session/:id/message.
var promptPath = regexp.MustCompile(`/session/([^/]+)/message$`)

// Transport returns an http.RoundTripper for clients of the OpenCode
// server that the Client does not send itself (for example the generated
// SDK, github.com/sst/opencode-sdk-go): every POST /session/:id/message
// through it becomes an invocation exactly as with Prompt, whose id the
// response carries in the header HeaderInvocationID; other requests pass
// unchanged. base is the transport that sends the requests
// (http.DefaultTransport when nil). The Client must be started.
func (c *Client) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{c: c, base: base}
}

type transport struct {
	c    *Client
	base http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	m := promptPath.FindStringSubmatch(req.URL.Path)
	if req.Method != http.MethodPost || m == nil || req.Body == nil || !t.c.started() {
		return t.base.RoundTrip(req)
	}
	session, err := url.PathUnescape(m[1])
	if err != nil {
		return t.base.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("otelopencode: reading prompt body: %w", err)
	}
	if trimmed := bytes.TrimSpace(body); len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(trimmed) {
		// Not a prompt this package understands: send it as it is.
		out := req.Clone(req.Context())
		out.Body = io.NopCloser(bytes.NewReader(body))
		return t.base.RoundTrip(out)
	}
	var resp *http.Response
	id, err := t.c.invoke(req.Context(), session, body, func(ctx context.Context, body []byte) ([]byte, error) {
		out := req.Clone(ctx)
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.ContentLength = int64(len(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		t.c.cfg.propagators.Inject(ctx, propagation.HeaderCarrier(out.Header))
		r, err := t.base.RoundTrip(out)
		if err != nil {
			return nil, err
		}
		answer, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(answer))
		resp = r
		if err != nil {
			return nil, fmt.Errorf("otelopencode: reading prompt answer: %w", err)
		}
		if r.StatusCode/100 != 2 {
			return nil, fmt.Errorf("otelopencode: POST %s: %s", req.URL.Path, r.Status)
		}
		return answer, nil
	}, nil)
	if resp != nil {
		// An HTTP error status is the caller's to read, not a transport
		// error.
		resp.Header.Set(HeaderInvocationID, id)
		return resp, nil
	}
	return nil, err
}

// idSource makes OpenCode message ids that sort after the ids OpenCode
// made before: "msg_", 12 hex digits of (milliseconds*4096 + counter)
// modulo 2^48, and 14 random base62 characters, as OpenCode's own
// ascending ids. A prompt's id must sort after the session's earlier
// messages, since OpenCode orders messages by id.
type idSource struct {
	// mu guards lastMS and counter.
	mu      sync.Mutex
	lastMS  int64
	counter int64
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// next returns a new id for now that sorts after the id after (when given
// and OpenCode's: a server clock ahead of ours must not put a prompt
// before the messages it follows).
func (s *idSource) next(now time.Time, after string) string {
	ms := now.UnixMilli()
	s.mu.Lock()
	if ms != s.lastMS {
		s.lastMS, s.counter = ms, 0
	}
	s.counter++
	v := (ms*0x1000 + s.counter) & (1<<48 - 1)
	s.mu.Unlock()
	if len(after) >= 16 && strings.HasPrefix(after, "msg_") {
		if prev, err := strconv.ParseInt(after[4:16], 16, 64); err == nil && prev >= v {
			v = (prev + 1) & (1<<48 - 1)
		}
	}
	var rnd [14]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails
	for i, b := range rnd {
		rnd[i] = base62[int(b)%len(base62)]
	}
	return fmt.Sprintf("msg_%012x%s", v, rnd[:])
}
