package otelopencode

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sort"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
)

// Job kinds, the suffix of background span names.
const (
	KindSubagent = "subagent"
	KindShell    = "shell"
	// KindTurn is the rest of a prompt's turn after its root ended: the
	// caller gave up the call while OpenCode runs the turn on, or the
	// turn was not seen by the answer (see Client.Prompt).
	KindTurn = "turn"
)

// errUntracked is recorded on the span of a job dropped from tracking
// beyond WithMaxJobs.
var errUntracked = errors.New("opencode: job no longer tracked (WithMaxJobs): its end and its notification's turn are not recorded in this invocation, whose followup stays open")

// job is a background job a tool call launched, tracked until its
// followup is settled.
type job struct {
	key     string
	kind    string
	j       *instrument.Job
	ctx     context.Context
	carrier instrument.Carrier
	ended   bool
	// settled is set once the Client owes the job's followup nothing more:
	// it was discharged or closed, or the job was dropped beyond
	// WithMaxJobs (its followup then stays open on purpose, see dropJob).
	settled bool
	// note is the job's completion notification, once posted.
	note *note
	// elem is the job's place in the jobTable while tracked.
	elem *list.Element
}

// jobTable holds the background jobs whose followup is not settled yet,
// by key (the child session id of a subagent, the job id of a shell), in
// launch order. A job leaves it when its followup is settled, so it holds
// only jobs that still owe something; beyond max, add hands back the
// oldest, which the caller must drop fail-closed (mapper.dropJob).
type jobTable struct {
	max   int
	byKey map[string]*job
	// order holds the jobs oldest launch first; a job's elem is its
	// element.
	order list.List
}

func newJobTable(max int) *jobTable {
	return &jobTable{max: max, byKey: make(map[string]*job)}
}

// get returns the tracked job named key, or nil.
func (t *jobTable) get(key string) *job { return t.byKey[key] }

func (t *jobTable) len() int { return len(t.byKey) }

// add tracks jb and returns the oldest job, no longer tracked, when that
// makes more than max; otherwise nil.
func (t *jobTable) add(jb *job) (dropped *job) {
	t.byKey[jb.key] = jb
	jb.elem = t.order.PushBack(jb)
	if len(t.byKey) <= t.max {
		return nil
	}
	oldest := t.order.Front().Value.(*job)
	t.remove(oldest)
	return oldest
}

// remove stops tracking jb; it does nothing when jb is not tracked.
func (t *jobTable) remove(jb *job) {
	if jb.elem == nil {
		return
	}
	t.order.Remove(jb.elem)
	jb.elem = nil
	if t.byKey[jb.key] == jb {
		delete(t.byKey, jb.key)
	}
}

// toolJob starts the background job a tool call launched, and maps a
// subagent's child session to the context its turns run in.
func (m *mapper) toolJob(s *sessionState, t *toolPart, p part) {
	st := p.State
	var key, kind string
	switch {
	case p.Tool == "task" && st.Metadata.SessionID != "":
		key, kind = st.Metadata.SessionID, KindSubagent
		child := m.sessions.use(key)
		if child.parentID == "" {
			child.parentID = s.id
		}
		child.tracked = true
		if !st.Metadata.Background {
			// A foreground subagent: its turns are part of the running tool
			// call, also when the call resumes a session an earlier call
			// ran (OpenCode's task_id): the earlier call's invocation may
			// be final, and the resuming one owns the new turns.
			if !t.ended && child.owner != t.ctx {
				child.owner = t.ctx
				m.replay(child)
			}
			return
		}
	case p.Tool == "bash" && st.wentToBackground():
		key, kind = st.Metadata.JobID, KindShell
		if key == "" {
			key = p.CallID
		}
	default:
		return
	}
	if t.job != nil || key == "" {
		return
	}
	if m.jobs.get(key) != nil {
		return
	}
	ctx, j := m.tracker.StartBackground(t.ctx, kind, trace.WithAttributes(
		attribute.String(AttrSessionID, key),
		attribute.String(contract.AttrToolCallID, p.CallID),
	))
	jb := &job{key: key, kind: kind, j: j, ctx: ctx, carrier: j.Carrier()}
	t.job = jb
	s.launched = append(s.launched, jb)
	if dropped := m.jobs.add(jb); dropped != nil {
		m.dropJob(dropped)
	}
	if kind == KindSubagent {
		child := m.sessions.use(key)
		child.job = jb
		child.owner = ctx
		m.replay(child)
		if child.ended {
			m.endJob(jb, child.aborted, child.errMsg)
		}
	}
}

// awaitsJob reports whether s is a child session of a tracked session
// whose job is not known yet: its messages are kept (orphans) until the
// task tool's part that names it arrives.
func (m *mapper) awaitsJob(s *sessionState) bool {
	if s.parentID == "" || s.owner != nil || s.job != nil || s.gaveUp {
		return false
	}
	parent := m.sessions.lookup(s.parentID)
	return parent != nil && parent.tracked
}

// replay applies the messages and parts of a child session seen before
// the context of its turns was known.
func (m *mapper) replay(s *sessionState) {
	orphans := s.orphans
	s.orphans, s.orphanAt = nil, nil
	for _, o := range orphans {
		if o.Info.ID != "" {
			m.message(o.Info)
		}
		for _, p := range o.Parts {
			m.part(p, 0)
		}
	}
}

// notification handles a completion notification posted into session s
// for the job named key.
func (m *mapper) notification(s *sessionState, msgID, key string) {
	u, ok := s.users[msgID]
	if ok && (u.note != nil || u.unknownTask) {
		return // seen before
	}
	if !ok {
		if !s.tracked {
			return
		}
		u = &userMsg{}
		s.users[msgID] = u
	}
	jb := m.jobs.get(key)
	if jb == nil || jb.note != nil {
		// A job this Client does not track (it did not see it start, or
		// its followup is settled, or it was dropped beyond WithMaxJobs),
		// or a second notification of one job: its turn is unattributed.
		u.unknownTask = true
		return
	}
	if !jb.ended {
		m.endJob(jb, false, "")
	}
	n := &note{msgID: msgID, job: jb}
	jb.note = n
	u.note = n
	s.notes = append(s.notes, n)
	sort.Slice(s.notes, func(i, j int) bool { return s.notes[i].msgID < s.notes[j].msgID })
}

// endJob ends a job's background span. Every background subagent promises
// a notification when it starts; an abort cancels it, and then the
// followup is closed as interrupted.
func (m *mapper) endJob(jb *job, aborted bool, errMsg string) {
	if jb.ended {
		return
	}
	jb.ended = true
	var outcome error
	switch {
	case aborted:
		outcome = errAborted
	case errMsg != "":
		outcome = fmt.Errorf("opencode: %s", errMsg)
	}
	jb.j.EndWithFollowup(outcome)
	if aborted {
		m.settle(jb)
		_ = m.tracker.CloseFollowup(context.Background(), jb.carrier, contract.ReasonInterrupted, "")
	}
}

// settle records that jb's followup is discharged or closed: the job is
// no longer tracked.
func (m *mapper) settle(jb *job) {
	jb.settled = true
	m.jobs.remove(jb)
}

// resolve records that notification n is answered (by a turn, or closed):
// its job is settled.
func (m *mapper) resolve(n *note) {
	n.resolved = true
	m.settle(n.job)
}

// dropJob stops tracking a job beyond WithMaxJobs, fail-closed: its span
// ends with errUntracked if it still runs (promising its followup), and
// its followup is never settled: no followup_closed is emitted for it,
// since the job may still wake a turn, whose usage the Client can then
// only record as unattributed. Its invocation therefore stays open on
// both halves until their open timeout closes it incomplete with
// open_followup:<job>, never final. Its later work (the child session's
// turns, the notification's turn) is kept out of its invocation, and the
// Client forgets the job: the followup is settled as far as the Client is
// concerned, so no later event (an abort, the session's deletion) closes
// it either.
func (m *mapper) dropJob(jb *job) {
	if !jb.ended {
		jb.ended = true
		jb.j.EndWithFollowup(errUntracked)
	}
	jb.settled = true
	if jb.note != nil {
		jb.note.resolved = true
	}
	if child := m.sessions.lookup(jb.key); child != nil && child.job == jb {
		child.owner = nil
	}
	m.stats.jobEvicted()
}
