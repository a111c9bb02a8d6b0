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

	"go.opentelemetry.io/otel/propagation"
)

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
