package otelcodex

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/wireproxy"
)

// Reasons of unattributed invocations (contract rule 7).
const (
	// UnattributedUnknownTurn: a request naming a turn none of the
	// Client's turn/starts returned (or none in time, WithTurnSync).
	UnattributedUnknownTurn = "unknown_turn"
	// UnattributedAmbiguous: a request whose evidence names more than
	// one owner (header and body name different turns, tool results of
	// another invocation, a prompt folded into a running turn).
	UnattributedAmbiguous = "ambiguous"
	// UnattributedExited: a request that came after the process exited.
	UnattributedExited = "exited"
)

// Attributes the Client sets besides the contract's.
const (
	// AttrTurnID (string) is Codex's turn id, on invoke_agent and
	// continue_agent spans.
	AttrTurnID = "codex.turn.id"
	// AttrThreadID (string) is Codex's thread id, on the roots of
	// one-shot runs (a session's is its gen_ai.conversation.id).
	AttrThreadID = "codex.thread.id"
	// AttrProcessID (string) is a background command's unified-exec
	// session id (write_stdin's session_id), on its background span.
	AttrProcessID = "codex.process.id"
	// AttrCommand (string) is a background command's cmd.
	AttrCommand = "codex.command"
	// AttrExitCode (int) is a background command's exit code, when known.
	AttrExitCode = "codex.exit_code"
	// AttrAmbiguous (string) is on the usage-less model-call span that
	// keeps an invocation from final because a request may have been its.
	AttrAmbiguous = "codex.request.ambiguous"
)

// providerAttr is gen_ai.provider.name of Codex's model calls and its
// invoke_agent spans: the Responses API.
var providerAttr = attribute.String(contract.AttrProviderName, contract.ProviderOpenAI)

var errExited = errors.New("otelcodex: codex exited")

// turn is one Codex turn: a prompt's (its invocation's root) or a
// continuation's.
type turn struct {
	id   string
	ctx  context.Context
	span trace.Span
	// text is the turn's last agent message; status turn/completed's.
	text   string
	status string
	err    error
	// folded is set when a second turn/start returned this turn's id: a
	// prompt that joined it, so its requests have two owners.
	folded bool
	ended  bool
	done   chan struct{}
}

// mapper turns what Codex prints (app-server notifications, exec events)
// and what its requests carry (the model wire) into spans. Its methods are
// safe for concurrent use.
type mapper struct {
	tracer   trace.Tracer
	tracker  *instrument.Tracker
	agent    string
	session  string
	turnSync time.Duration
	// kick is signalled (without blocking) when a job ends unsettled or
	// a turn completes: the Session's continuer looks again.
	kick chan struct{}

	// mu guards everything below; cond (on mu) is broadcast when a turn
	// is registered or the process exits.
	mu   sync.Mutex
	cond *sync.Cond
	// fixed, in a one-shot run, is the root's context: every request is
	// its.
	fixed context.Context
	// turns are the turns by Codex's id; starting counts turn/starts whose
	// response was not read yet.
	turns     map[string]*turn
	turnOrder []string
	starting  int
	// toolOwners and asked: each tool call a response asked for, with the
	// context of that call's owner and when the proxy read it.
	toolOwners *wireproxy.ToolOwners
	asked      map[string]time.Time
	// results are the tool calls whose result a request returned (their
	// execute_tool span is recorded); resultOrder bounds them.
	results     map[string]struct{}
	resultOrder []string
	// jobs by exec_command call id and by unified-exec session id;
	// endedEarly holds commands app-server reported ended before a
	// request showed them backgrounded.
	jobs       map[string]*job
	bySession  map[string]*job
	endedEarly map[string]threadItem
	earlyOrder []string
	// pending are ended jobs whose followup is not settled, oldest
	// first; completions are those the host is yet to be told of.
	pending     []*job
	completions []Completion
	jobSeq      int
	calls       int
	exited      bool
	// subs are the subagents' turns (subagent.go).
	subs subagents
}

func newMapper(tracer trace.Tracer, tracker *instrument.Tracker, agent, session string, turnSync time.Duration) *mapper {
	m := &mapper{
		tracer:     tracer,
		tracker:    tracker,
		agent:      agent,
		session:    session,
		turnSync:   turnSync,
		kick:       make(chan struct{}, 1),
		turns:      make(map[string]*turn),
		toolOwners: wireproxy.NewToolOwners(0),
		asked:      make(map[string]time.Time),
		results:    make(map[string]struct{}),
		jobs:       make(map[string]*job),
		bySession:  make(map[string]*job),
		endedEarly: make(map[string]threadItem),
	}
	m.cond = sync.NewCond(&m.mu)
	return m
}

func (m *mapper) signal() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// startPrompt starts the invocation of a prompt about to be sent: its
// root, a child of ctx's span.
func (m *mapper) startPrompt(ctx context.Context) (context.Context, *instrument.Invocation) {
	ctx, inv := m.tracker.StartInvocation(ctx, m.agent, m.session)
	inv.Span().SetAttributes(providerAttr)
	return ctx, inv
}

// sending notes a turn/start about to be written: requests of a turn not
// yet known may then wait for it.
func (m *mapper) sending() {
	m.mu.Lock()
	m.starting++
	m.mu.Unlock()
}

// started registers the turn id a turn/start returned for the turn running
// in ctx (its root or continuation span). A turn/start that failed passes
// id "".
func (m *mapper) started(id string, ctx context.Context) *turn {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.starting--
	m.cond.Broadcast()
	t := &turn{id: id, ctx: ctx, span: trace.SpanFromContext(ctx), done: make(chan struct{})}
	if id == "" {
		return t
	}
	t.span.SetAttributes(attribute.String(AttrTurnID, id))
	if old, ok := m.turns[id]; ok {
		// The prompt joined a turn that runs already: whose each of its
		// requests is, nothing says.
		old.folded = true
		m.taint(old.ctx, "prompt folded into a running turn")
		m.taint(ctx, "prompt folded into a running turn")
		t.folded = true
		return t
	}
	m.turns[id] = t
	m.turnOrder = append(m.turnOrder, id)
	if len(m.turnOrder) > wireproxy.DefaultMaxTools {
		delete(m.turns, m.turnOrder[0])
		m.turnOrder = m.turnOrder[1:]
	}
	if m.exited {
		m.endTurn(t, "", errExited)
	}
	return t
}

// turnCompleted ends the turn app-server reports completed.
func (m *mapper) turnCompleted(info turnInfo) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.turns[info.ID]
	if !ok {
		return
	}
	var err error
	if info.Status != "completed" {
		msg := "codex: turn " + info.Status
		if info.Error != nil && info.Error.Message != "" {
			msg += ": " + info.Error.Message
		}
		err = errors.New(msg)
	}
	m.endTurn(t, info.Status, err)
}

// agentMessage records a turn's agent message: the last is its text.
func (m *mapper) agentMessage(turnID, text string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if t, ok := m.turns[turnID]; ok && !t.ended {
		t.text = text
	}
}

func (m *mapper) endTurn(t *turn, status string, err error) {
	if t.ended {
		return
	}
	t.ended, t.status, t.err = true, status, err
	endSpan(t.span, err)
	close(t.done)
	m.signal()
}

// waitTurn returns the turn of id, waiting (at most turnSync) while a
// turn/start's response is still to be read. It is called with mu held.
func (m *mapper) waitTurn(id string) *turn {
	if t, ok := m.turns[id]; ok || m.starting == 0 {
		return t
	}
	deadline := time.Now().Add(m.turnSync)
	timer := time.AfterFunc(m.turnSync, func() {
		m.mu.Lock()
		m.cond.Broadcast()
		m.mu.Unlock()
	})
	defer timer.Stop()
	for {
		if t, ok := m.turns[id]; ok {
			return t
		}
		if m.starting == 0 || m.exited || !time.Now().Before(deadline) {
			return nil
		}
		m.cond.Wait()
	}
}

// exit ends what is open when the process has exited: the turns, the jobs
// still running (Codex kills them: interrupted) and the followups nobody
// will answer (interrupted when the process was stopped, session_closed
// otherwise).
func (m *mapper) exit(stopped bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.exited {
		return
	}
	m.exited = true
	m.cond.Broadcast()
	for _, id := range m.turnOrder {
		m.endTurn(m.turns[id], "", errExited)
	}
	m.exitSubagents()
	for _, j := range m.jobOrder() {
		if j.settled {
			continue
		}
		reason := instrument.FollowupSessionClosed
		if !j.ended || stopped {
			reason = instrument.FollowupInterrupted
		}
		if !j.ended {
			m.endJob(j, "killed", nil, errors.New("codex: command killed when codex exited"))
		}
		j.settled = true
		_ = m.tracker.CloseFollowup(context.Background(), j.carrier, reason, "")
	}
	m.pending = nil
	m.completions = nil
}

// taint keeps ctx's invocation from final: a request that may have been
// its (wireproxy.KeepFromFinal).
func (m *mapper) taint(ctx context.Context, why string) {
	wireproxy.KeepFromFinal(m.tracer, ctx, providerAttr, attribute.String(AttrAmbiguous, why))
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
	if m.fixed != nil {
		m.taint(m.fixed, "request too large to read")
	}
	for _, id := range m.turnOrder {
		if t := m.turns[id]; !t.ended {
			m.taint(t.ctx, "request too large to read")
		}
	}
	m.taintSubagents("request too large to read")
}

// event handles one app-server notification.
func (m *mapper) event(ev event) {
	switch ev.kind {
	case evItemCompleted:
		switch ev.item.Type {
		case "agentMessage":
			m.agentMessage(ev.turnID, ev.item.Text)
		case "commandExecution":
			m.mu.Lock()
			m.commandEnded(ev.item)
			m.mu.Unlock()
		case "subAgentActivity":
			m.subagentActivity(ev.item)
		}
	case evTurnCompleted:
		m.turnCompleted(ev.turn)
		m.subagentTurnCompleted(ev.turn.ID)
	}
}
