package otelopencode

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
)

// Attributes this package adds besides the contract's and GenAI's.
const (
	// AttrCost (double) is OpenCode's cost of an assistant message, in the
	// currency of its model configuration (USD for models.dev models).
	AttrCost = "opencode.cost"
	// AttrMessageID is the OpenCode message id of a model call, and on a
	// "background turn" job the id of the prompt whose turn it holds.
	AttrMessageID = "opencode.message.id"
	// AttrSessionID names the OpenCode session a background job runs in
	// (the child session of a background subagent).
	AttrSessionID = "opencode.session.id"
	// AttrFinish is OpenCode's finish reason of an assistant message.
	AttrFinish = "opencode.finish"
	// AttrProviderID is OpenCode's provider id of a model call (for
	// example google-vertex-anthropic); gen_ai.provider.name is the GenAI
	// registry's value for it when the registry lists the provider
	// (gcp.vertex_ai), else the id itself.
	AttrProviderID = "opencode.provider.id"
)

// noopSpan stands for the model-call span of an assistant message when
// the model-wire proxy makes it.
var noopSpan = trace.SpanFromContext(context.Background())

// errAborted is recorded on spans of work an abort cancelled.
var errAborted = errors.New("opencode: aborted")

// abortErrorName is OpenCode's error name for an aborted message or session.
const abortErrorName = "MessageAbortedError"

// message applies a message (message.updated, or one listed by the
// server): a user message is noted, an assistant message is a model call.
func (m *mapper) message(info rawInfo) {
	if info.ID == "" || info.SessionID == "" {
		return
	}
	s := m.sessions.use(info.SessionID)
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

// assistant starts the model-call span of an assistant message the first
// time it is seen, in the context of its turn, and ends it with its usage
// once the message has completed or failed.
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
			attribute.String(contract.AttrProviderName, providerName(info.ProviderID)),
			attribute.String(AttrProviderID, info.ProviderID),
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
		var span trace.Span
		if m.wire {
			// The proxy makes the model call's span from the request; the
			// message only says which turn it is in.
			span = noopSpan
		} else {
			_, span = m.tracer.Start(ctx, contract.OpChat+" "+model, opts...)
			// A call the sampler dropped is declared (contract v0.6 rule 3).
			instrument.NoteUnrecorded(ctx, span, contract.OpChat+" "+model)
		}
		a = &assistantMsg{turn: ctx, span: span}
		s.assistants[info.ID] = a
		close(m.started)
		m.started = make(chan struct{})
	}
	if a.span == nil || a.ended {
		return
	}
	if info.Time.Completed == 0 && info.Error == nil {
		return
	}
	a.ended = true
	if tk := info.Tokens; m.wire && !a.claimed && tk != nil && tk.Input+tk.Output+tk.Reasoning+tk.Cache.Read+tk.Cache.Write > 0 {
		// A model call the proxy did not see: its usage is not on the
		// wire, so its turn cannot be final.
		m.taint(a.turn, "model call not seen by the proxy")
	}
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

// part applies a message part; at is the event's time (0 when unknown),
// the start of a tool call first seen before it runs.
func (m *mapper) part(p part, at int64) {
	if p.SessionID == "" || p.MessageID == "" {
		return
	}
	s := m.sessions.use(p.SessionID)
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
