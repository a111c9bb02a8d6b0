package otelclaudecode

import (
	"context"
	"errors"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/wireproxy"
)

// Attributes this package adds besides the contract's and GenAI's.
const (
	// AttrTaskID and AttrTaskRunID are the CLI's ids of a background task
	// (task_started's task_id and run_id), on background spans.
	AttrTaskID    = "claude_code.task.id"
	AttrTaskRunID = "claude_code.task.run_id"
	// AttrTaskStatus is the task's final status ("completed", "failed",
	// "stopped", "killed"), on background spans.
	AttrTaskStatus = "claude_code.task.status"
	// AttrReportedPrefix prefixes the attributes an invoke_agent span
	// gets when the usage the CLI reported for a turn
	// (model_usage_since_last_result) differs from what the model-wire
	// proxy counted: ".input_tokens", ".cache_read_input_tokens",
	// ".cache_creation_input_tokens", ".output_tokens", the CLI's counts
	// in the Anthropic sense (input without cache tokens). The proxy's
	// counts are the ones the invocation totals; this is a cross-check.
	AttrReportedPrefix = "claude_code.usage.reported"
)

// Reasons of unattributed turns (contract rule 7, the value of
// invocation.unattributed).
const (
	// UnattributedUnknownTask: the CLI started a turn for notifications of
	// tasks this Client never saw start.
	UnattributedUnknownTask = "unknown_task"
	// UnattributedUnknownPrompt: a turn answering user messages this
	// Client did not send.
	UnattributedUnknownPrompt = "unknown_prompt"
	// UnattributedSelfStarted: a turn the CLI started with no prompt and no
	// notification pending (a scheduled wakeup, a cron job).
	UnattributedSelfStarted = "self_started"
)

var (
	errExited      = errors.New("claude code: process exited")
	errInterrupted = errors.New("claude code: process interrupted")
)

// mapper turns the CLI's events into spans. All its state is guarded by
// mu, and every span it ends is ended with mu held (see settled).
type mapper struct {
	tracer  trace.Tracer
	tracker *instrument.Tracker
	agent   string
	// onMismatch, when set, is told of every usage mismatch (telemetry).
	onMismatch func()

	// mu guards every field below and the state they point to.
	mu sync.Mutex
	// session is the CLI's session id (gen_ai.conversation.id).
	session string
	// prompts are the prompts written to the CLI whose result has not come.
	prompts map[string]*prompt
	// turn is the turn running now, nil between results.
	turn *turn
	// calls counts the model requests in flight through the proxy.
	calls int
	// tools' owners: the context of the model call whose response asked
	// for each tool use; the request returning a tool's result is that
	// call's owner's.
	toolOwners *wireproxy.ToolOwners
	// syncStream, when set, waits until every line the CLI printed so far
	// has been handled; false when it could not tell.
	syncStream func() bool
	// seq numbers the prompts in the order they were registered.
	seq int
	// used are the host's prompt uuids made invocation ids (Exec), the
	// latest maxUsedIDs in usedOrder.
	used      map[string]struct{}
	usedOrder []string
	// unknownTasks are the task ids requests named (a subagent's header,
	// a notification) before the stream said the task started, oldest
	// first in unknownOrder (bounded by wireproxy.DefaultMaxTools).
	unknownTasks map[string]struct{}
	unknownOrder []string
	// tools are the tool uses of the turns since the last result, and the
	// open ones of earlier turns, by tool use id.
	tools map[string]*tool
	// jobs are the background tasks, by task id and by run id;
	// foreground are tasks that run in the foreground, by task id.
	jobs, runs map[string]*job
	foreground map[string]task
	// pending are notifications posted that no turn has read yet; an
	// entry without a job is a task this mapper never saw start.
	pending []*job
	// wire is the usage of the model calls the proxy saw end since the
	// last result, for the cross-check with the result's report.
	wire   wireSum
	exited bool
}

// prompt is one prompt written to the CLI: an invocation whose root ends
// at the result that answers it.
type prompt struct {
	uuid string
	// text is the prompt as written: the evidence a request answers it;
	// seq its registration order.
	text string
	seq  int
	// unnamed is set for a host's prompt without a uuid (Exec): no
	// result names it, results answer such prompts in order.
	unnamed bool
	ctx     context.Context
	inv     *instrument.Invocation
	// done is closed once res or err is set.
	done chan struct{}
	res  Result
	err  error
}

// turn is a run of model requests up to a result. ctx is the context its
// spans start in: a prompt's root, a continuation or an unattributed
// invocation; end, when set, ends the continuation or unattributed root.
type turn struct {
	ctx   context.Context
	owner *prompt
	end   func(error)
}

func newMapper(tracer trace.Tracer, tracker *instrument.Tracker, agent, session string) *mapper {
	return &mapper{
		tracer:       tracer,
		tracker:      tracker,
		agent:        agent,
		session:      session,
		prompts:      make(map[string]*prompt),
		toolOwners:   wireproxy.NewToolOwners(0),
		unknownTasks: make(map[string]struct{}),
		tools:        make(map[string]*tool),
		jobs:         make(map[string]*job),
		runs:         make(map[string]*job),
		foreground:   make(map[string]task),
	}
}

// register starts the invocation of a prompt the caller is about to write
// with id uuid and text: its root span, a child of ctx's span.
func (m *mapper) register(ctx context.Context, uuid, text string) *prompt {
	m.mu.Lock()
	defer m.mu.Unlock()
	ctx, inv := m.tracker.StartInvocation(ctx, m.agent, m.session)
	inv.Span().SetAttributes(providerAttr)
	m.seq++
	p := &prompt{uuid: uuid, text: text, seq: m.seq, ctx: ctx, inv: inv, done: make(chan struct{})}
	if m.exited {
		m.finish(p, Result{}, errExited)
		return p
	}
	m.prompts[uuid] = p
	return p
}

// learnSession records the session id the CLI printed, for a process
// whose session the Client did not choose (Exec): the roots started
// before it get it as their gen_ai.conversation.id, read when they end.
func (m *mapper) learnSession(id string) {
	m.session = id
	for _, p := range m.prompts {
		p.inv.Span().SetAttributes(attribute.String(contract.AttrConversationID, id))
	}
}

// fail ends a prompt that could not be written.
func (m *mapper) fail(p *prompt, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.prompts[p.uuid]; ok {
		delete(m.prompts, p.uuid)
		m.finish(p, Result{}, err)
	}
}

// finish ends the prompt's root: the caller has its result (or err).
func (m *mapper) finish(p *prompt, res Result, err error) {
	res.InvocationID, res.SessionID = p.inv.ID(), m.session
	if err != nil {
		p.inv.Span().RecordError(err)
		p.inv.Span().SetStatus(codes.Error, err.Error())
	} else if res.IsError {
		p.inv.Span().SetStatus(codes.Error, "claude code: result "+res.Subtype)
	}
	p.inv.End()
	p.res, p.err = res, err
	close(p.done)
}

// settled returns once every span end in progress has returned: spans are
// ended with mu held, so a Wait the ledger woke is ordered after the span
// that settled the invocation has passed the whole pipeline.
func (m *mapper) settled() {
	m.mu.Lock()
	defer m.mu.Unlock()
}

// handle applies one event.
func (m *mapper) handle(ev event) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.exited {
		return
	}
	if m.session == "" && ev.SessionID != "" {
		m.learnSession(ev.SessionID)
	}
	switch ev.Type {
	case typeSystem:
		m.system(ev)
	case typeCommandLifecycle:
		m.commandStarted(ev)
	case typeAssistant:
		for _, b := range ev.Blocks {
			if b.Type == "tool_use" && b.ID != "" {
				m.toolUse(ev.ParentToolUseID, b)
			}
		}
	case typeUser:
		for _, b := range ev.Blocks {
			if b.Type == "tool_result" {
				m.toolResult(b)
			}
		}
		if ev.IsReplay && ev.Origin.Kind == originTask {
			m.replayedNotification(ev.Origin.RunID)
		}
	case typeResult:
		m.result(ev.Result, ev.Origin)
	}
}

func (m *mapper) system(ev event) {
	switch ev.Subtype {
	case subStatus:
		if ev.Status == statusRequesting {
			m.beginTurn(ev.UserMessageUUIDs)
		}
	case subTaskStarted:
		m.taskStarted(ev.Task)
	case subTaskUpdated:
		m.taskUpdated(ev.Task)
	case subTaskNotification:
		m.taskNotification(ev.Task)
	}
}

// beginTurn makes sure a turn runs for a model request that answers the
// prompts uuids (none for a turn the CLI started by itself). The newest
// prompt of ours among them owns the request: a prompt written while a
// turn ran is read by that turn, whose later requests answer it.
func (m *mapper) beginTurn(uuids []string) {
	var owner *prompt
	for _, u := range uuids {
		if p, ok := m.prompts[u]; ok {
			owner = p
		}
	}
	// A turn the CLI starts by itself (no prompt) is what its request
	// carries: the proxy starts the continuation it is, when it is one.
	if owner != nil {
		m.promptTurn(owner)
	}
}

// promptTurn makes p's the running turn, unless it already is.
func (m *mapper) promptTurn(p *prompt) {
	if m.turn == nil || m.turn.owner != p {
		m.switchTurn(&turn{ctx: p.ctx, owner: p})
	}
}

// commandStarted makes the prompt the CLI started processing the running
// turn when none runs: a /compact, whose requests carry no prompt.
func (m *mapper) commandStarted(ev event) {
	if ev.Status != "started" || m.turn != nil {
		return
	}
	if p, ok := m.prompts[ev.UUID]; ok {
		m.promptTurn(p)
	}
}

// switchTurn makes t the running turn; a continuation or unattributed turn
// it replaces is over (its requests are done; the new owner's follow).
func (m *mapper) switchTurn(t *turn) {
	if m.turn != nil && m.turn.end != nil {
		m.turn.end(nil)
	}
	m.turn = t
}

// result ends the running turn: the prompts it answered get their result,
// a continuation or unattributed turn ends.
func (m *mapper) result(r *result, o origin) {
	m.reconcile(r.SinceLast)
	res := Result{Text: r.Text, IsError: r.IsError, Subtype: r.Subtype, NumTurns: r.NumTurns}
	for _, u := range r.UserUUIDs {
		if p, ok := m.prompts[u]; ok {
			delete(m.prompts, u)
			m.finish(p, res, nil)
		}
	}
	if len(r.UserUUIDs) == 0 && o.Kind != originTask {
		m.answerUnnamed(res)
	}
	if m.turn != nil {
		m.switchTurn(nil)
	} else if o.Kind == originTask {
		m.emptyWake(o.RunID)
	}
	m.wire = wireSum{afterSubagent: m.wire.subagent}
	m.prune()
}

// prune forgets what no later event can change: ended tools, settled jobs,
// foreground tasks whose tool has answered.
func (m *mapper) prune() {
	for id, fg := range m.foreground {
		if t, ok := m.tools[fg.ToolUseID]; !ok || t.ended {
			delete(m.foreground, id)
		}
	}
	for id, t := range m.tools {
		if t.ended {
			delete(m.tools, id)
		}
	}
	for id, j := range m.jobs {
		if j.ended && j.settled {
			delete(m.jobs, id)
		}
	}
	for id, j := range m.runs {
		if j.ended && j.settled {
			delete(m.runs, id)
		}
	}
}

// exit ends everything still open when the process has exited. Followups
// nobody will answer are closed: interrupted when the process was stopped,
// session_closed when it ended by itself.
func (m *mapper) exit(interrupted bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.exited {
		return
	}
	reason, cause := instrument.FollowupSessionClosed, errExited
	if interrupted {
		reason, cause = instrument.FollowupInterrupted, errInterrupted
	}
	for _, t := range m.tools {
		if !t.ended {
			t.ended = true
			endSpan(t.span, cause)
		}
	}
	// Every run of every task: a task's earlier runs are by run id only.
	for _, jobs := range []map[string]*job{m.jobs, m.runs} {
		for _, j := range jobs {
			m.endJob(j, "", cause)
			if !j.settled {
				j.settled = true
				_ = m.tracker.CloseFollowup(context.Background(), j.carrier, reason, "")
			}
		}
	}
	if m.turn != nil && m.turn.end != nil {
		m.turn.end(cause)
	}
	m.turn = nil
	for u, p := range m.prompts {
		delete(m.prompts, u)
		m.finish(p, Result{}, cause)
	}
	m.pending = nil
	m.exited = true
}

func endSpan(s trace.Span, err error) {
	if err != nil {
		s.RecordError(err)
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}

// oversized records a request the proxy could not read: it may have been
// any running turn's, so none of them can be final.
func (m *mapper) oversized() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.ambiguous("request too large to read", func(*prompt) bool { return true })
	if m.turn != nil && m.turn.owner == nil {
		m.taint(m.turn.ctx, "request too large to read")
	}
}
