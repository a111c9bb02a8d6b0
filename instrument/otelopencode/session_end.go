package otelopencode

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/codes"

	"github.com/agentledger/agentledger/contract"
)

// errDeleted is recorded on spans a session's deletion cut short.
var errDeleted = errors.New("opencode: session deleted")

// idle handles a session that went idle: the turn it started by itself
// (continuation or unattributed) has ended, the turns that answered its
// user messages are over (a prompt_async prompt has its result, the rest
// of a prompt's turn kept after its root ended ends), a child session's
// job is done, and the followups of notifications an abort left without
// a turn are closed as abandoned (see abandon).
func (m *mapper) idle(id string) {
	s := m.sessions.use(id)
	s.acting = false
	s.idles++
	close(m.idled)
	m.idled = make(chan struct{})
	if m.awaitsJob(s) && len(s.orphans) > 0 {
		// A child session whose turns ran without any job naming it: they
		// are recorded as unattributed turns rather than lost.
		s.gaveUp, s.tracked = true, true
		m.replay(s)
	}
	s.endTurn()
	for msgID, u := range s.users {
		if !u.seen || msgID > s.answered {
			continue
		}
		u.turnEnded = true
		if u.finish != nil {
			finish := u.finish
			u.finish, u.owner = nil, nil
			finish()
		}
		if u.rest != nil {
			var outcome error
			if s.aborted {
				outcome = errAborted
			}
			endRest(u, outcome)
		}
	}
	if s.parentID != "" {
		if s.job != nil {
			m.endJob(s.job, s.aborted, s.errMsg)
		} else {
			s.ended = true
		}
	}
	if s.aborted {
		for _, n := range s.notes {
			if !n.resolved {
				m.abandon(n)
			}
		}
		if s.parentID == "" {
			s.aborted = false
		}
	}
	s.prune()
}

// abandon closes the followup of notification n, posted into a session
// whose running turn an abort then cancelled before any turn answered n.
// OpenCode (1.18.33) posts a notification as a prompt of its own: it
// writes the message, then joins the session's running turn or, when none
// runs, starts one. If n had joined the cancelled turn, it gets no turn
// (the session's next turn reads it); if the abort came between the
// message and the join, n's own turn starts after the abort. The events
// cannot tell the two apart, so the followup is neither interrupted (a
// final that would miss the turn's usage) nor left open (nothing may ever
// come): it is closed as abandoned, and the invocation is incomplete,
// never final. Should n's turn still come, it is a continuation of the
// job's invocation all the same (startContinuation), not an unattributed
// turn; once another turn of the session has started, n's never will.
func (m *mapper) abandon(n *note) {
	m.resolve(n)
	n.abandoned = true
	_ = m.tracker.CloseFollowup(context.Background(), n.job.carrier, contract.ReasonAbandoned, "")
}

// deleted handles a deleted session: what it still ran ends (the roots of
// its prompt_async prompts and the rest of its prompts' turns too), and
// the followups of the jobs it launched that no turn answered are closed
// with reason session_closed.
func (m *mapper) deleted(id string) {
	s := m.sessions.lookup(id)
	if s == nil {
		return
	}
	s.endTurn()
	for _, u := range s.users {
		if u.finish != nil {
			finish := u.finish
			u.finish, u.owner = nil, nil
			finish()
		}
		if u.rest != nil {
			endRest(u, errDeleted)
		}
	}
	for _, a := range s.assistants {
		if a.span != nil && !a.ended {
			a.ended = true
			a.span.SetStatus(codes.Error, errDeleted.Error())
			a.span.End()
		}
	}
	for _, t := range s.tools {
		if t.span != nil && !t.ended {
			t.ended = true
			t.span.SetStatus(codes.Error, errDeleted.Error())
			t.span.End()
		}
	}
	if s.job != nil {
		m.endJob(s.job, false, errDeleted.Error())
	}
	for _, n := range s.notes {
		if !n.resolved {
			m.resolve(n)
			_ = m.tracker.CloseFollowup(context.Background(), n.job.carrier, contract.ReasonSessionClosed, "")
		}
	}
	for _, jb := range s.launched {
		if jb.settled {
			continue
		}
		m.endJob(jb, false, errDeleted.Error())
		m.settle(jb)
		_ = m.tracker.CloseFollowup(context.Background(), jb.carrier, contract.ReasonSessionClosed, "")
	}
	m.sessions.remove(id)
}
