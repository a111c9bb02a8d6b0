package otelopencode

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/agentledger/agentledger/instrument/internal/flush"
)

// An event a host reads as "the answer is done" (session.idle, or
// session.status idle) passes through Transport only after the Client has
// handled the same event on its own stream (which ends a prompt_async
// prompt's root, and the turns the idle ends) and the spans were flushed:
// a host that waits for the idle and then asks the collector finds what
// it asks about. Both waits are bounded by the flush timeout; with
// flushing off (a negative WithFlushTimeout) the stream passes unchanged.

// gateEvents returns resp with its server-sent event stream gated, when it
// is one (GET /event, /global/event).
func (t *transport) gateEvents(resp *http.Response) *http.Response {
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") ||
		t.c.cfg.flushTimeout < 0 {
		return resp
	}
	resp.Body = &eventGate{c: t.c, body: resp.Body, r: bufio.NewReader(resp.Body)}
	return resp
}

// eventGate reads the stream one event at a time (up to its blank line)
// and hands each on whole, after the waits above for an idle.
type eventGate struct {
	c       *Client
	body    io.ReadCloser
	r       *bufio.Reader
	pending []byte
	err     error
}

func (g *eventGate) Read(p []byte) (int, error) {
	for len(g.pending) == 0 {
		if g.err != nil {
			return 0, g.err
		}
		g.readEvent()
	}
	n := copy(p, g.pending)
	g.pending = g.pending[n:]
	return n, nil
}

func (g *eventGate) Close() error { return g.body.Close() }

// readEvent reads the next event into pending (or what came before an
// error), waiting first when it is an idle.
func (g *eventGate) readEvent() {
	var ev, data []byte
	for {
		line, err := g.r.ReadBytes('\n')
		ev = append(ev, line...)
		if rest, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			data = append(data, bytes.TrimSpace(rest)...)
		}
		if err != nil {
			g.err = err
			break
		}
		if len(bytes.TrimSpace(line)) == 0 {
			break
		}
	}
	if session := idleSession(data); session != "" {
		timeout := g.c.cfg.flushTimeout
		if timeout == 0 {
			timeout = flush.DefaultTimeout
		}
		g.c.m.awaitIdle(session, timeout)
		g.c.flushSpans()
	}
	g.pending = ev
}

// idleSession returns the session of an idle event's data (of /event, or
// of /global/event, which wraps it in "payload"), else "".
func idleSession(data []byte) string {
	if !bytes.Contains(data, []byte("idle")) {
		return ""
	}
	var ev struct {
		Type       string          `json:"type"`
		Properties eventProperties `json:"properties"`
		Payload    *struct {
			Type       string          `json:"type"`
			Properties eventProperties `json:"properties"`
		} `json:"payload"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return ""
	}
	if ev.Payload != nil {
		ev.Type, ev.Properties = ev.Payload.Type, ev.Payload.Properties
	}
	switch {
	case ev.Type == evSessionIdle,
		ev.Type == evSessionStatus && ev.Properties.Status != nil && ev.Properties.Status.Type == "idle":
		return ev.Properties.SessionID
	}
	return ""
}
