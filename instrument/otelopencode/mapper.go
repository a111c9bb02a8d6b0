package otelopencode

import (
	"context"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/instrument"
)

// mapper turns OpenCode events and messages into spans. All its state is
// guarded by mu; OpenCode's own ids (sessions, messages, parts) key it, so
// an event seen twice (a replay after reconnecting, a repeated update)
// changes nothing.
type mapper struct {
	tracer  trace.Tracer
	tracker *instrument.Tracker
	stats   *telemetry

	// mu guards every field below and the state they point to.
	mu sync.Mutex
	// sessions are the sessions known, bounded by WithMaxSessions.
	sessions *sessionTable
	// jobs are the jobs whose followup is not settled, bounded by
	// WithMaxJobs.
	jobs *jobTable
	// seen is closed and replaced whenever a message completes, for
	// completed.
	seen chan struct{}
	// wire is set when the model-wire proxy counts the model calls
	// (WithModelProxy): assistant messages then make no model-call spans,
	// only the turn contexts the proxy's requests are attributed to.
	wire bool
	// started is closed and replaced whenever an assistant message is
	// first seen, for the proxy's requests that wait for theirs.
	started chan struct{}
	// idled is closed and replaced whenever a session goes idle, for a
	// host's idle event that waits for the Client's (awaitIdle).
	idled chan struct{}
}

func newMapper(tracer trace.Tracer, tracker *instrument.Tracker, stats *telemetry, maxSessions, maxJobs int) *mapper {
	return &mapper{
		started:  make(chan struct{}),
		idled:    make(chan struct{}),
		tracer:   tracer,
		tracker:  tracker,
		stats:    stats,
		sessions: newSessionTable(maxSessions, stats),
		jobs:     newJobTable(maxJobs),
		seen:     make(chan struct{}),
	}
}

// handle applies one event.
func (m *mapper) handle(ev event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := ev.Properties
	m.act(ev)
	switch ev.Type {
	case evSessionCreated, evSessionUpdated:
		if p.Info != nil && p.Info.ID != "" {
			s := m.sessions.use(p.Info.ID)
			if p.Info.ParentID != "" {
				s.parentID = p.Info.ParentID
			}
		}
	case evMessageUpdated:
		if p.Info != nil {
			m.message(*p.Info)
		}
	case evMessagePartUpdated:
		if p.Part != nil {
			m.part(*p.Part, p.Time)
		}
	case evSessionError:
		if p.SessionID != "" && p.Error != nil {
			s := m.sessions.use(p.SessionID)
			if p.Error.Name == abortErrorName {
				s.aborted = true
			} else {
				s.errMsg = p.Error.Name + ": " + p.Error.Data.Message
			}
		}
	case evSessionStatus:
		if p.SessionID != "" && p.Status != nil && p.Status.Type == "idle" {
			m.idle(p.SessionID)
		}
	case evSessionIdle:
		if p.SessionID != "" {
			m.idle(p.SessionID)
		}
	case evSessionDeleted:
		if p.Info != nil && p.Info.ID != "" {
			m.deleted(p.Info.ID)
		}
	}
}

// registerPrompt records that user message msgID of session, whose text
// parts are text, is the prompt of the invocation whose root context is
// ctx.
func (m *mapper) registerPrompt(session, msgID, text string, ctx context.Context) {
	m.registerAsync(session, msgID, text, ctx, nil)
}

// registerAsync is registerPrompt for a prompt whose answer does not come
// back with the request (prompt_async): finish is called, with the
// mapper's lock held, at the session's first idle after a turn answered
// the prompt (or a later user message), and must end the root.
func (m *mapper) registerAsync(session, msgID, text string, ctx context.Context, finish func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions.use(session)
	s.tracked = true
	s.users[msgID] = &userMsg{owner: ctx, sent: true, finish: finish, text: text}
	// The prompt makes the session act: its idle ends the prompt's turn.
	s.acting = true
	s.maxMsg = max(s.maxMsg, msgID)
}

// promptDone drops the registration of a prompt whose root has ended,
// unless the rest of its turn runs on (keepRest).
func (m *mapper) promptDone(session, msgID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.sessions.lookup(session); s != nil {
		if u, ok := s.users[msgID]; ok && u.rest == nil {
			u.owner, u.finish = nil, nil
		}
		s.prune()
	}
}

// endSpan ends a span of the mapper's making outside the event stream (a
// prompt's root) with the lock held, as every span the mapper ends is:
// see settled.
func (m *mapper) endSpan(end func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	end()
}

// settled returns once every span end in progress has returned. The span
// processor hands an ended span to the ledger before the processors after
// it, so a waiter the ledger wakes may run while the span that made the
// invocation final is still on its way to the exporter. Every span the
// Client ends is ended with mu held, so taking mu once orders the waiter
// after that span has passed the whole pipeline.
func (m *mapper) settled() {
	m.mu.Lock()
	defer m.mu.Unlock()
}

// applyMessages applies the messages of one session as listed by the
// server (GET /session/:id/message, oldest first): the same as the events
// that created them.
func (m *mapper) applyMessages(msgs []messageWithParts) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, mp := range msgs {
		m.message(mp.Info)
		for _, p := range mp.Parts {
			if p.SessionID == "" {
				p.SessionID = mp.Info.SessionID
			}
			if p.MessageID == "" {
				p.MessageID = mp.Info.ID
			}
			m.part(p, 0)
		}
	}
}

// applyIdle marks sessions idle (after a reconnect, from GET
// /session/status, for the ones that are not busy).
func (m *mapper) applyIdle(sessions []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range sessions {
		m.idle(id)
	}
}

// toReconcile returns the sessions to read back after a reconnect: the
// ones that have open spans or wait for something, and the tracked ones
// the server reports running; child sessions first.
func (m *mapper) toReconcile(running map[string]bool) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for id, s := range m.sessions.byID {
		if s.busy() || running[id] && s.tracked {
			out = append(out, id)
		}
	}
	// Child sessions first: a job's own end is read before the
	// notification its parent session holds.
	sort.Slice(out, func(i, j int) bool {
		ci, cj := m.sessions.lookup(out[i]).parentID != "", m.sessions.lookup(out[j]).parentID != ""
		if ci != cj {
			return ci
		}
		return out[i] < out[j]
	})
	return out
}

// nextAfter returns the greatest message id seen in session ("" if none),
// which a new prompt's id must sort after.
func (m *mapper) nextAfter(session string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.sessions.lookup(session); s != nil {
		return s.maxMsg
	}
	return ""
}

// completed reports whether assistant message msgID of session has
// completed (or is done and forgotten, below the floor); otherwise it returns a channel that is
// closed when the next model call completes.
func (m *mapper) completed(session, msgID string) (bool, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.sessions.lookup(session); s != nil {
		if a, ok := s.assistants[msgID]; ok && (a.ended || a.span == nil) {
			return true, nil
		}
		if msgID <= s.floor {
			return true, nil
		}
	}
	return false, m.seen
}

// act marks the session of a message or part event, or of a busy status,
// acting until its next idle.
func (m *mapper) act(ev event) {
	p := ev.Properties
	var id string
	switch {
	case ev.Type == evMessageUpdated && p.Info != nil:
		id = p.Info.SessionID
	case ev.Type == evMessagePartUpdated && p.Part != nil:
		id = p.Part.SessionID
	case ev.Type == evSessionStatus && p.Status != nil && p.Status.Type != "idle":
		id = p.SessionID
	}
	if id != "" {
		m.sessions.use(id).acting = true
	}
}

// awaitIdle returns once the Client's own event stream has handled the
// idle of session that a host's event stream just delivered: at once when
// the session has not acted since its last idle (the Client saw this idle
// first, or nothing of the session), else when its next idle is handled
// or after d. It reports whether it waited d in vain.
func (m *mapper) awaitIdle(session string, d time.Duration) bool {
	m.mu.Lock()
	s := m.sessions.lookup(session)
	if s == nil || !s.acting {
		m.mu.Unlock()
		return false
	}
	n, ch := s.idles, m.idled
	m.mu.Unlock()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case <-ch:
		case <-timer.C:
			return true
		}
		m.mu.Lock()
		s = m.sessions.lookup(session)
		if s == nil || s.idles != n {
			m.mu.Unlock()
			return false
		}
		ch = m.idled
		m.mu.Unlock()
	}
}
