package otelopencode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

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
