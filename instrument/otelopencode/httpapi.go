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

func (c *Client) messages(ctx context.Context, session string) ([]messageWithParts, error) {
	var msgs []messageWithParts
	if err := c.getJSON(ctx, "/session/"+url.PathEscape(session)+"/message", &msgs); err != nil {
		return nil, err
	}
	return msgs, nil
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
