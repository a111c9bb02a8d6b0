package otelopencode

import (
	"cmp"
	"context"
	"slices"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
)

// Reasons of an unattributed turn (contract.AttrUnattributed on its root):
// a turn in a session the Client tracks that no invocation of this Client
// can own. It is recorded as an invocation of its own
// (instrument.Tracker.StartUnattributed) with the turn's model calls and
// tools as its usage, closes incomplete with
// unattributed_wakeup:<reason>, never final, and its session owes work
// until the turn ends.
const (
	// UnattributedUnknownTask: the turn answers the completion
	// notification of a job the Client does not track (launched before it
	// started reading events, or dropped beyond WithMaxJobs), or is a turn
	// of a child session whose job was never named.
	UnattributedUnknownTask = "unknown_task"
	// UnattributedEndedTurn: the turn answers a user message whose turn
	// had already ended or been settled: a prompt of the Client answered
	// again after its turn ended (the session went idle after answering
	// it; a call given up while OpenCode ran the turn keeps that turn, see
	// Client.Prompt), a notification whose followup was settled (another
	// turn read it, its continuation ended; one an abort closed as
	// abandoned is answered by a continuation until another turn starts),
	// or a message older than everything still open in the session.
	UnattributedEndedTurn = "ended_turn"
	// UnattributedOtherPrompt: the turn answers a user message the Client
	// did not send (another client of the server).
	UnattributedOtherPrompt = "other_prompt"
	// UnattributedUnseenMessage: the turn answers a user message the Client
	// never saw (posted while its event stream was detached).
	UnattributedUnseenMessage = "unseen_message"
	// UnattributedUntrackedJob: a turn of the child session of a job
	// dropped from tracking beyond WithMaxJobs.
	UnattributedUntrackedJob = "untracked_job"
)

// turnContext returns the context the model calls of assistant message
// info of a tracked session run in: the prompt's root, the child session's
// job, a continuation it starts when the message answers a completion
// notification, or else an unattributed turn it starts (contract rule 7),
// so that no model call of a tracked session is left out. It settles the
// notifications the turn reads, and sets the provider of the model call
// on the turn's invoke_agent span (the prompt's root, the continuation,
// the unattributed turn; not a subagent's job).
func (m *mapper) turnContext(s *sessionState, info rawInfo) context.Context {
	parent := info.ParentID
	u := s.users[parent]
	answeredBefore := s.answered
	s.answered = max(s.answered, parent)
	tr := s.turns[parent]
	if u != nil && u.note != nil && tr == nil {
		// A notification's turn that also answers a prompt of ours
		// posted before it: the prompt's invocation owns the turn.
		if u.foldedInto == nil {
			u.foldedInto = m.foldedPrompt(s, answeredBefore, parent)
		}
		if u.foldedInto != nil {
			u = u.foldedInto
		}
	}
	if s.current != nil && s.current != tr {
		// The turn moved on to another user message.
		s.endTurn()
	}
	var ctx context.Context
	var reason string
	// provider is what the turn's invoke_agent span has; nil when ctx is
	// not that span's.
	var provider *string
	switch {
	case u != nil && u.owner != nil:
		ctx = u.owner
		if u.rest == nil {
			provider = &u.provider
		}
	case tr != nil && !tr.ended:
		ctx, provider = tr.ctx, &tr.provider
	case tr != nil:
		// Its turn has ended, and the message is answered again.
		reason = cmp.Or(tr.reason, UnattributedEndedTurn)
	case u != nil && u.note != nil:
		if ctx = m.startContinuation(s, info); ctx == nil {
			reason = UnattributedEndedTurn // settled before its turn
		} else {
			provider = &s.turns[parent].provider
		}
	case s.owner != nil:
		// A child session: its own turns are the job's work.
		ctx = s.owner
	default:
		reason = s.unownedReason(u, parent)
	}
	if ctx == nil {
		ctx = m.startUnattributed(s, info, reason)
		provider = &s.turns[parent].provider
	}
	if name := providerName(info.ProviderID); provider != nil && name != "" && *provider != name {
		*provider = name
		trace.SpanFromContext(ctx).SetAttributes(attribute.String(contract.AttrProviderName, name))
	}
	// Notifications posted before this turn's user message and not yet
	// answered are read by this turn; abandoned ones will get no turn of
	// their own now.
	for _, n := range s.notes {
		if n.msgID > parent {
			continue
		}
		n.abandoned = false
		if n.resolved {
			continue
		}
		m.resolve(n)
		_ = m.tracker.ConsumeFollowup(ctx, n.job.carrier)
	}
	return ctx
}

// foldedPrompt returns the prompt of the Client that the turn answering
// notification parent answers too, or nil. OpenCode (1.18.33) answers
// every user message posted since its last model call in one request,
// whose assistant message names the newest of them as its parent: a
// prompt B posted after the session's last answered message and before
// A's notification is answered by the request whose parent is the
// notification. The evidence is the order of the messages OpenCode
// stored and reported (B seen before the turn's first assistant
// message): B's invocation owns the turn (a prompt the caller waits for
// is the turn's reason to be), and A's notification is read by it
// (consumed_by, below in turnContext). Two or more such prompts: the
// newest owns the turn, as OpenCode's parent says, and the others, which
// the same request answers, are kept from final (AttrAmbiguous) rather
// than final with nothing.
func (m *mapper) foldedPrompt(s *sessionState, answeredBefore, parent string) *userMsg {
	var ids []string
	for id, p := range s.users {
		if id > answeredBefore && id < parent && p.sent && p.seen && p.owner != nil && s.turns[id] == nil {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	slices.Sort(ids)
	for _, id := range ids[:len(ids)-1] {
		m.taint(s.users[id].owner, "prompts folded into one notification's turn")
	}
	return s.users[ids[len(ids)-1]]
}

// unownedReason says why a turn answering user message parent (u, nil
// when unknown) belongs to no invocation of the Client.
func (s *sessionState) unownedReason(u *userMsg, parent string) string {
	switch {
	case u != nil && u.unknownTask:
		return UnattributedUnknownTask
	case s.parentID != "" && s.job != nil:
		return UnattributedUntrackedJob // its job was dropped
	case s.parentID != "":
		return UnattributedUnknownTask // a child session no job named
	case u != nil && (u.sent || u.note != nil), u == nil && parent != "" && parent <= s.floor:
		return UnattributedEndedTurn
	case u != nil && u.seen:
		return UnattributedOtherPrompt
	default:
		return UnattributedUnseenMessage
	}
}

// startUnattributed starts the unattributed turn that answers info's
// parent message: an invocation of its own (Tracker.StartUnattributed),
// running until the session is idle or its next turn answers another
// message.
func (m *mapper) startUnattributed(s *sessionState, info rawInfo, reason string) context.Context {
	agent := cmp.Or(info.Agent, "opencode")
	ctx, inv := m.tracker.StartUnattributed(context.Background(), agent, s.id, instrument.UnattributedReason(reason))
	tr := &turn{ctx: ctx, end: inv.End, reason: reason}
	s.turns[info.ParentID] = tr
	s.current = tr
	return ctx
}

// startContinuation starts the continuation for the notification that
// info's parent message is, following up every unanswered notification of
// the same invocation posted up to it.
func (m *mapper) startContinuation(s *sessionState, info rawInfo) context.Context {
	u := s.users[info.ParentID]
	inv := u.note.job.j.InvocationID()
	var carriers []instrument.Carrier
	for _, n := range s.notes {
		if n.resolved && !n.abandoned || n.msgID > info.ParentID || n.job.j.InvocationID() != inv {
			continue
		}
		// An abandoned note's followup is closed already; its turn came
		// after all, and is its invocation's work.
		m.resolve(n)
		n.abandoned = false
		carriers = append(carriers, n.job.carrier)
	}
	if len(carriers) == 0 {
		return nil // already answered (read by another turn, or closed)
	}
	agent := cmp.Or(info.Agent, "opencode")
	ctx, c, err := m.tracker.StartContinuation(context.Background(), agent, s.id, carriers...)
	if err != nil {
		return nil
	}
	tr := &turn{ctx: ctx, end: c.End}
	s.turns[info.ParentID] = tr
	s.current = tr
	return ctx
}
