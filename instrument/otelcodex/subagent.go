package otelcodex

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/genaicall"
	"github.com/agentledger/agentledger/instrument/internal/wireproxy"
)

// Subagents (multi_agent v2's collaboration tools spawn_agent, wait_agent,
// ..., offered by the gpt-6* and gpt-5.6-sol/terra models of Codex
// 0.169.0's catalog). A spawned agent runs in a thread of its own, whose
// turns Codex starts by itself; each of its requests says, in
// X-Codex-Turn-Metadata, whose it is: thread_source "subagent", its own
// thread_id and turn_id, and the parent_thread_id and parent_turn_id of
// the turn that spawned it (or sent it a task). Attribution follows that
// evidence and nothing else:
//
//   - a subagent's turn is a job of the invocation whose turn its
//     parent_turn_id names (a turn of the Client's, or a turn of a
//     subagent, for a subagent's subagent): a "background subagent" span
//     with the turn's model calls and tools under it. The job of a spawned
//     agent's first turn starts when the parent's request returns the
//     spawn_agent result ({"task_name": path}), as a child of that tool
//     span: the parent's turn still runs then, whenever the subagent's
//     first request comes. Its first request (agent_name path) takes it
//     over when its parent turn is of the same invocation. A subagent turn
//     no spawn result announced (its request came first, or a task sent
//     to an existing agent) starts its job at its first request, under
//     the parent turn (contract rule 6 when that has ended);
//   - the job ends when app-server reports the child turn completed (its
//     turn/completed, or the parent's subAgentActivity "completed"), when
//     a request of the parent delivers its FINAL_ANSWER, or when Codex
//     exits. Its answer waits in the parent's mailbox, which wait_agent
//     reads (in any later turn too), so the job promises one followup,
//     like a background command: the turn whose request delivers the
//     answer reads it (discharged when it is the job's invocation's, else
//     consumed_by), or, since Codex starts no parent turn for it, the
//     Session's continuation (ContinueAuto) or the host's
//     (Session.Continue, Completion.Agent). At exit an unread answer's
//     followup closes session_closed (interrupted when the process was
//     stopped), and a turn still working was killed: interrupted;
//   - evidence that names two owners (header and body naming different
//     turns, a parent turn two prompts share, a spawn call of another
//     invocation, a root_turn_id that is not the parent's) makes the
//     request an unattributed invocation and taints each candidate. A
//     parent turn nobody started is UnattributedUnknownTurn.
//
// A forked subagent's first request repeats the parent's history,
// spawn_agent call included (its result "aborted"): tool results of calls
// the subagent's own requests did not ask for are not its tools.

// Attributes of background subagent spans.
const (
	// AttrAgentPath (string) is a subagent's canonical task name
	// (X-Codex-Turn-Metadata agent_name, e.g. "/root/task_1").
	AttrAgentPath = "codex.agent.path"
)

// kindSubagent is the suffix of a subagent's background span.
const kindSubagent = "subagent"

var (
	errSubagentKilled   = errors.New("codex: subagent killed when codex exited")
	errSubagentReplaced = errors.New("codex: a second spawn of the task name before its first request")
)

// subagentMeta is what X-Codex-Turn-Metadata says of a subagent's request.
type subagentMeta struct {
	agent, threadID, turnID      string
	parentThreadID, parentTurnID string
	rootTurnID                   string
}

// readSubagentMeta reads a subagent's turn metadata; ok is false for a
// request of a thread nobody spawned (no parent_turn_id).
func readSubagentMeta(header string) (subagentMeta, bool) {
	var m struct {
		AgentName      string `json:"agent_name"`
		ThreadID       string `json:"thread_id"`
		TurnID         string `json:"turn_id"`
		ParentThreadID string `json:"parent_thread_id"`
		ParentTurnID   string `json:"parent_turn_id"`
		RootTurnID     string `json:"root_turn_id"`
		ThreadSource   string `json:"thread_source"`
	}
	if header == "" || json.Unmarshal([]byte(header), &m) != nil {
		return subagentMeta{}, false
	}
	if m.ParentTurnID == "" && m.ThreadSource != "subagent" {
		return subagentMeta{}, false
	}
	return subagentMeta{agent: m.AgentName, threadID: m.ThreadID, turnID: m.TurnID,
		parentThreadID: m.ParentThreadID, parentTurnID: m.ParentTurnID, rootTurnID: m.RootTurnID}, true
}

// subagent is one turn of a spawned agent: a background job of the
// invocation whose turn spawned it (or sent it the task).
type subagent struct {
	meta subagentMeta
	ctx  context.Context
	j    *instrument.Job
	// jb is its job among the mapper's (its followup: its answer).
	jb *job
	// calls counts its requests in flight; final is set when its last
	// response asked for no tool: Codex ends a turn there.
	calls int
	final bool
	ended bool
}

// subagents holds the subagent turns of one process. It is guarded by
// the mapper's mu.
type subagents struct {
	// byTurn are the subagent turns by Codex's turn id, in start order
	// (order, bounded).
	byTurn map[string]*subagent
	order  []string
	// spawned are the jobs a spawn_agent result started, by the task
	// name it gave, until the agent's first request takes one over;
	// early counts, by task name, the first turns whose request came
	// before the spawn result (which then starts no job).
	spawned map[string]*subagent
	early   map[string]int
	// known are the task names whose first turn has a job.
	known map[string]bool
}

func (s *subagents) init() {
	if s.byTurn == nil {
		s.byTurn = make(map[string]*subagent)
		s.spawned = make(map[string]*subagent)
		s.early = make(map[string]int)
		s.known = make(map[string]bool)
	}
}

// attributeSubagent decides the owner of a subagent's request. It is
// called with mu held.
func (m *mapper) attributeSubagent(ev evidence, body []byte) wireproxy.Decision {
	m.subs.init()
	s, reason := m.subagentTurn(ev)
	if s == nil {
		// Its tool results are not recorded: which of them are its own
		// calls' (not a forked history's), nobody knows.
		if m.exited {
			reason = UnattributedExited
		}
		ctx, inv := m.tracker.StartUnattributed(context.Background(), m.agent, m.session, instrument.UnattributedReason(reason))
		inv.Span().SetAttributes(providerAttr)
		m.answersRead(ctx, body)
		return m.decision(ctx, func() { inv.End() })
	}
	// Only the results of the subagent's own calls are its tools: a
	// forked history repeats the parent's.
	own := ev.outputs[:0:0]
	for _, o := range ev.outputs {
		if c, ok := m.toolOwners.Owner(o.callID); ok && trace.SpanFromContext(c).SpanContext().SpanID() == s.j.Span().SpanContext().SpanID() {
			own = append(own, o)
		}
	}
	ev.outputs = own
	m.toolResults(s.ctx, ev)
	m.answersRead(s.ctx, body)
	s.calls++
	d := m.decision(s.ctx, nil)
	asked := 0
	onTool, done := d.OnTool, d.Done
	d.OnTool = func(id string) {
		m.mu.Lock()
		asked++
		m.mu.Unlock()
		onTool(id)
	}
	d.Done = func(u genaicall.Usage) {
		m.mu.Lock()
		s.calls--
		s.final = asked == 0 && u.Input != nil
		m.mu.Unlock()
		done(u)
	}
	return d
}

// subagentTurn returns the job of the subagent turn a request names,
// starting it at the turn's first request, or nil and the reason the
// request is nobody's. It is called with mu held.
func (m *mapper) subagentTurn(ev evidence) (*subagent, string) {
	meta := ev.sub
	if ev.bodyTurnID != "" && ev.bodyTurnID != meta.turnID {
		for _, id := range []string{meta.turnID, ev.bodyTurnID} {
			if s, ok := m.subs.byTurn[id]; ok {
				m.taint(s.ctx, "header and body name different turns")
			}
		}
		if ctx, _ := m.subagentParent(meta); ctx != nil {
			m.taint(ctx, "header and body name different turns")
		}
		return nil, UnattributedAmbiguous
	}
	if s, ok := m.subs.byTurn[meta.turnID]; ok && meta.turnID != "" {
		if s.ended {
			// A request of a turn that has ended: whose, the evidence
			// no longer says.
			m.taint(s.ctx, "request of an ended subagent turn")
			return nil, UnattributedAmbiguous
		}
		return s, ""
	}
	parent, reason := m.subagentParent(meta)
	if parent == nil {
		return nil, reason
	}
	s, ok := m.subs.spawned[meta.agent]
	switch {
	case ok && !wireproxy.SameInvocation(s.ctx, parent):
		m.taint(s.ctx, "spawn call of another invocation")
		m.taint(parent, "spawn call of another invocation")
		return nil, UnattributedAmbiguous
	case ok:
		delete(m.subs.spawned, meta.agent)
		s.meta = meta
		s.j.Span().SetAttributes(attribute.String(AttrThreadID, meta.threadID), attribute.String(AttrTurnID, meta.turnID))
	default:
		s = m.startSubagent(parent, meta)
		if !m.subs.known[meta.agent] && len(m.subs.early) < wireproxy.DefaultMaxTools {
			m.subs.early[meta.agent]++
		}
	}
	if len(m.subs.known) >= wireproxy.DefaultMaxTools {
		clear(m.subs.known)
	}
	m.subs.known[meta.agent] = true
	if meta.turnID != "" {
		m.subs.byTurn[meta.turnID] = s
		m.subs.order = append(m.subs.order, meta.turnID)
		m.boundSubagents()
	}
	return s, ""
}

// boundSubagents forgets the oldest ended subagent turns beyond
// wireproxy.DefaultMaxTools; open ones are kept (each holds a span open).
func (m *mapper) boundSubagents() {
	for len(m.subs.order) > wireproxy.DefaultMaxTools {
		id := m.subs.order[0]
		if s := m.subs.byTurn[id]; s != nil && !s.ended {
			return
		}
		delete(m.subs.byTurn, id)
		m.subs.order = m.subs.order[1:]
	}
}

// subagentParent returns the context of the turn a subagent's request
// names as its parent: the Client's turn (its root or continuation), or
// a subagent turn (a nested subagent); in a one-shot run every parent that
// is not a subagent turn is the run. It is called with mu held.
func (m *mapper) subagentParent(meta subagentMeta) (context.Context, string) {
	if p, ok := m.subs.byTurn[meta.parentTurnID]; ok && meta.parentTurnID != "" {
		if meta.rootTurnID != "" && p.meta.rootTurnID != "" && meta.rootTurnID != p.meta.rootTurnID {
			m.taint(p.ctx, "root turn differs from the parent's")
			return nil, UnattributedAmbiguous
		}
		// Ended or not: StartBackground parents a job launched from an
		// ended span on the invocation's nearest open span (rule 6).
		return p.ctx, ""
	}
	if m.fixed != nil {
		return m.fixed, ""
	}
	t := m.waitTurn(meta.parentTurnID)
	if t == nil || meta.parentTurnID == "" {
		return nil, UnattributedUnknownTurn
	}
	if t.folded {
		m.taint(t.ctx, "prompt folded into a running turn")
		return nil, UnattributedAmbiguous
	}
	if meta.rootTurnID != "" && meta.rootTurnID != meta.parentTurnID {
		m.taint(t.ctx, "root turn differs from the parent's")
		return nil, UnattributedAmbiguous
	}
	return t.ctx, ""
}

// startSubagent starts the job of a subagent turn, a child of ctx's span.
func (m *mapper) startSubagent(ctx context.Context, meta subagentMeta) *subagent {
	attrs := []attribute.KeyValue{attribute.String(AttrAgentPath, meta.agent)}
	if meta.turnID != "" {
		attrs = append(attrs, attribute.String(AttrThreadID, meta.threadID), attribute.String(AttrTurnID, meta.turnID))
	}
	jctx, j := m.tracker.StartBackground(ctx, kindSubagent, trace.WithAttributes(attrs...))
	m.jobSeq++
	jb := &job{callID: fmt.Sprintf("subagent-%d", m.jobSeq), agent: meta.agent, j: j, carrier: j.Carrier(), seq: m.jobSeq}
	m.jobs[jb.callID] = jb
	return &subagent{meta: meta, ctx: jctx, j: j, jb: jb}
}

// spawned handles the result of a spawn_agent call (tool span tctx, still
// open): the task name of the agent it started, whose first turn's job
// starts now, unless that turn's request came first. It is called with mu
// held.
func (m *mapper) spawned(tctx context.Context, o toolOutput) {
	var res struct {
		TaskName string `json:"task_name"`
	}
	if json.Unmarshal([]byte(o.output), &res) != nil || res.TaskName == "" {
		return
	}
	m.subs.init()
	if m.subs.early[res.TaskName] > 0 {
		m.subs.early[res.TaskName]--
		if m.subs.early[res.TaskName] == 0 {
			delete(m.subs.early, res.TaskName)
		}
		return
	}
	if old, ok := m.subs.spawned[res.TaskName]; ok {
		// A second spawn of that name before the first one's request:
		// which turn is whose, nothing says.
		m.taint(old.ctx, "two spawns of one task name")
		m.taint(tctx, "two spawns of one task name")
		m.endSubagent(old, errSubagentReplaced)
	}
	if len(m.subs.spawned) >= wireproxy.DefaultMaxTools {
		return // bounded: its turn's job will start at its first request
	}
	m.subs.spawned[res.TaskName] = m.startSubagent(tctx, subagentMeta{agent: res.TaskName})
}

// endSubagent ends a subagent turn's job once. Its answer waits in the
// parent's mailbox: the job is pending (its continuation owed) until a
// turn reads it (answersRead) or a continuation is started for it; with
// cause (it will never answer) its followup closes interrupted. It is
// called with mu held.
func (m *mapper) endSubagent(s *subagent, cause error) {
	if s.ended {
		return
	}
	s.ended = true
	if cause == nil {
		m.endJob(s.jb, "", nil, nil)
		return
	}
	m.endJob(s.jb, "", nil, cause)
	m.settle(s.jb, func() {
		_ = m.tracker.CloseFollowup(context.Background(), s.jb.carrier, contract.ReasonInterrupted, "")
	})
}

// subagentTurnCompleted handles app-server's report that a subagent turn
// ended: its thread's turn/completed, or the parent's subAgentActivity
// item "completed" (id "subagent-completed-{turn id}").
func (m *mapper) subagentTurnCompleted(turnID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.subs.byTurn[turnID]; ok && turnID != "" {
		m.endSubagent(s, nil)
	}
}

// subagentActivity handles a subAgentActivity item of app-server: a
// "completed" one ends the job of the child's turn, or the job its spawn
// started when no request of the child came.
func (m *mapper) subagentActivity(it threadItem) {
	if it.Kind != "completed" {
		return
	}
	m.subagentTurnCompleted(strings.TrimPrefix(it.ID, "subagent-completed-"))
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.subs.spawned[it.AgentPath]; ok && it.AgentPath != "" {
		delete(m.subs.spawned, it.AgentPath)
		m.endSubagent(s, nil)
	}
}

// answersRead records that the turn running in ctx read the answers its
// request delivers (FINAL_ANSWER agent messages): for each, the oldest
// unsettled turn of that agent has ended, and its followup is discharged
// by that turn when it is the job's invocation's, else closed consumed_by
// that turn's invocation. It is called with mu held.
func (m *mapper) answersRead(ctx context.Context, body []byte) {
	if len(m.subs.byTurn) == 0 || !bytes.Contains(body, []byte(`"agent_message"`)) {
		return
	}
	for _, agent := range finalAnswers(body) {
		for _, id := range m.subs.order {
			s := m.subs.byTurn[id]
			if s == nil || s.meta.agent != agent || s.jb.settled || s.calls > 0 {
				continue
			}
			m.endSubagent(s, nil)
			m.settle(s.jb, func() { _ = m.tracker.ConsumeFollowup(ctx, s.jb.carrier) })
			break
		}
	}
}

// finalAnswers returns the authors of the FINAL_ANSWER agent messages
// among a request's new input items (after its last model item).
func finalAnswers(body []byte) []string {
	var req struct {
		Input []struct {
			inputItem
			Author  string `json:"author"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"input"`
	}
	if json.Unmarshal(body, &req) != nil {
		return nil
	}
	start := 0
	for i := len(req.Input) - 1; i >= 0; i-- {
		if req.Input[i].modelItem() {
			start = i + 1
			break
		}
	}
	var out []string
	for _, it := range req.Input[start:] {
		if it.Type != "agent_message" || it.Author == "" || len(it.Content) == 0 {
			continue
		}
		if strings.HasPrefix(it.Content[0].Text, "Message Type: FINAL_ANSWER\n") {
			out = append(out, it.Author)
		}
	}
	return out
}

// exitSubagents ends the subagent turns still open when Codex exited
// (m.exited is set): one whose last response asked for no tool had ended
// its turn, its unread answer's followup then closes like an ended
// command's (exit); any other was killed (interrupted). It is called with
// mu held.
func (m *mapper) exitSubagents() {
	for _, s := range m.subs.spawned {
		// Spawned, and no request of it came.
		m.endSubagent(s, errSubagentKilled)
	}
	for _, id := range m.subs.order {
		s := m.subs.byTurn[id]
		if s == nil || s.ended {
			continue
		}
		if s.final && s.calls == 0 {
			m.endSubagent(s, nil)
		} else {
			m.endSubagent(s, errSubagentKilled)
		}
	}
}

// taintSubagents keeps the invocations of the subagent turns still open
// from final: a request nobody could read may have been theirs. It is
// called with mu held.
func (m *mapper) taintSubagents(why string) {
	for _, id := range m.subs.order {
		if s := m.subs.byTurn[id]; s != nil && !s.ended {
			m.taint(s.ctx, why)
		}
	}
	for _, s := range m.subs.spawned {
		m.taint(s.ctx, why)
	}
}
