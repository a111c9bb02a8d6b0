package otelclaudecode

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"

	"go.opentelemetry.io/otel/attribute"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/anthropicwire"
	"github.com/agentledger/agentledger/instrument/internal/genaicall"
	"github.com/agentledger/agentledger/instrument/internal/wireproxy"
)

// Attribution of the requests the CLI sends through the model-wire proxy.
// A request is attributed by what it carries, never by when it comes:
//
//   - a request with the X-Claude-Code-Agent-Id header is a subagent's:
//     the task of that id (a background subagent's job, or the Agent tool
//     use of a foreground one) owns it;
//   - else the newest of the Client's prompts whose text is in the
//     request's last user turn owns it (a prompt the CLI folds into a
//     running turn's request takes that turn over);
//   - else a compaction (its last user turn holds the CLI's compaction
//     instruction, isCompaction) is the running turn's: the turn that
//     asked for it, whatever tool results or notifications of the
//     conversation it repeats;
//   - else the tool results it returns name the tool uses, and so the
//     request whose response asked for them: its owner owns this one;
//   - else the task notifications it delivers name the jobs: the first
//     job's invocation owns it, as a continuation of that job (and of the
//     invocation's other jobs it delivers);
//   - else (a compaction, /compact, a request without a user turn of its
//     own) the turn the stream says runs owns it: the prompt whose
//     status line, or command_lifecycle "started", came last.
//
// The notifications a request delivers in a turn it does not start are
// read by that turn: a followup link when the turn is the job's
// invocation's, else consumed_by. Before deciding by the stream, the
// proxy waits until the Client has read every line the CLI printed
// before it sent the request (Process.syncStream). A request nobody can
// own is an unattributed invocation (contract rule 7); evidence that
// names two owners makes an unattributed invocation and keeps each
// candidate from final (a usage-less model call, AttrAmbiguous).

// AttrAmbiguous (string) is on the usage-less model-call span that keeps
// an invocation from final because a request may have been its: the
// evidence that named it and another owner.
const AttrAmbiguous = "claude_code.request.ambiguous"

// UnattributedAmbiguous: a request whose evidence names more than one
// owner.
const UnattributedAmbiguous = "ambiguous"

// headerAgentID is the header the CLI sends on a subagent's requests: the
// subagent's task id.
const headerAgentID = "X-Claude-Code-Agent-Id"

// evidence is what a request's last user turn carries.
type evidence struct {
	// texts are its text blocks (a string content is one).
	texts []string
	// toolResults are the tool use ids its tool_result blocks answer.
	toolResults []string
	// notes are the task ids of the <task-notification>s it delivers.
	notes []string
	// compaction is set when a text block of the turn is the CLI's
	// compaction instruction (/compact, or automatic compaction).
	compaction bool
	// parsed is false when the body's messages could not be read.
	parsed bool
}

// compactionPrefix and compactionTask start and hold the instruction
// Claude Code (2.1.328) appends to the conversation it compacts, after
// whatever the last user turn held (the tool results of the running turn,
// repeated): measured on the real CLI, testdata/README.md.
const (
	compactionPrefix = "CRITICAL: Respond with TEXT ONLY."
	compactionTask   = "Your task is to create a detailed summary of the conversation so far"
)

// isCompaction reports whether text is the CLI's compaction instruction.
func isCompaction(text string) bool {
	return strings.HasPrefix(text, compactionPrefix) && strings.Contains(text, compactionTask)
}

var (
	notificationRe = regexp.MustCompile(`(?s)<task-notification>(.*?)</task-notification>`)
	taskIDRe       = regexp.MustCompile(`<task-id>\s*([^<\s]+)\s*</task-id>`)
)

// readEvidence reads the last user turn of a Messages request body: the
// messages after its last assistant message, whatever their role.
func readEvidence(body []byte) evidence {
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil {
		return evidence{}
	}
	ev := evidence{parsed: true}
	start := 0
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "assistant" {
			start = i + 1
			break
		}
	}
	// The user turn is every message after the last assistant one: user
	// messages, and the system messages the CLI puts mid-conversation
	// (notifications, reminders).
	for _, msg := range req.Messages[start:] {
		var s string
		if json.Unmarshal(msg.Content, &s) == nil {
			ev.texts = append(ev.texts, s)
			continue
		}
		var blocks []struct {
			Type      string          `json:"type"`
			Text      string          `json:"text"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
		}
		if json.Unmarshal(msg.Content, &blocks) != nil {
			ev.parsed = false
			continue
		}
		for _, b := range blocks {
			switch b.Type {
			case "text":
				ev.texts = append(ev.texts, b.Text)
			case "tool_result":
				// Its content is the tool's output: no evidence of prompts
				// or notifications (a command may print anything).
				if b.ToolUseID != "" {
					ev.toolResults = append(ev.toolResults, b.ToolUseID)
				}
			}
		}
	}
	for _, t := range ev.texts {
		ev.compaction = ev.compaction || isCompaction(t)
		for _, n := range notificationRe.FindAllStringSubmatch(t, -1) {
			if id := taskIDRe.FindStringSubmatch(n[1]); id != nil {
				ev.notes = append(ev.notes, id[1])
			}
		}
	}
	return ev
}

// describe tells the proxy which requests are model calls: POST
// /v1/messages.
func describe(req *http.Request, body []byte) (genaicall.Request, bool) {
	if !anthropicwire.IsMessages(req) {
		return genaicall.Request{}, false
	}
	return anthropicwire.Describe(body, 1), true
}

// attribute decides the owner of one model request (see above). It runs
// on the proxy's goroutine for the request.
func (m *mapper) attribute(req *http.Request, body []byte) wireproxy.Decision {
	ev := readEvidence(body)
	agentID := req.Header.Get(headerAgentID)
	synced := true
	if m.syncStream != nil {
		synced = m.syncStream()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	ctx, reason := m.owner(agentID, ev, synced)
	if ctx == nil {
		if m.exited {
			// The process is gone; nothing it sends now is anybody's turn.
			reason = UnattributedUnknownPrompt
		}
		var inv *instrument.Invocation
		ctx, inv = m.tracker.StartUnattributed(context.Background(), m.agent, m.session, instrument.UnattributedReason(reason))
		inv.Span().SetAttributes(providerAttr)
		return m.decision(ctx, agentID != "", func() { inv.End() })
	}
	return m.decision(ctx, agentID != "", nil)
}

// decision is the proxy's Decision for a call owned by ctx (a subagent's
// when subagent is set): the tool uses its response asks for are owned by
// ctx too; end, when set, runs once the call is done.
func (m *mapper) decision(ctx context.Context, subagent bool, end func()) wireproxy.Decision {
	m.calls++
	return wireproxy.Decision{
		Ctx: ctx,
		OnTool: func(id string) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.toolOwners.Remember(id, ctx)
		},
		Done: func(u genaicall.Usage) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.calls--
			m.wire.add(u)
			m.wire.subagent = m.wire.subagent || subagent
			if end != nil {
				end()
			}
		},
	}
}

// unknownTask remembers a task id a request named before the stream said
// the task started (seenLate).
func (m *mapper) unknownTask(id string) {
	if _, ok := m.unknownTasks[id]; ok {
		return
	}
	m.unknownTasks[id] = struct{}{}
	m.unknownOrder = append(m.unknownOrder, id)
	if len(m.unknownOrder) > wireproxy.DefaultMaxTools {
		delete(m.unknownTasks, m.unknownOrder[0])
		m.unknownOrder = m.unknownOrder[1:]
	}
}

// owner returns the context a request's call starts in, or nil and the
// reason it is nobody's. synced is false when the stream could not be
// read up to the request: what only the stream tells is then unknown.
func (m *mapper) owner(agentID string, ev evidence, synced bool) (context.Context, string) {
	if agentID != "" {
		ctx := m.subagentCtx(agentID)
		if ctx == nil {
			m.unknownTask(agentID)
			return nil, UnattributedUnknownTask
		}
		m.readNotes(ctx, ev.notes)
		return ctx, ""
	}
	if !ev.parsed {
		return nil, UnattributedUnknownPrompt
	}
	// The newest of our prompts the request carries.
	var owner *prompt
	texts := map[string]int{}
	for _, p := range m.prompts {
		if p.text == "" || !carries(ev.texts, p.text) {
			continue
		}
		texts[p.text]++
		if owner == nil || p.seq > owner.seq {
			owner = p
		}
	}
	if owner != nil {
		if texts[owner.text] > 1 {
			// Two prompts of the same text: which one this request answers
			// is not known.
			m.ambiguous("prompt text", func(p *prompt) bool { return p.text == owner.text })
			return nil, UnattributedAmbiguous
		}
		m.promptTurn(owner)
		m.readNotes(owner.ctx, ev.notes)
		return owner.ctx, ""
	}
	if ev.compaction {
		// A compaction belongs to the turn that asked for it, whatever
		// tool results or notifications of the conversation it repeats.
		return m.runningTurn(synced)
	}
	if len(ev.toolResults) > 0 {
		var ctx context.Context
		for _, id := range ev.toolResults {
			c, ok := m.toolOwners.Owner(id)
			if !ok {
				continue
			}
			if ctx != nil && !wireproxy.SameInvocation(ctx, c) {
				m.taint(ctx, "tool results")
				m.taint(c, "tool results")
				return nil, UnattributedAmbiguous
			}
			if ctx == nil {
				ctx = c
			}
		}
		if ctx != nil {
			m.readNotes(ctx, ev.notes)
			return ctx, ""
		}
	}
	if len(ev.notes) > 0 {
		return m.continueFor(ev.notes)
	}
	// Nothing in the request names its owner: the turn running now does.
	return m.runningTurn(synced)
}

// runningTurn returns the context of the turn the stream says runs, for
// a request whose own evidence names no owner (a compaction); synced is
// false when the stream could not be read up to the request.
func (m *mapper) runningTurn(synced bool) (context.Context, string) {
	if !synced {
		m.ambiguous("stream not read", func(*prompt) bool { return true })
		if m.turn != nil && m.turn.owner == nil {
			m.taint(m.turn.ctx, "stream not read")
		}
		return nil, UnattributedAmbiguous
	}
	if m.turn != nil {
		return m.turn.ctx, ""
	}
	return nil, UnattributedSelfStarted
}

// foldedPrompt starts the message the CLI puts into a running turn's
// request for a prompt written while the turn ran (Claude Code 2.1.328),
// followed by the prompt's text.
const foldedPrompt = "The user sent a new message while you were working:\n"

// carries reports whether the texts hold the prompt s: as a text block of
// its own (the prompt's first request), or folded into a running turn's
// request after foldedPrompt. A text that merely contains s (a reminder
// quoting it) is not evidence.
func carries(texts []string, s string) bool {
	for _, t := range texts {
		if t == s {
			return true
		}
		if rest, ok := strings.CutPrefix(t, foldedPrompt); ok && (rest == s || strings.HasPrefix(rest, s+"\n")) {
			return true
		}
	}
	return false
}

// subagentCtx returns the context of the subagent of task id: its
// background job, or the Agent tool use of a foreground one.
func (m *mapper) subagentCtx(id string) context.Context {
	if j, ok := m.jobs[id]; ok && j.ctx != nil {
		return j.ctx
	}
	if fg, ok := m.foreground[id]; ok {
		if t, ok := m.tools[fg.ToolUseID]; ok {
			return t.ctx
		}
	}
	return nil
}

// readNotes records that a request owned by ctx delivers the
// notifications of tasks ids: each job's followup is discharged by ctx's
// turn when it is the job's invocation's, else consumed_by it.
func (m *mapper) readNotes(ctx context.Context, ids []string) {
	for _, id := range ids {
		j, ok := m.noted(id)
		if !ok {
			m.unknownTask(id)
		}
		if !ok || j.j == nil || j.settled {
			continue
		}
		m.dropPending(j)
		j.settled = true
		_ = m.tracker.ConsumeFollowup(ctx, j.carrier)
	}
}

// continueFor starts the continuation a request delivering only the
// notifications of tasks ids is: of the first known job's invocation,
// following up each of its jobs there; the other invocations' jobs are
// consumed by it. It becomes the running turn.
func (m *mapper) continueFor(ids []string) (context.Context, string) {
	var known []*job
	unknown := false
	for _, id := range ids {
		j, ok := m.noted(id)
		switch {
		case !ok || j.j == nil:
			m.unknownTask(id)
			unknown = true
		case !j.settled:
			known = append(known, j)
		}
	}
	if len(known) == 0 {
		if !unknown && m.turn != nil {
			// Every job's notification was read already: a retry of the
			// running turn's request.
			return m.turn.ctx, ""
		}
		return nil, UnattributedUnknownTask
	}
	ctx, ok := m.continuation(known)
	if !ok {
		return nil, UnattributedUnknownTask
	}
	return ctx, ""
}

// continuation starts a continuation of the first job's invocation for
// jobs, makes it the running turn and returns its context.
func (m *mapper) continuation(jobs []*job) (context.Context, bool) {
	inv := jobs[0].j.InvocationID()
	var carriers []instrument.Carrier
	var own, others []*job
	for _, j := range jobs {
		if j.j.InvocationID() == inv {
			carriers = append(carriers, j.carrier)
			own = append(own, j)
		} else {
			others = append(others, j)
		}
	}
	ctx, cont, err := m.tracker.StartContinuation(context.Background(), m.agent, m.session, carriers...)
	if err != nil {
		return nil, false
	}
	for _, j := range own {
		j.settled = true
		m.dropPending(j)
	}
	cont.Span().SetAttributes(providerAttr)
	m.switchTurn(&turn{ctx: ctx, end: func(err error) { endSpan(cont.Span(), err) }})
	for _, j := range others {
		m.dropPending(j)
		j.settled = true
		_ = m.tracker.ConsumeFollowup(ctx, j.carrier)
	}
	return ctx, true
}

// ambiguous keeps every prompt match names from final.
func (m *mapper) ambiguous(why string, match func(*prompt) bool) {
	for _, p := range m.prompts {
		if match(p) {
			m.taint(p.ctx, why)
		}
	}
}

// taint keeps ctx's invocation from final: a request that may have been
// its (wireproxy.KeepFromFinal).
func (m *mapper) taint(ctx context.Context, why string) {
	wireproxy.KeepFromFinal(m.tracer, ctx, providerAttr, attribute.String(AttrAmbiguous, why))
}

// wireSum sums the usage of the calls the proxy saw end, in the
// Anthropic sense (input without cache tokens), for the cross-check with
// the usage each result reports.
type wireSum struct {
	rawUsage
	// unknown is set when a call ended without complete usage.
	unknown bool
	// subagent is set when a subagent's call ended in the window: the CLI
	// reports a subagent's usage in the result of a window of its own
	// choosing (measured under load: the one before or after the proxy's),
	// so the window is not compared.
	subagent bool
	// afterSubagent is set when a subagent's call ended in the window
	// before: the CLI may report that call's usage in this window's result
	// (seen under -race in the nested-subagent tests: a continuation's
	// result counting a subagent call the proxy had ended before the
	// previous result), so this window is not compared either. The one
	// before the proxy's needs no flag: there the call is still in flight
	// (calls > 0) when the result is read.
	afterSubagent bool
}

func (w *wireSum) add(u genaicall.Usage) {
	raw, ok := anthropicwire.FromGenAI(u)
	if !ok {
		w.unknown = true
		return
	}
	w.Input += raw.Input
	w.CacheRead += raw.CacheRead
	w.CacheCreation += raw.CacheCreation
	w.Output += raw.Output
}
