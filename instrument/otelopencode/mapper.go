package otelopencode

import (
	"cmp"
	"container/list"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/internal/contract"
)

// Attributes this package adds besides the contract's and GenAI's.
const (
	// AttrCost (double) is OpenCode's cost of an assistant message, in the
	// currency of its model configuration (USD for models.dev models).
	AttrCost = "opencode.cost"
	// AttrMessageID is the OpenCode message id of a model call.
	AttrMessageID = "opencode.message.id"
	// AttrSessionID names the OpenCode session a background job runs in
	// (the child session of a background subagent).
	AttrSessionID = "opencode.session.id"
	// AttrFinish is OpenCode's finish reason of an assistant message.
	AttrFinish = "opencode.finish"
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
	// had already ended or been settled: a prompt of the Client whose
	// invocation had ended (the call failed or was given up while
	// OpenCode went on), a notification whose followup was settled (an
	// abort closed it, another turn read it, its continuation ended), or a
	// message older than everything still open in the session.
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

// Job kinds, the suffix of background span names.
const (
	KindSubagent = "subagent"
	KindShell    = "shell"
)

// errAborted is recorded on spans of work an abort cancelled.
var errAborted = errors.New("opencode: aborted")

// errUntracked is recorded on the span of a job dropped from tracking
// beyond WithMaxJobs.
var errUntracked = errors.New("opencode: job no longer tracked (WithMaxJobs): its end and its notification's turn are not recorded in this invocation")

// abortErrorName is OpenCode's error name for an aborted message or session.
const abortErrorName = "MessageAbortedError"

// mapper turns OpenCode events and messages into spans. All its state is
// guarded by mu; OpenCode's own ids (sessions, messages, parts) key it, so
// an event seen twice (a replay after reconnecting, a repeated update)
// changes nothing.
type mapper struct {
	tracer      trace.Tracer
	tracker     *instrument.Tracker
	maxSessions int

	// mu guards every field below and the state they point to.
	mu       sync.Mutex
	sessions map[string]*sessionState
	// jobs are the jobs whose followup is not settled, bounded by
	// WithMaxJobs.
	jobs *jobTable
	// seen is closed and replaced whenever a message completes, for
	// waitCompleted.
	seen chan struct{}
	// seq orders sessions by last use, for eviction.
	seq uint64
	// evicted counts sessions forgotten beyond maxSessions.
	evicted int64
	// onEvict, when set, is told of every eviction (internal telemetry).
	onEvict func()
	// droppedJobs counts jobs dropped from tracking beyond WithMaxJobs;
	// onDropJob, when set, is told of each.
	droppedJobs int64
	onDropJob   func()
}

type sessionState struct {
	id       string
	parentID string
	lastUse  uint64
	// tracked is set on a session this Client sent a prompt to, and on
	// the child sessions of their subagents.
	tracked bool
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

type userMsg struct {
	// owner is the root context of a prompt the caller sent through the
	// Client, until its root ends; sent stays set.
	owner context.Context
	sent  bool
	note  *note
	// unknownTask is set when the message is the completion notification
	// of a job the Client does not track.
	unknownTask bool
	// seen is set when the server reported the message.
	seen bool
	// finish ends the root of a prompt sent with prompt_async, at the
	// first idle after a turn answered it.
	finish func()
}

type note struct {
	msgID    string
	job      *job
	resolved bool
}

// turn is a turn the session started by itself: a continuation, or an
// unattributed turn (reason set). It ends when the session goes idle or
// the session's next turn answers another user message.
type turn struct {
	ctx    context.Context
	end    func(...trace.SpanEndOption)
	reason string
	ended  bool
}

type assistantMsg struct {
	// turn is the context of the turn the model call belongs to (its
	// parent); tool calls of the message run in it too.
	turn  context.Context
	span  trace.Span
	ended bool
}

type toolPart struct {
	// msgID is the id of the assistant message the part belongs to.
	msgID string
	ctx   context.Context
	span  trace.Span
	start time.Time
	ended bool
	job   *job
}

type job struct {
	key     string
	kind    string
	j       *instrument.Job
	ctx     context.Context
	carrier instrument.Carrier
	ended   bool
	// settled is set once the job's followup is discharged or closed.
	settled bool
	// note is the job's completion notification, once posted.
	note *note
	// elem is the job's place in the jobTable while tracked.
	elem *list.Element
}

func newMapper(tracer trace.Tracer, tracker *instrument.Tracker, maxSessions, maxJobs int) *mapper {
	return &mapper{
		tracer:      tracer,
		tracker:     tracker,
		maxSessions: maxSessions,
		sessions:    make(map[string]*sessionState),
		jobs:        newJobTable(maxJobs),
		seen:        make(chan struct{}),
	}
}

func (m *mapper) session(id string) *sessionState {
	s, ok := m.sessions[id]
	if !ok {
		s = &sessionState{
			id:         id,
			users:      make(map[string]*userMsg),
			assistants: make(map[string]*assistantMsg),
			tools:      make(map[string]*toolPart),
			turns:      make(map[string]*turn),
		}
		m.sessions[id] = s
		m.seq++
		s.lastUse = m.seq
		// The new session is the most recently used: never its own victim.
		m.evict()
		return s
	}
	m.seq++
	s.lastUse = m.seq
	return s
}

// evict forgets the least recently used sessions that owe nothing, beyond
// maxSessions.
func (m *mapper) evict() {
	if len(m.sessions) <= m.maxSessions {
		return
	}
	var idle []*sessionState
	for _, s := range m.sessions {
		if !s.busy() {
			idle = append(idle, s)
		}
	}
	sort.Slice(idle, func(i, j int) bool { return idle[i].lastUse < idle[j].lastUse })
	for _, s := range idle {
		if len(m.sessions) <= m.maxSessions {
			return
		}
		delete(m.sessions, s.id)
		m.evicted++
		if m.onEvict != nil {
			m.onEvict()
		}
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

// registerPrompt records that user message msgID of session is the prompt
// of the invocation whose root context is ctx.
func (m *mapper) registerPrompt(session, msgID string, ctx context.Context) {
	m.registerAsync(session, msgID, ctx, nil)
}

// registerAsync is registerPrompt for a prompt whose answer does not come
// back with the request (prompt_async): finish is called, with the
// mapper's lock held, at the session's first idle after a turn answered
// the prompt (or a later user message), and must end the root.
func (m *mapper) registerAsync(session, msgID string, ctx context.Context, finish func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.session(session)
	s.tracked = true
	s.users[msgID] = &userMsg{owner: ctx, sent: true, finish: finish}
	s.maxMsg = max(s.maxMsg, msgID)
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

// promptDone drops the registration of a prompt whose root has ended.
func (m *mapper) promptDone(session, msgID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sessions[session]; ok {
		if u, ok := s.users[msgID]; ok {
			u.owner, u.finish = nil, nil
		}
		m.prune(s)
	}
}

// handle applies one event.
func (m *mapper) handle(ev event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := ev.Properties
	switch ev.Type {
	case evSessionCreated, evSessionUpdated:
		if p.Info != nil && p.Info.ID != "" {
			s := m.session(p.Info.ID)
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
			s := m.session(p.SessionID)
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

// errDeleted is recorded on spans a session's deletion cut short.
var errDeleted = errors.New("opencode: session deleted")

// deleted handles a deleted session: what it still ran ends, and the
// followups of the jobs it launched that no turn answered are closed with
// reason session_closed.
func (m *mapper) deleted(id string) {
	s, ok := m.sessions[id]
	if !ok {
		return
	}
	if s.current != nil {
		m.endTurn(s, s.current)
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
	delete(m.sessions, id)
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
	for id, s := range m.sessions {
		if s.busy() || running[id] && s.tracked {
			out = append(out, id)
		}
	}
	// Child sessions first: a job's own end is read before the
	// notification its parent session holds.
	sort.Slice(out, func(i, j int) bool {
		ci, cj := m.sessions[out[i]].parentID != "", m.sessions[out[j]].parentID != ""
		if ci != cj {
			return ci
		}
		return out[i] < out[j]
	})
	return out
}

func (m *mapper) message(info rawInfo) {
	if info.ID == "" || info.SessionID == "" {
		return
	}
	s := m.session(info.SessionID)
	if info.ID <= s.floor {
		return
	}
	s.maxMsg = max(s.maxMsg, info.ID)
	if !s.tracked && !m.awaitsJob(s) {
		// Nobody prompted this session through the Client: its turns are
		// not recorded, and nothing about them is kept.
		return
	}
	switch info.Role {
	case "user":
		u, ok := s.users[info.ID]
		if !ok {
			u = &userMsg{}
			s.users[info.ID] = u
		}
		u.seen = true
	case "assistant":
		m.assistant(s, info)
	}
}

func (m *mapper) assistant(s *sessionState, info rawInfo) {
	a, ok := s.assistants[info.ID]
	if !ok {
		if m.awaitsJob(s) {
			s.keepOrphan("m:"+info.ID, messageWithParts{Info: info})
			return
		}
		ctx := m.turnContext(s, info)
		model := info.ModelID
		attrs := []attribute.KeyValue{
			attribute.String(contract.AttrOperationName, contract.OpChat),
			attribute.String(contract.AttrRequestModel, info.ModelID),
			attribute.String(contract.AttrProviderName, info.ProviderID),
			attribute.String(contract.AttrConversationID, s.id),
			attribute.String(AttrMessageID, info.ID),
		}
		if info.Agent != "" {
			attrs = append(attrs, attribute.String(contract.AttrAgentName, info.Agent))
		}
		opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...)}
		if t := msTime(info.Time.Created); !t.IsZero() {
			opts = append(opts, trace.WithTimestamp(t))
		}
		_, span := m.tracer.Start(ctx, contract.OpChat+" "+model, opts...)
		a = &assistantMsg{turn: ctx, span: span}
		s.assistants[info.ID] = a
	}
	if a.span == nil || a.ended {
		return
	}
	if info.Time.Completed == 0 && info.Error == nil {
		return
	}
	a.ended = true
	if tk := info.Tokens; tk != nil {
		// OpenCode's input excludes cache reads and writes and its output
		// excludes reasoning (measured, testdata/README.md); GenAI counts
		// them in.
		a.span.SetAttributes(
			attribute.Int64(contract.AttrUsageInputTokens, tk.Input+tk.Cache.Read+tk.Cache.Write),
			attribute.Int64(contract.AttrUsageOutputTokens, tk.Output+tk.Reasoning),
			attribute.Int64(contract.AttrUsageCacheReadTokens, tk.Cache.Read),
			attribute.Int64(contract.AttrUsageCacheCreateTokens, tk.Cache.Write),
			attribute.Int64(contract.AttrUsageReasoningTokens, tk.Reasoning),
		)
	}
	a.span.SetAttributes(attribute.Float64(AttrCost, info.Cost))
	if info.Finish != "" {
		a.span.SetAttributes(attribute.String(AttrFinish, info.Finish))
	}
	if info.Error != nil {
		a.span.SetStatus(codes.Error, info.Error.Name+": "+info.Error.Data.Message)
	}
	end := msTime(info.Time.Completed)
	if end.IsZero() {
		end = time.Now()
	}
	a.span.End(trace.WithTimestamp(end))
	close(m.seen)
	m.seen = make(chan struct{})
}

// turnContext returns the context the model calls of assistant message
// info of a tracked session run in: the prompt's root, the child session's
// job, a continuation it starts when the message answers a completion
// notification, or else an unattributed turn it starts (contract rule 7),
// so that no model call of a tracked session is left out. It settles the
// notifications the turn reads.
func (m *mapper) turnContext(s *sessionState, info rawInfo) context.Context {
	parent := info.ParentID
	u := s.users[parent]
	s.answered = max(s.answered, parent)
	tr := s.turns[parent]
	if s.current != nil && s.current != tr {
		// The turn moved on to another user message.
		m.endTurn(s, s.current)
	}
	var ctx context.Context
	var reason string
	switch {
	case u != nil && u.owner != nil:
		ctx = u.owner
	case tr != nil && !tr.ended:
		ctx = tr.ctx
	case tr != nil:
		// Its turn has ended, and the message is answered again.
		reason = cmp.Or(tr.reason, UnattributedEndedTurn)
	case u != nil && u.note != nil:
		if ctx = m.startContinuation(s, info); ctx == nil {
			reason = UnattributedEndedTurn // settled before its turn
		}
	case s.owner != nil:
		// A child session: its own turns are the job's work.
		ctx = s.owner
	default:
		reason = s.unownedReason(u, parent)
	}
	if ctx == nil {
		ctx = m.startUnattributed(s, info, reason)
	}
	// Notifications posted before this turn's user message and not yet
	// answered are read by this turn.
	for _, n := range s.notes {
		if n.resolved || n.msgID > parent {
			continue
		}
		m.resolve(n)
		_ = m.tracker.ConsumeFollowup(ctx, n.job.carrier)
	}
	return ctx
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
	ctx, inv := m.tracker.StartUnattributed(context.Background(), agent, s.id, reason)
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
		if n.resolved || n.msgID > info.ParentID || n.job.j.InvocationID() != inv {
			continue
		}
		m.resolve(n)
		carriers = append(carriers, n.job.carrier)
	}
	if len(carriers) == 0 {
		return nil // already answered (closed as interrupted, or read by another turn)
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

// endTurn ends a turn the session started by itself.
func (m *mapper) endTurn(s *sessionState, tr *turn) {
	if tr != nil && !tr.ended {
		tr.ended = true
		tr.end()
	}
	if s.current == tr {
		s.current = nil
	}
}

// part applies a message part; at is the event's time (0 when unknown),
// the start of a tool call first seen before it runs.
func (m *mapper) part(p part, at int64) {
	if p.SessionID == "" || p.MessageID == "" {
		return
	}
	s := m.session(p.SessionID)
	if p.MessageID <= s.floor {
		return
	}
	s.maxMsg = max(s.maxMsg, p.MessageID)
	if jobKey, _, ok := parseNotification(p); ok {
		m.notification(s, p.MessageID, jobKey)
		return
	}
	if p.Type != "tool" || p.State == nil || p.ID == "" {
		return
	}
	a, ok := s.assistants[p.MessageID]
	if !ok {
		if m.awaitsJob(s) {
			s.keepOrphan("p:"+p.ID, messageWithParts{Parts: []part{p}})
		}
		return
	}
	if a.span == nil {
		return
	}
	t, ok := s.tools[p.ID]
	if !ok {
		opts := []trace.SpanStartOption{
			trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithAttributes(
				attribute.String(contract.AttrOperationName, contract.OpExecuteTool),
				attribute.String(contract.AttrToolName, p.Tool),
				attribute.String(contract.AttrToolCallID, p.CallID),
			),
		}
		start := msTime(p.State.Time.Start)
		if start.IsZero() {
			start = msTime(at)
		}
		if start.IsZero() {
			start = time.Now()
		}
		opts = append(opts, trace.WithTimestamp(start))
		// Tools run in the turn, beside its model calls.
		ctx, span := m.tracer.Start(a.turn, contract.OpExecuteTool+" "+p.Tool, opts...)
		t = &toolPart{msgID: p.MessageID, ctx: ctx, span: span, start: start}
		s.tools[p.ID] = t
	}
	m.toolJob(s, t, p)
	if t.ended || (p.State.Status != "completed" && p.State.Status != "error") {
		return
	}
	t.ended = true
	if p.State.Status == "error" {
		t.span.SetStatus(codes.Error, p.State.Error)
	}
	end := msTime(p.State.Time.End)
	if end.IsZero() {
		end = time.Now()
	}
	if end.Before(t.start) {
		end = t.start
	}
	t.span.End(trace.WithTimestamp(end))
}

// toolJob starts the background job a tool call launched, and maps a
// subagent's child session to the context its turns run in.
func (m *mapper) toolJob(s *sessionState, t *toolPart, p part) {
	st := p.State
	var key, kind string
	switch {
	case p.Tool == "task" && st.Metadata.SessionID != "":
		key, kind = st.Metadata.SessionID, KindSubagent
		child := m.session(key)
		if child.parentID == "" {
			child.parentID = s.id
		}
		child.tracked = true
		if !st.Metadata.Background {
			// A foreground subagent: its turns are part of the tool call.
			if child.owner == nil {
				child.owner = t.ctx
				m.replay(child)
			}
			return
		}
	case p.Tool == "bash" && st.runsInBackground():
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
		child := m.session(key)
		child.job = jb
		child.owner = ctx
		m.replay(child)
		if child.ended {
			m.endJob(jb, child.aborted, child.errMsg)
		}
	}
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
	jb.j.End(outcome, true)
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
// ends with errUntracked if it still runs, its followup is closed with
// reason cancelled (a visible reason, never a count met by nothing), and
// its later work (the child session's turns, the notification's turn) is
// kept out of its invocation.
func (m *mapper) dropJob(jb *job) {
	if !jb.ended {
		jb.ended = true
		jb.j.End(errUntracked, true)
	}
	jb.settled = true
	if jb.note != nil {
		jb.note.resolved = true
	}
	if child, ok := m.sessions[jb.key]; ok && child.job == jb {
		child.owner = nil
	}
	_ = m.tracker.CloseFollowup(context.Background(), jb.carrier, contract.ReasonCancelled, "")
	m.droppedJobs++
	if m.onDropJob != nil {
		m.onDropJob()
	}
}

// idle handles a session that went idle: its continuation has ended, a
// child session's job is done, and notifications an abort left without a
// turn will get none.
func (m *mapper) idle(id string) {
	s := m.session(id)
	if m.awaitsJob(s) && len(s.orphans) > 0 {
		// A child session whose turns ran without any job naming it: they
		// are recorded as unattributed turns rather than lost.
		s.gaveUp, s.tracked = true, true
		m.replay(s)
	}
	if s.current != nil {
		m.endTurn(s, s.current)
	}
	for msgID, u := range s.users {
		if u.finish != nil && u.seen && msgID <= s.answered {
			finish := u.finish
			u.finish, u.owner = nil, nil
			finish()
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
				m.resolve(n)
				_ = m.tracker.CloseFollowup(context.Background(), n.job.carrier, contract.ReasonInterrupted, "")
			}
		}
		if s.parentID == "" {
			s.aborted = false
		}
	}
	m.prune(s)
}

// prune forgets what is done in a session: it raises the floor to just
// below the oldest message, part or turn still open (to maxMsg when none
// is) and drops everything up to it, and drops settled notifications and
// jobs. Events about what lies below the floor are ignored, so a session
// that always owes something (a job that never ends) stays small while it
// is prompted, and a read-back of its whole history changes nothing.
func (m *mapper) prune(s *sessionState) {
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
		if u.owner != nil || u.finish != nil || u.note != nil && !u.note.resolved {
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
	s.notes = slices.DeleteFunc(s.notes, func(n *note) bool { return n.resolved })
	s.launched = slices.DeleteFunc(s.launched, func(jb *job) bool { return jb.settled })
}

// awaitsJob reports whether s is a child session of a tracked session
// whose job is not known yet: its messages are kept (orphans) until the
// task tool's part that names it arrives.
func (m *mapper) awaitsJob(s *sessionState) bool {
	if s.parentID == "" || s.owner != nil || s.job != nil || s.gaveUp {
		return false
	}
	parent, ok := m.sessions[s.parentID]
	return ok && parent.tracked
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

// nextAfter returns the greatest message id seen in session ("" if none),
// which a new prompt's id must sort after.
func (m *mapper) nextAfter(session string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sessions[session]; ok {
		return s.maxMsg
	}
	return ""
}

// completed reports whether assistant message msgID of session has
// completed (or is not attributed); otherwise it returns a channel that is
// closed when the next model call completes.
func (m *mapper) completed(session, msgID string) (bool, <-chan struct{}) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sessions[session]; ok {
		if a, ok := s.assistants[msgID]; ok && (a.ended || a.span == nil) {
			return true, nil
		}
		if msgID <= s.floor {
			return true, nil
		}
	}
	return false, m.seen
}
