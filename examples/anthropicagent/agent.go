package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
)

// maxSteps bounds the model calls of one turn.
const maxSteps = 8

// providerAttr is gen_ai.provider.name of the agent's invoke_agent spans.
var providerAttr = attribute.String(contract.AttrProviderName, contract.ProviderAnthropic)

// Agent is a small agent runtime on the Anthropic SDK with one tool,
// run_task, which starts a background job and returns at once. When a job
// ends, its completion notification wakes a continuation turn of the
// invocation that started it.
type Agent struct {
	client  anthropic.Client
	model   string
	name    string
	tracker *instrument.Tracker
	tracer  trace.Tracer
	log     *slog.Logger
	// work runs a background task; it may block (the caller of run holds
	// jobs until its result was printed, so that their continuation is
	// after the result).
	work func(task string) string

	// wg counts background jobs and continuations still running.
	wg sync.WaitGroup
	// mu guards sessions.
	mu       sync.Mutex
	sessions map[string]*session
}

// session holds one conversation; turn serializes its turns and guards
// history.
type session struct {
	id      string
	turn    sync.Mutex
	history []anthropic.MessageParam
}

func (a *Agent) session(id string) *session {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.sessions[id]
	if !ok {
		s = &session{id: id}
		a.sessions[id] = s
	}
	return s
}

var runTask = anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{
	Properties: map[string]any{"task": map[string]any{"type": "string"}},
	Required:   []string{"task"},
}, "run_task")

// Prompt runs one invocation: a turn that ends when the model answers
// without tool use. Jobs it starts outlive it.
func (a *Agent) Prompt(ctx context.Context, sessionID, text string) (string, string, error) {
	s := a.session(sessionID)
	s.turn.Lock()
	defer s.turn.Unlock()
	ctx, inv := a.tracker.StartInvocation(ctx, a.name, s.id)
	defer inv.End()
	// The agent's model calls are Anthropic's: say so on its span too.
	inv.Span().SetAttributes(providerAttr)
	s.history = append(s.history, anthropic.NewUserMessage(anthropic.NewTextBlock(text)))
	answer, err := a.loop(ctx, s, false)
	if err != nil {
		inv.Span().RecordError(err)
	}
	return inv.ID(), answer, err
}

// loop calls the model, runs the tools it asks for, and calls it again
// until it answers; s.turn is held. Continuations stream their calls, to
// show that both ways are counted.
func (a *Agent) loop(ctx context.Context, s *session, stream bool) (string, error) {
	for range maxSteps {
		msg, err := a.call(ctx, s.history, stream)
		if err != nil {
			return "", err
		}
		s.history = append(s.history, msg.ToParam())
		var results []anthropic.ContentBlockParamUnion
		var answer strings.Builder
		for _, b := range msg.Content {
			switch b.Type {
			case "text":
				answer.WriteString(b.Text)
			case "tool_use":
				results = append(results, anthropic.NewToolResultBlock(b.ID, a.runTool(ctx, s, b.ID, b.Name, b.Input), false))
			}
		}
		if len(results) == 0 {
			return answer.String(), nil
		}
		s.history = append(s.history, anthropic.NewUserMessage(results...))
	}
	return "", fmt.Errorf("session %s: no answer after %d model calls", s.id, maxSteps)
}

func (a *Agent) call(ctx context.Context, history []anthropic.MessageParam, stream bool) (anthropic.Message, error) {
	params := anthropic.MessageNewParams{
		Model: anthropic.Model(a.model), MaxTokens: 1024, Messages: history,
		Tools: []anthropic.ToolUnionParam{runTask},
	}
	if !stream {
		msg, err := a.client.Messages.New(ctx, params)
		if err != nil {
			return anthropic.Message{}, fmt.Errorf("messages: %w", err)
		}
		return *msg, nil
	}
	st := a.client.Messages.NewStreaming(ctx, params)
	defer st.Close()
	var msg anthropic.Message
	for st.Next() {
		if err := msg.Accumulate(st.Current()); err != nil {
			return anthropic.Message{}, fmt.Errorf("messages stream: %w", err)
		}
	}
	if err := st.Err(); err != nil {
		return anthropic.Message{}, fmt.Errorf("messages stream: %w", err)
	}
	return msg, nil
}

// runTool runs run_task: an execute_tool span, and in it a background job
// that outlives the tool call.
func (a *Agent) runTool(ctx context.Context, s *session, callID, name string, input json.RawMessage) string {
	ctx, span := a.tracer.Start(ctx, contract.OpExecuteTool+" "+name, trace.WithAttributes(
		attribute.String(contract.AttrOperationName, contract.OpExecuteTool),
		attribute.String(contract.AttrToolName, name),
		attribute.String(contract.AttrToolCallID, callID),
	))
	defer span.End()
	var args struct {
		Task string `json:"task"`
	}
	if name != "run_task" || json.Unmarshal(input, &args) != nil || args.Task == "" {
		return fmt.Sprintf("error: cannot run %s with %s", name, input)
	}
	_, job := a.tracker.StartBackground(ctx, "task",
		trace.WithAttributes(attribute.String(contract.AttrConversationID, s.id)))
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		out := a.work(args.Task)
		// The runtime will post a notification: one followup is owed.
		job.EndWithFollowup(nil)
		a.notify(s, job.Carrier(), fmt.Sprintf("[notification] task %q finished: %s", args.Task, out))
	}()
	return "started task " + args.Task + " in the background"
}

// notify posts a completion notification into s: it wakes a continuation
// of the job's invocation, which reads it.
func (a *Agent) notify(s *session, carrier instrument.Carrier, text string) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		s.turn.Lock()
		defer s.turn.Unlock()
		ctx, cont, err := a.tracker.StartContinuation(context.Background(), a.name, s.id, carrier)
		if err != nil {
			a.log.Error("start continuation", "session", s.id, "err", err)
			return
		}
		cont.Span().SetAttributes(providerAttr)
		defer cont.End()
		s.history = append(s.history, anthropic.NewUserMessage(anthropic.NewTextBlock(text)))
		if _, err := a.loop(ctx, s, true); err != nil {
			cont.Span().RecordError(err)
			a.log.Error("continuation", "session", s.id, "invocation", cont.InvocationID(), "err", err)
		}
	}()
}

// Wait waits for background jobs and continuations, or ctx to end.
func (a *Agent) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		a.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for background work: %w", ctx.Err())
	}
}
