package otelopencode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"go.opentelemetry.io/otel/propagation"
)

// serverAPI sends requests to the OpenCode server's HTTP API: the Client's
// own (sessions, prompts, aborts) and the event stream's read-backs. It
// holds no state of its own and is safe for concurrent use.
type serverAPI struct {
	base *url.URL
	hc   *http.Client
	// propagators inject the context of a request's invocation into the
	// requests that carry a body (POST).
	propagators propagation.TextMapPropagator
}

// url returns the address of path on the server.
func (a *serverAPI) url(path string) string {
	u := *a.base
	u.Path += path
	return u.String()
}

// getJSON sends GET path and decodes the answer into v.
func (a *serverAPI) getJSON(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.url(path), nil)
	if err != nil {
		return fmt.Errorf("otelopencode: %w", err)
	}
	resp, err := a.hc.Do(req)
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

// postJSON sends POST path with body as JSON (none when nil), injecting
// ctx's trace context, and decodes the answer into v (discarded when nil).
func (a *serverAPI) postJSON(ctx context.Context, path string, body any, v any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("otelopencode: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.url(path), rd)
	if err != nil {
		return fmt.Errorf("otelopencode: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	a.propagators.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := a.hc.Do(req)
	if err != nil {
		return fmt.Errorf("otelopencode: POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return &statusError{path: path, status: resp.Status, code: resp.StatusCode, detail: string(bytes.TrimSpace(msg))}
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

// statusError is the error of a POST the server answered with a status
// other than 2xx.
type statusError struct {
	path, status string
	code         int
	// detail is the start of the answer's body, if any.
	detail string
}

func (e *statusError) Error() string {
	if e.detail == "" {
		return fmt.Sprintf("otelopencode: POST %s: %s", e.path, e.status)
	}
	return fmt.Sprintf("otelopencode: POST %s: %s: %s", e.path, e.status, e.detail)
}

// events opens the event stream (GET /event) and returns its body.
func (a *serverAPI) events(ctx context.Context) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.url("/event"), nil)
	if err != nil {
		return nil, fmt.Errorf("otelopencode: %w", err)
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := a.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("otelopencode: GET /event: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("otelopencode: GET /event: %s", resp.Status)
	}
	return resp.Body, nil
}

// messages returns the messages of session with their parts, oldest
// first (GET /session/:id/message).
func (a *serverAPI) messages(ctx context.Context, session string) ([]messageWithParts, error) {
	var msgs []messageWithParts
	if err := a.getJSON(ctx, "/session/"+url.PathEscape(session)+"/message", &msgs); err != nil {
		return nil, err
	}
	return msgs, nil
}

// running returns the sessions the server reports busy or retrying (GET
// /session/status lists only those that are not idle).
func (a *serverAPI) running(ctx context.Context) (map[string]bool, error) {
	var status map[string]json.RawMessage
	if err := a.getJSON(ctx, "/session/status", &status); err != nil {
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
