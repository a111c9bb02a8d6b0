package otelopencode

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// keepRest keeps the rest of the turn of prompt msgID of session in the
// prompt's invocation when its root must end before the turn's work is
// known to have been seen: the caller gave up the call while the server
// may still run the turn, or the server answered while neither the event
// stream nor a read-back showed the turn. It must be called while the
// prompt's root is still open: the rest of the turn is a background job
// "background turn" (KindTurn, no followup), a child of the root counted
// in the root's invocation.children, so that both the ledger and the
// collector wait for it. The turn's model calls and tools that start
// later run in the job's context, and so do the later tool calls of the
// model calls already running; the job ends when the turn does, as the
// events or a read-back show it: at the session's first idle after a
// turn answered the prompt, or at its deletion. Nothing is started when
// the turn is already over or the prompt's registration has ended.
func (m *mapper) keepRest(session, msgID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions.lookup(session)
	if s == nil {
		return
	}
	u := s.users[msgID]
	if u == nil || u.owner == nil || u.rest != nil || u.turnEnded {
		return
	}
	root := u.owner
	ctx, j := m.tracker.StartBackground(root, KindTurn, trace.WithAttributes(
		attribute.String(contract.AttrConversationID, session),
		attribute.String(AttrMessageID, msgID),
	))
	for _, a := range s.assistants {
		if a.turn == root {
			a.turn = ctx
		}
	}
	// The caller's path ends the root (a prompt_async one too).
	u.owner, u.rest, u.finish = ctx, j, nil
}

// endRest ends the rest of a prompt's turn (u.rest, see keepRest), with
// outcome as its error when not nil; the prompt's later answers, if any,
// are unattributed turns.
func endRest(u *userMsg, outcome error) {
	rest := u.rest
	u.rest, u.owner = nil, nil
	rest.EndWithoutFollowup(outcome)
}
