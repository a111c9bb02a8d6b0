package otelopencode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
)

// HeaderInvocationID is the response header in which Transport returns the
// invocation id of a prompt.
const HeaderInvocationID = "Agentledger-Invocation-Id"

// promptPath matches POST /session/:id/message, asyncPath POST
// /session/:id/prompt_async, eventPath GET /event and /global/event.
var (
	promptPath = regexp.MustCompile(`/session/([^/]+)/message$`)
	asyncPath  = regexp.MustCompile(`/session/([^/]+)/prompt_async$`)
	eventPath  = regexp.MustCompile(`(^|/)event$`)
)

// Transport returns an http.RoundTripper for clients of the OpenCode
// server that the Client does not send itself (for example the generated
// SDK, github.com/sst/opencode-sdk-go): every POST /session/:id/message
// through it becomes an invocation exactly as with Prompt, and every POST
// /session/:id/prompt_async one as with PromptAsync, whose id the
// response carries in the header HeaderInvocationID; the event stream
// (GET /event, /global/event) passes each idle of a session
// (session.idle, session.status idle) on only once the Client has handled
// it and flushed the spans, each wait bounded by the flush timeout (see
// WithFlushTimeout); other requests pass unchanged. base is the transport that sends the requests
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
	if req.Method == http.MethodGet && eventPath.MatchString(req.URL.Path) && t.c.started() {
		resp, err := t.base.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		return t.gateEvents(resp), nil
	}
	if a := asyncPath.FindStringSubmatch(req.URL.Path); a != nil && req.Method == http.MethodPost && req.Body != nil && t.c.started() {
		return t.promptAsync(req, a[1])
	}
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
			return nil, &statusError{path: req.URL.Path, status: r.Status, code: r.StatusCode}
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

// promptAsync records POST /session/:id/prompt_async as PromptAsync does:
// an invocation whose root ends when the session is idle after a turn
// answered the prompt (the host's idle event passes after it, see
// gateEvents). A body that is no JSON object is sent as it is.
func (t *transport) promptAsync(req *http.Request, rawSession string) (*http.Response, error) {
	session, err := url.PathUnescape(rawSession)
	if err != nil {
		return t.base.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("otelopencode: reading prompt body: %w", err)
	}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil || fields == nil {
		out := req.Clone(req.Context())
		out.Body = io.NopCloser(bytes.NewReader(body))
		return t.base.RoundTrip(out)
	}
	c := t.c
	body, msgID, agent, err := c.namePrompt(session, fields)
	if err != nil {
		return nil, err
	}
	rctx, inv := c.startInvocation(req.Context(), msgID, agent, session)
	c.m.registerAsync(session, msgID, promptText(fields["parts"]), rctx, func() { inv.End() })
	var resp *http.Response
	var probe sendProbe
	err = probe.send(rctx, func(ctx context.Context) error {
		out := req.Clone(ctx)
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.ContentLength = int64(len(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		c.cfg.propagators.Inject(ctx, propagation.HeaderCarrier(out.Header))
		r, err := t.base.RoundTrip(out)
		if err != nil {
			return err
		}
		resp = r
		if r.StatusCode/100 != 2 {
			return &statusError{path: req.URL.Path, status: r.Status, code: r.StatusCode}
		}
		return nil
	})
	if err != nil {
		if probe.turnMayRun(err) {
			c.m.keepRest(session, msgID)
		}
		c.m.promptDone(session, msgID)
		inv.Span().RecordError(err)
		inv.Span().SetStatus(codes.Error, err.Error())
		c.m.endSpan(func() { inv.End() })
		c.flushSpans()
	}
	if resp != nil {
		resp.Header.Set(HeaderInvocationID, inv.ID())
		return resp, nil
	}
	return nil, err
}
