package otelopencode

import (
	"context"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/instrument"
)

// sessionState is what the mapper knows of one OpenCode session: its
// messages, parts and turns above the floor, the jobs it launched and the
// notifications it holds.
type sessionState struct {
	id       string
	parentID string
	lastUse  uint64
	// tracked is set on a session this Client sent a prompt to, and on
	// the child sessions of their subagents.
	tracked bool
	// acting is set when the session was prompted or did something since
	// its last idle, which will end it; idles counts its idles. A host's
	// idle event waits on them (eventGate).
	acting bool
	idles  uint64
	// owner is the context that non-notification turns of a child
	// session run in: the job's background span, or the task tool's span
	// of a foreground subagent.
	owner context.Context
	job   *job
	// ended is set when a child session went idle before its job was
	// known; gaveUp then too, when it had turns: they were recorded as
	// unattributed, and so are its later ones.
	ended, aborted, gaveUp bool
	errMsg                 string
	users                  map[string]*userMsg
	assistants             map[string]*assistantMsg
	tools                  map[string]*toolPart
	// turns are the turns this session started by itself (continuations
	// and unattributed turns), by the id of the user message they answer.
	turns map[string]*turn
	// current is the one of them running now, if any.
	current *turn
	// notes are completion notifications waiting for a turn.
	notes []*note
	// orphans are assistant messages and parts of a child session of a
	// tracked session seen before its job; they are replayed when the job
	// is known. orphanAt indexes them by message or part id, so an update
	// replaces the one kept.
	orphans  []messageWithParts
	orphanAt map[string]int
	// launched are the jobs tool calls of this session started whose
	// followup is not settled.
	launched []*job
	// answered is the greatest user message id a turn answered.
	answered string
	// maxMsg is the greatest message id seen in the session. floor is the
	// greatest id up to which every message, part and turn is done: they
	// are forgotten, and events about them are ignored (OpenCode's message
	// ids ascend). See prune.
	maxMsg, floor string
}

// userMsg is a user message of a session: a prompt, a completion
// notification, or another client's message.
type userMsg struct {
	// owner is the root context of a prompt the caller sent through the
	// Client, until its root ends; sent stays set.
	owner context.Context
	sent  bool
	note  *note
	// foldedInto is, for a notification, the prompt of the Client whose
	// turn answered the notification too (mapper.foldedPrompt).
	foldedInto *userMsg
	// unknownTask is set when the message is the completion notification
	// of a job the Client does not track.
	unknownTask bool
	// seen is set when the server reported the message.
	seen bool
	// finish ends the root of a prompt sent with prompt_async, at the
	// first idle after a turn answered it.
	finish func()
	// rest is the background job that holds the rest of the prompt's
	// turn after its root ended (mapper.keepRest); owner is then its
	// context. It ends with the turn.
	rest *instrument.Job
	// turnEnded is set when the session went idle after a turn answered
	// the message: that turn is over.
	turnEnded bool
	// provider is the gen_ai.provider.name set on the prompt's root.
	provider string
	// text is the text of a prompt the Client sent, which a title request
	// of the model wire carries.
	text string
}

// assistantMsg is an assistant message: one model call and its span.
type assistantMsg struct {
	// turn is the context of the turn the model call belongs to (its
	// parent); tool calls of the message run in it too.
	turn  context.Context
	span  trace.Span
	ended bool
	// claimed is set once a request of the model-wire proxy was
	// attributed to the message (WithModelProxy).
	claimed bool
}

// toolPart is a tool call (a tool part of an assistant message) and its
// span.
type toolPart struct {
	// msgID is the id of the assistant message the part belongs to.
	msgID string
	ctx   context.Context
	span  trace.Span
	start time.Time
	ended bool
	job   *job
}

// note is a completion notification waiting for (or read by) a turn.
type note struct {
	msgID    string
	job      *job
	resolved bool
	// abandoned is set when an abort left the note without a turn while
	// its fate was unknown, and no turn of the session has started since
	// (mapper.abandon): it is resolved, and a turn that answers it is
	// still a continuation of its job's invocation.
	abandoned bool
}

// turn is a turn the session started by itself: a continuation, or an
// unattributed turn (reason set). It ends when the session goes idle or
// the session's next turn answers another user message.
type turn struct {
	ctx    context.Context
	end    func(...trace.SpanEndOption)
	reason string
	ended  bool
	// provider is the gen_ai.provider.name set on the turn's span.
	provider string
}

func newSessionState(id string) *sessionState {
	return &sessionState{
		id:         id,
		users:      make(map[string]*userMsg),
		assistants: make(map[string]*assistantMsg),
		tools:      make(map[string]*toolPart),
		turns:      make(map[string]*turn),
	}
}

// busy reports whether the session has open spans or waits for something.
func (s *sessionState) busy() bool {
	if s.job != nil && !s.job.ended {
		return true
	}
	for _, u := range s.users {
		if u.owner != nil {
			return true
		}
	}
	for _, a := range s.assistants {
		if a.span != nil && !a.ended {
			return true
		}
	}
	for _, t := range s.tools {
		if t.span != nil && !t.ended {
			return true
		}
	}
	for _, n := range s.notes {
		if !n.resolved {
			return true
		}
	}
	for _, j := range s.launched {
		if !j.settled {
			return true
		}
	}
	return s.current != nil
}

// prune forgets what is done in a session: it raises the floor to just
// below the oldest message, part or turn still open (to maxMsg when none
// is) and drops everything up to it, and drops settled notifications and
// jobs. Events about what lies below the floor are ignored, so a session
// that always owes something (a job that never ends) stays small while it
// is prompted, and a read-back of its whole history changes nothing.
func (s *sessionState) prune() {
	if len(s.orphans) > 0 || s.maxMsg == "" {
		return
	}
	// oldest is the smallest message id of what is open; "" when nothing is.
	var oldest string
	open := func(id string) {
		if oldest == "" || id < oldest {
			oldest = id
		}
	}
	for id, u := range s.users {
		if u.owner != nil || u.finish != nil || u.note != nil && (!u.note.resolved || u.note.abandoned) {
			open(id)
		}
	}
	for id, a := range s.assistants {
		if a.span != nil && !a.ended {
			open(id)
		}
	}
	for _, t := range s.tools {
		if !t.ended {
			open(t.msgID)
		}
	}
	for id, tr := range s.turns {
		if !tr.ended {
			open(id)
		}
	}
	floor := s.maxMsg
	if oldest != "" {
		// The greatest id known below the oldest open one.
		floor = s.floor
		below := func(id string) {
			if id < oldest && id > floor {
				floor = id
			}
		}
		for id := range s.users {
			below(id)
		}
		for id := range s.assistants {
			below(id)
		}
		for _, t := range s.tools {
			below(t.msgID)
		}
		for id := range s.turns {
			below(id)
		}
	}
	s.floor = max(s.floor, floor)
	for id := range s.users {
		if id <= s.floor {
			delete(s.users, id)
		}
	}
	for id := range s.assistants {
		if id <= s.floor {
			delete(s.assistants, id)
		}
	}
	for id, t := range s.tools {
		if t.msgID <= s.floor {
			delete(s.tools, id)
		}
	}
	for id := range s.turns {
		if id <= s.floor {
			delete(s.turns, id)
		}
	}
	s.notes = slices.DeleteFunc(s.notes, func(n *note) bool { return n.resolved && !n.abandoned })
	s.launched = slices.DeleteFunc(s.launched, func(jb *job) bool { return jb.settled })
}

// keepOrphan keeps o, an assistant message or a part named id, for replay;
// a later update of the same message or part replaces it.
func (s *sessionState) keepOrphan(id string, o messageWithParts) {
	if i, ok := s.orphanAt[id]; ok {
		s.orphans[i] = o
		return
	}
	if s.orphanAt == nil {
		s.orphanAt = make(map[string]int)
	}
	s.orphanAt[id] = len(s.orphans)
	s.orphans = append(s.orphans, o)
}

// endTurn ends the turn the session started by itself that runs now, if
// any.
func (s *sessionState) endTurn() {
	if tr := s.current; tr != nil && !tr.ended {
		tr.ended = true
		tr.end()
	}
	s.current = nil
}
