package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
	"github.com/agentledger/agentledger/instrument"
)

// maxSteps bounds the model calls of one turn.
const maxSteps = 16

// Runtime is a warm agent runtime: it hosts sessions, each with an inbox
// for completion notifications of its background jobs, and runs their
// turns against a chat completions model with a single tool, shell.
type Runtime struct {
	client      openai.Client
	model       string
	agent       string
	tracker     *instrument.Tracker
	ledger      *instrument.Ledger
	tracer      trace.Tracer
	idle        instrument.Clock
	idleTimeout time.Duration
	// collector, when set, answers whether an idle session owes work
	// instead of the in-process ledger.
	collector *collectorView
	log       *slog.Logger
	// onNotify, when set, is called after a completion notification was
	// posted into a session's inbox (the scenario driver synchronizes on
	// it).
	onNotify func(session string)

	// wg counts background jobs and continuation turns still running.
	wg sync.WaitGroup
	// mu guards sessions.
	mu       sync.Mutex
	sessions map[string]*Session
}

// Session is one conversation on the runtime.
type Session struct {
	rt *Runtime
	id string

	// turn is held while a turn (a prompt or a continuation) runs; it
	// guards history and titled.
	turn    sync.Mutex
	history []openai.ChatCompletionMessageParamUnion
	titled  bool

	// mu guards the fields below.
	mu         sync.Mutex
	running    string // invocation of the running turn, "" when idle
	inbox      []notification
	jobs       map[string]*backgroundJob
	nextJob    int
	lastActive time.Time
	// keptSince is the lastActive of the idle spell the reaper last said
	// it keeps the session for: it says so once a spell, not every pass.
	keptSince time.Time
	closed    bool
}

// notification is the synthetic message a runtime posts into a session
// when a background job exits.
type notification struct {
	jobID      string
	invocation string
	text       string
	carrier    instrument.Carrier
}

type backgroundJob struct {
	id  string
	job *instrument.Job
	// quiet means the session was interrupted (resume=false) or closed: the
	// job's exit posts no notification.
	quiet bool
}

// session returns the session id, creating it.
func (rt *Runtime) session(id string) *Session {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	s, ok := rt.sessions[id]
	if !ok {
		s = &Session{rt: rt, id: id, jobs: make(map[string]*backgroundJob), lastActive: rt.idle.Now()}
		rt.sessions[id] = s
	}
	return s
}

// Result is what a caller gets back from Prompt.
type Result struct {
	InvocationID string
	Answer       string
	// AtResult is the ledger's summary when the caller got the result.
	AtResult instrument.Summary
}

// Prompt runs one invocation on session: a turn that ends when the model
// answers without tool calls. Background jobs it starts may outlive it.
func (rt *Runtime) Prompt(ctx context.Context, session, text string) (Result, error) {
	s := rt.session(session)
	s.turn.Lock()
	ctx, inv := rt.tracker.StartInvocation(ctx, rt.agent, s.id)
	s.setRunning(inv.ID())
	answer, err := s.prompt(ctx, text)
	s.setRunning("")
	inv.End()
	s.turn.Unlock()
	s.wakeIfNotified()

	res := Result{InvocationID: inv.ID(), Answer: answer}
	res.AtResult, _ = rt.ledger.Summary(inv.ID())
	return res, err
}

func (s *Session) prompt(ctx context.Context, text string) (string, error) {
	if !s.titled {
		s.titled = true
		if _, err := s.rt.chat(ctx, []openai.ChatCompletionMessageParamUnion{
			openai.SystemMessage("Generate a short title for this conversation."),
			openai.UserMessage(text),
		}, false); err != nil {
			return "", err
		}
	}
	s.history = append(s.history, openai.UserMessage(text))
	return s.loop(ctx)
}

func (s *Session) setRunning(invocation string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running = invocation
	s.lastActive = s.rt.idle.Now()
}

// loop is the model loop: call the model; run the tools it asks for and
// call it again; stop at an answer without tool calls. Before each call
// the turn reads the notifications waiting in the inbox.
func (s *Session) loop(ctx context.Context) (string, error) {
	for range maxSteps {
		s.readInbox(ctx)
		msg, err := s.rt.chat(ctx, s.history, true)
		if err != nil {
			return "", err
		}
		s.history = append(s.history, msg.ToParam())
		if len(msg.ToolCalls) == 0 {
			return msg.Content, nil
		}
		for _, call := range msg.ToolCalls {
			s.history = append(s.history, openai.ToolMessage(s.shell(ctx, call.ID, call.Function.Arguments), call.ID))
		}
	}
	return "", fmt.Errorf("session %s: no answer after %d model calls", s.id, maxSteps)
}

var shellTool = openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
	Name:        "shell",
	Description: openai.String("Run a shell command. With background=true it returns at once with a job id; a notification arrives when the job exits."),
	Parameters: shared.FunctionParameters{
		"type": "object",
		"properties": map[string]any{
			"command":    map[string]any{"type": "string"},
			"background": map[string]any{"type": "boolean"},
		},
		"required": []string{"command"},
	},
})

func (rt *Runtime) chat(ctx context.Context, msgs []openai.ChatCompletionMessageParamUnion, tools bool) (openai.ChatCompletionMessage, error) {
	params := openai.ChatCompletionNewParams{Model: rt.model, Messages: msgs}
	if tools {
		params.Tools = []openai.ChatCompletionToolUnionParam{shellTool}
	}
	resp, err := rt.client.Chat.Completions.New(ctx, params)
	if err != nil {
		return openai.ChatCompletionMessage{}, fmt.Errorf("chat completion: %w", err)
	}
	if len(resp.Choices) == 0 {
		return openai.ChatCompletionMessage{}, fmt.Errorf("chat completion %s: no choices", resp.ID)
	}
	return resp.Choices[0].Message, nil
}

// readInbox hands the waiting notifications to the running turn. A
// notification of another invocation is consumed: its followup is closed
// with consumed_by, and its usage stays with the turn's invocation.
func (s *Session) readInbox(ctx context.Context) {
	s.mu.Lock()
	batch := s.inbox
	s.inbox = nil
	s.mu.Unlock()
	for _, n := range batch {
		if err := s.rt.tracker.ConsumeFollowup(ctx, n.carrier); err != nil {
			s.rt.log.Error("consume notification", "session", s.id, "job", n.jobID, "err", err)
		}
		s.history = append(s.history, openai.UserMessage(n.text))
	}
}

type shellArgs struct {
	Command    string `json:"command"`
	Background bool   `json:"background"`
}

// maxOutput bounds the command output handed back to the model.
const maxOutput = 4096

// shell runs the shell tool and returns its result text.
func (s *Session) shell(ctx context.Context, callID, rawArgs string) string {
	ctx, span := s.rt.tracer.Start(ctx, contract.OpExecuteTool+" shell", trace.WithAttributes(
		attribute.String(contract.AttrOperationName, contract.OpExecuteTool),
		attribute.String(contract.AttrToolName, "shell"),
		attribute.String(contract.AttrToolCallID, callID),
	))
	defer span.End()
	var args shellArgs
	if err := json.Unmarshal([]byte(rawArgs), &args); err != nil || args.Command == "" {
		return fmt.Sprintf("error: bad arguments %q", rawArgs)
	}
	if !args.Background {
		out, err := exec.CommandContext(ctx, "sh", "-c", args.Command).CombinedOutput()
		return commandResult(out, err)
	}
	return s.startJob(ctx, args.Command)
}

// startJob starts command as a background job whose trace context and
// invocation travel in its environment.
func (s *Session) startJob(ctx context.Context, command string) string {
	_, job := s.rt.tracker.StartBackground(ctx, "shell",
		trace.WithAttributes(attribute.String(contract.AttrConversationID, s.id)))
	cmd := exec.Command("sh", "-c", command)
	cmd.Env = append(os.Environ(), job.Env()...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out

	s.mu.Lock()
	s.nextJob++
	bj := &backgroundJob{id: fmt.Sprintf("job-%d", s.nextJob), job: job}
	s.jobs[bj.id] = bj
	s.mu.Unlock()

	if err := cmd.Start(); err != nil {
		s.mu.Lock()
		delete(s.jobs, bj.id)
		s.mu.Unlock()
		job.EndWithoutFollowup(err)
		return fmt.Sprintf("error: %v", err)
	}
	s.rt.log.Info("background job started", "session", s.id, "job", bj.id, "pid", cmd.Process.Pid, "command", command)
	s.rt.wg.Add(1)
	go func() {
		defer s.rt.wg.Done()
		err := cmd.Wait()
		s.jobExited(bj, commandResult(out.Bytes(), err), err)
	}()
	return "started background job " + bj.id
}

func commandResult(out []byte, err error) string {
	if len(out) > maxOutput {
		out = out[:maxOutput]
	}
	if err != nil {
		return fmt.Sprintf("%s\nerror: %v", out, err)
	}
	return string(out)
}

// jobExited ends the job's span and, unless the session was interrupted
// or closed, posts a completion notification; with no turn running, the
// notification wakes a continuation.
func (s *Session) jobExited(bj *backgroundJob, output string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.jobs, bj.id)
	s.lastActive = s.rt.idle.Now()
	if bj.quiet || s.closed {
		bj.job.EndWithoutFollowup(err)
		return
	}
	bj.job.EndWithFollowup(err)
	s.inbox = append(s.inbox, notification{
		jobID:      bj.id,
		invocation: bj.job.InvocationID(),
		text:       fmt.Sprintf("[notification] background job %s exited: %s", bj.id, output),
		carrier:    bj.job.Carrier(),
	})
	s.rt.log.Info("job notification posted", "session", s.id, "job", bj.id, "running_turn", s.running)
	if s.running == "" {
		s.rt.wg.Add(1)
		go s.continueTurns()
	}
	if s.rt.onNotify != nil {
		s.rt.onNotify(s.id)
	}
}

func (s *Session) wakeIfNotified() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.inbox) > 0 && s.running == "" {
		s.rt.wg.Add(1)
		go s.continueTurns()
	}
}

// continueTurns runs continuations for the notifications in the inbox:
// one per invocation, since a continuation belongs to the invocation
// whose jobs woke it.
func (s *Session) continueTurns() {
	defer s.rt.wg.Done()
	s.turn.Lock()
	s.mu.Lock()
	batch := s.inbox
	s.inbox = nil
	s.mu.Unlock()

	var order []string
	groups := map[string][]notification{}
	for _, n := range batch {
		if _, ok := groups[n.invocation]; !ok {
			order = append(order, n.invocation)
		}
		groups[n.invocation] = append(groups[n.invocation], n)
	}
	for _, inv := range order {
		s.continueInvocation(groups[inv])
	}
	s.turn.Unlock()
	s.wakeIfNotified()
}

// continueInvocation runs one continuation turn; s.turn is held.
func (s *Session) continueInvocation(ns []notification) {
	carriers := make([]instrument.Carrier, len(ns))
	for i, n := range ns {
		carriers[i] = n.carrier
	}
	ctx, cont, err := s.rt.tracker.StartContinuation(context.Background(), s.rt.agent, s.id, carriers...)
	if err != nil {
		s.rt.log.Error("start continuation", "session", s.id, "err", err)
		return
	}
	s.setRunning(cont.InvocationID())
	for _, n := range ns {
		s.history = append(s.history, openai.UserMessage(n.text))
	}
	if _, err := s.loop(ctx); err != nil {
		cont.Span().RecordError(err)
		s.rt.log.Error("continuation", "session", s.id, "invocation", cont.InvocationID(), "err", err)
	}
	s.setRunning("")
	cont.End()
}

// Interrupt stops the session from resuming (resume=false): notifications
// not yet read are closed as interrupted, and jobs still running will post
// none. A turn already running finishes.
func (rt *Runtime) Interrupt(ctx context.Context, session string) {
	rt.session(session).abandon(ctx, instrument.FollowupInterrupted, false)
}

// CloseSession closes a session: its unread notifications are closed as
// session_closed and its running jobs will post none.
func (rt *Runtime) CloseSession(ctx context.Context, session string) {
	rt.mu.Lock()
	s, ok := rt.sessions[session]
	delete(rt.sessions, session)
	rt.mu.Unlock()
	if ok {
		s.abandon(ctx, instrument.FollowupSessionClosed, true)
	}
}

func (s *Session) abandon(ctx context.Context, reason instrument.FollowupReason, closeSession bool) {
	s.mu.Lock()
	for _, j := range s.jobs {
		j.quiet = true
	}
	if closeSession {
		s.closed = true
	}
	batch := s.inbox
	s.inbox = nil
	s.mu.Unlock()
	for _, n := range batch {
		if err := s.rt.tracker.CloseFollowup(ctx, n.carrier, reason, ""); err != nil {
			s.rt.log.Error("close followup", "session", s.id, "job", n.jobID, "err", err)
		}
	}
}

// ReapIdle closes the sessions idle for the idle timeout that owe no work
// to any invocation, and returns their ids. A session whose background
// job still runs, or whose notification is still expected, is kept
// however long it has been idle.
func (rt *Runtime) ReapIdle(ctx context.Context) []string {
	now := rt.idle.Now()
	rt.mu.Lock()
	var idle []string
	sessions := map[string]*Session{}
	for id, s := range rt.sessions {
		sessions[id] = s
		s.mu.Lock()
		if s.running == "" && len(s.inbox) == 0 && now.Sub(s.lastActive) >= rt.idleTimeout {
			idle = append(idle, id)
		}
		s.mu.Unlock()
	}
	rt.mu.Unlock()
	var reaped []string
	for _, id := range idle {
		askLedger := rt.collector == nil
		if rt.collector != nil {
			owes, err := rt.collector.owesWork(ctx, id)
			switch {
			case errors.Is(err, statusapi.ErrNotFound):
				// Unknown to the collector (it never saw a span of the
				// session, or forgot it): not "owes nothing". The
				// in-process ledger saw every span this process ended.
				askLedger = true
			case err != nil:
				rt.log.Warn("cannot ask the collector whether the idle session owes work; kept", "session", id, "err", err)
				continue
			case owes:
				if sessions[id].firstKept() {
					rt.log.Info("idle session owes work; kept", "session", id, "source", "collector")
				}
				continue
			}
		}
		if st := rt.ledger.Session(id); askLedger && st.OwesWork {
			if sessions[id].firstKept() {
				owed := make([]string, 0, len(st.Owed))
				for _, o := range st.Owed {
					owed = append(owed, o.Reason)
				}
				rt.log.Info("idle session owes work; kept", "session", id, "source", "ledger",
					"open_jobs", len(st.OpenJobs), "expected_followups", len(st.ExpectedFollowups), "owed", owed)
			}
			continue
		}
		rt.CloseSession(ctx, id)
		reaped = append(reaped, id)
	}
	return reaped
}

// firstKept reports whether this is the first time the reaper keeps the
// session in its current idle spell, and remembers that it was kept.
func (s *Session) firstKept() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keptSince.Equal(s.lastActive) {
		return false
	}
	s.keptSince = s.lastActive
	return true
}

// collectorView asks the collector's invocation_status API, as an
// orchestrator in another process would.
type collectorView struct {
	client *statusapi.Client
	// flush exports every ended span first: the collector knows only what
	// it received.
	flush func(context.Context) error
}

func (c *collectorView) owesWork(ctx context.Context, session string) (bool, error) {
	if err := c.flush(ctx); err != nil {
		return false, fmt.Errorf("flush spans: %w", err)
	}
	return c.client.OwesWork(ctx, session)
}

// collectorSettled waits, on the collector's session watch, until the
// collector also owes nothing for session: the in-process ledger can be
// final while the collector still settles a remote subtree
// (remote_settle), which is owed work there. Without a collector it
// returns at once; a collector that never settles fails with ctx.
func (rt *Runtime) collectorSettled(ctx context.Context, session string) error {
	if rt.collector == nil {
		return nil
	}
	if err := rt.collector.flush(ctx); err != nil {
		return fmt.Errorf("flush spans: %w", err)
	}
	token := ""
	// Each round waits for a change; the session's changes are bounded
	// (its invocations close once), so few rounds pass before ctx ends.
	for round := 0; round < 64; round++ {
		st, next, err := rt.collector.client.Watch(ctx, session, token, statusapi.MaxWatchWait)
		if err != nil {
			return fmt.Errorf("watch session %s: %w", session, err)
		}
		if !st.OwesWork && st.Version != 0 {
			return nil
		}
		token = next
	}
	return fmt.Errorf("session %s: the collector still owes work after 64 changes", session)
}

// Wait waits for background jobs and continuations to finish, or ctx to
// end.
func (rt *Runtime) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		rt.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for background work: %w", ctx.Err())
	}
}
