package otelopencode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
)

// eventStream reads the server's event stream (GET /event) in a goroutine
// and hands every event to the mapper. It reconnects, with backoff,
// whenever the stream breaks, and then reads back from the server what the
// broken stream may have missed.
type eventStream struct {
	api                    *serverAPI
	m                      *mapper
	stats                  *telemetry
	logger                 *slog.Logger
	minBackoff, maxBackoff time.Duration
	connectWait            time.Duration

	// mu guards cancel, done and connected.
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
	// connected is closed once the first connection is up.
	connected chan struct{}
}

func newEventStream(api *serverAPI, m *mapper, stats *telemetry, cfg config) *eventStream {
	return &eventStream{
		api:         api,
		m:           m,
		stats:       stats,
		logger:      cfg.logger,
		minBackoff:  cfg.minBackoff,
		maxBackoff:  cfg.maxBackoff,
		connectWait: cfg.connectWait,
		connected:   make(chan struct{}),
	}
}

// start starts the goroutine, once, and returns when the stream is
// connected, or with ctx's error (the goroutine then keeps trying).
func (s *eventStream) start(ctx context.Context) error {
	s.mu.Lock()
	if s.done == nil {
		runCtx, cancel := context.WithCancel(context.Background())
		s.cancel = cancel
		s.done = make(chan struct{})
		go s.run(runCtx, s.done)
	}
	connected := s.connected
	s.mu.Unlock()
	select {
	case <-connected:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("otelopencode: connecting the event stream: %w", ctx.Err())
	}
}

// shutdown stops the goroutine and waits for it to end, or for ctx.
func (s *eventStream) shutdown(ctx context.Context) error {
	s.mu.Lock()
	cancel, done := s.cancel, s.done
	s.mu.Unlock()
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

// started reports whether start was called.
func (s *eventStream) started() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.done != nil
}

// run reads the stream, and reconnects it with backoff, until ctx ends.
func (s *eventStream) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	wait := s.minBackoff
	everConnected := false
	for {
		connected, err := s.read(ctx, everConnected)
		if ctx.Err() != nil {
			return
		}
		if connected {
			everConnected = true
			wait = s.minBackoff
		}
		if err != nil {
			s.logger.Warn("otelopencode: event stream ended", "error", err, "retry_in", wait)
		}
		s.stats.reconnected(ctx)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, s.maxBackoff)
	}
}

// read reads one connection of the event stream until it ends; connected
// reports whether the server's server.connected event arrived.
//
// An attempt whose server.connected event does not come within
// connectWait is dropped (WithConnectWait): run tries again.
func (s *eventStream) read(ctx context.Context, reconnect bool) (connected bool, err error) {
	attempt, cancel := context.WithCancel(ctx)
	defer cancel()
	hung := time.AfterFunc(s.connectWait, cancel)
	defer hung.Stop()
	unanswered := func(err error) error {
		if ctx.Err() == nil && attempt.Err() != nil {
			return fmt.Errorf("otelopencode: GET /event: no server.connected event within %v: %w", s.connectWait, err)
		}
		return err
	}
	body, err := s.api.events(attempt)
	if err != nil {
		return false, unanswered(err)
	}
	defer body.Close()
	r := newSSEReader(body)
	for {
		data, err := r.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return connected, nil
			}
			return connected, unanswered(err)
		}
		s.stats.eventRead(ctx)
		if s.dispatch(data) == evServerConnected && !connected {
			connected = true
			hung.Stop()
			if reconnect {
				// Whatever happened while disconnected is read back from
				// the server; events after this one only add to it.
				s.reconcile(ctx)
			}
			s.mu.Lock()
			select {
			case <-s.connected:
			default:
				close(s.connected)
			}
			s.mu.Unlock()
		}
	}
}

// dispatch decodes and applies one event and returns its type. A
// malformed event, or one whose handling fails, is counted, logged and
// skipped: the stream goes on.
func (s *eventStream) dispatch(data []byte) (typ string) {
	defer func() {
		if r := recover(); r != nil {
			s.stats.eventMalformed()
			s.logger.Warn("otelopencode: event not handled", "panic", fmt.Sprint(r), "data", truncate(data))
		}
	}()
	ev, known, err := parseEvent(data)
	if err != nil {
		s.stats.eventMalformed()
		s.logger.Warn("otelopencode: malformed event skipped", "error", err, "data", truncate(data))
		return ""
	}
	if !known {
		s.stats.eventIgnored()
		return ev.Type
	}
	s.m.handle(ev)
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
func (s *eventStream) reconcile(ctx context.Context) {
	running, err := s.api.running(ctx)
	if err != nil {
		s.logger.Warn("otelopencode: reading session status", "error", err)
	}
	sessions := s.m.toReconcile(running)
	if len(sessions) == 0 {
		return
	}
	for _, id := range sessions {
		msgs, err := s.api.messages(ctx, id)
		if err != nil {
			s.logger.Warn("otelopencode: reading session messages", "session", id, "error", err)
			continue
		}
		s.m.applyMessages(msgs)
	}
	// Read again: a session may have finished while its messages were read.
	if running, err = s.api.running(ctx); err != nil {
		s.logger.Warn("otelopencode: reading session status", "error", err)
		return
	}
	var idle []string
	for _, id := range sessions {
		if !running[id] {
			idle = append(idle, id)
		}
	}
	s.m.applyIdle(idle)
}
