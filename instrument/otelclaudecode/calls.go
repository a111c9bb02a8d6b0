package otelclaudecode

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
)

// providerName is gen_ai.provider.name of the CLI's model calls and of
// its invocations' invoke_agent spans.
const providerName = contract.ProviderAnthropic

// providerAttr is providerName as the attribute of an invoke_agent span.
var providerAttr = attribute.String(contract.AttrProviderName, providerName)

// modelCall is one model request: its span starts when the CLI announces
// the request (system/status requesting, or the retry of a failed attempt)
// and ends at message_stop.
type modelCall struct {
	span trace.Span
	// started is set at message_start: the response began; delta at
	// message_delta, which every complete response has before
	// message_stop.
	started, delta bool
	usage          usageAcc
}

// usageAcc gathers the usage of one message from message_start and
// message_delta. Later events carry cumulative counts, so a count present
// replaces the earlier one; a negative count is no count.
type usageAcc struct {
	input, cacheRead, cacheCreation, output, thinking *int64
}

func (u *usageAcc) merge(w *wireUsage) {
	if w == nil {
		return
	}
	set := func(dst **int64, v *int64) {
		if v != nil && *v >= 0 {
			x := *v
			*dst = &x
		}
	}
	set(&u.input, w.InputTokens)
	set(&u.cacheRead, w.CacheReadInputTokens)
	set(&u.cacheCreation, w.CacheCreationInputTokens)
	set(&u.output, w.OutputTokens)
	if d := w.OutputTokensDetails; d != nil {
		set(&u.thinking, d.ThinkingTokens)
	}
}

// raw returns the counts, absent ones as 0.
func (u *usageAcc) raw() rawUsage {
	v := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	return rawUsage{Input: v(u.input), CacheRead: v(u.cacheRead), CacheCreation: v(u.cacheCreation), Output: v(u.output), Thinking: v(u.thinking)}
}

// attributes returns the GenAI usage attributes: input_tokens includes the
// cache reads and creations, as in otelanthropic. An input sum beyond
// int64 is left out.
func (u *usageAcc) attributes() []attribute.KeyValue {
	var kv []attribute.KeyValue
	if u.input != nil {
		sum := *u.input
		ok := addTo(&sum, u.raw().CacheRead) && addTo(&sum, u.raw().CacheCreation)
		if ok {
			kv = append(kv, attribute.Int64(contract.AttrUsageInputTokens, sum))
		}
	}
	if u.output != nil {
		kv = append(kv, attribute.Int64(contract.AttrUsageOutputTokens, *u.output))
	}
	if u.cacheRead != nil {
		kv = append(kv, attribute.Int64(contract.AttrUsageCacheReadTokens, *u.cacheRead))
	}
	if u.cacheCreation != nil {
		kv = append(kv, attribute.Int64(contract.AttrUsageCacheCreateTokens, *u.cacheCreation))
	}
	if u.thinking != nil {
		kv = append(kv, attribute.Int64(contract.AttrUsageReasoningTokens, *u.thinking))
	}
	return kv
}

// parentCtx returns the context the spans of a subagent's conversation
// (parent, its tool use id) or of the main one ("") start in.
func (m *mapper) parentCtx(parent string) context.Context {
	if parent != "" {
		if t, ok := m.tools[parent]; ok {
			return t.ctx
		}
	}
	m.ensureTurn()
	return m.turn.ctx
}

// startCall starts the span of a model request, ending the previous one
// of the same conversation if it never finished.
func (m *mapper) startCall(parent string) *modelCall {
	if c, ok := m.calls[parent]; ok {
		m.endCall(parent, c, errNoResponse)
	}
	model := m.model
	if model == "" {
		model = "unknown"
	}
	pctx := m.parentCtx(parent)
	name := contract.OpChat + " " + model
	_, span := m.tracer.Start(pctx, name,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String(contract.AttrOperationName, contract.OpChat),
			attribute.String(contract.AttrProviderName, providerName),
			attribute.String(contract.AttrRequestModel, model),
			attribute.String(contract.AttrConversationID, m.session),
		))
	// A call the sampler dropped is declared (contract v0.6 rule 3).
	instrument.NoteUnrecorded(pctx, span, name)
	c := &modelCall{span: span}
	m.calls[parent] = c
	return c
}

// endCall ends a model call; err marks a request that failed or was cut
// off. A response that began (message_start) and did not complete
// (message_delta) has unknown usage: the provider may have billed its
// input and part of its output, and the CLI counts an estimate of its own
// in the result. Its span then carries no gen_ai.usage and no error
// status, so the invocation closes incomplete (usage_missing), never
// final; AttrCut marks it, and the counts its message_start reported are
// kept as AttrPartialPrefix attributes.
func (m *mapper) endCall(parent string, c *modelCall, err error) {
	delete(m.calls, parent)
	kv := c.usage.attributes()
	switch {
	case err == nil:
		c.span.SetAttributes(kv...)
		r := c.usage.raw()
		addTo(&m.window.Input, r.Input)
		addTo(&m.window.CacheRead, r.CacheRead)
		addTo(&m.window.CacheCreation, r.CacheCreation)
		addTo(&m.window.Output, r.Output)
	case c.started:
		m.windowUnknown = true
		c.span.SetAttributes(attribute.Bool(AttrCut, true), semconv.ErrorTypeKey.String(err.Error()))
		for _, a := range kv {
			c.span.SetAttributes(attribute.KeyValue{Key: attribute.Key(AttrPartialPrefix + strings.TrimPrefix(string(a.Key), "gen_ai.usage")), Value: a.Value})
		}
		c.span.End()
		return
	}
	endSpan(c.span, err)
}

// retried ends the failed attempt of the main conversation's request,
// unless a cut stream already ended it, and starts the span of the next
// one.
func (m *mapper) retried(r retry) {
	if c, ok := m.calls[""]; ok {
		c.span.SetAttributes(attribute.Int64(AttrAttempt, r.Attempt))
		m.endCall("", c, fmt.Errorf("claude code: model request attempt %d failed: %d %s", r.Attempt, r.ErrorStatus, r.Error))
	}
	m.startCall("")
}

// errCut is recorded on a request whose stream broke off: the CLI closes
// it with message_stop but without the message_delta every complete
// response has, and retries.
var errCut = errors.New("claude code: model response cut off")

func (m *mapper) stream(parent string, s *streamEvent) {
	c, ok := m.calls[parent]
	switch s.Type {
	case "message_start":
		if !ok || c.started {
			c = m.startCall(parent)
		}
		c.started = true
		// The response arrives as stream events: the request was streamed.
		c.span.SetAttributes(attribute.Bool(contract.AttrRequestStream, true))
		if s.Model != "" {
			c.span.SetAttributes(attribute.String(contract.AttrResponseModel, s.Model))
		}
		if s.MessageID != "" {
			c.span.SetAttributes(semconv.GenAIResponseID(s.MessageID))
		}
		c.usage.merge(s.Usage)
	case "message_delta":
		if ok {
			c.delta = true
			c.usage.merge(s.Usage)
			if s.StopReason != "" {
				c.span.SetAttributes(semconv.GenAIResponseFinishReasons(s.StopReason))
			}
		}
	case "message_stop":
		if ok {
			var err error
			if !c.delta {
				err = errCut
			}
			m.endCall(parent, c, err)
		}
	}
}

// tool is one tool use: its span runs from the assistant message that asks
// for it to the tool_result that answers it.
type tool struct {
	ctx   context.Context
	span  trace.Span
	ended bool
	// turnCtx is the context of the turn the tool ran in.
	turnCtx context.Context
}

func (m *mapper) toolUse(parent string, b block) {
	if _, ok := m.tools[b.ID]; ok {
		return
	}
	pctx := m.parentCtx(parent)
	ctx, span := m.tracer.Start(pctx, contract.OpExecuteTool+" "+b.Name,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(
			attribute.String(contract.AttrOperationName, contract.OpExecuteTool),
			attribute.String(contract.AttrToolName, b.Name),
			attribute.String(contract.AttrToolCallID, b.ID),
		))
	m.tools[b.ID] = &tool{ctx: ctx, span: span, turnCtx: pctx}
}

func (m *mapper) toolResult(b block) {
	t, ok := m.tools[b.ToolUseID]
	if !ok || t.ended {
		return
	}
	t.ended = true
	if b.IsError {
		t.span.SetStatus(codes.Error, "claude code: tool returned an error")
	}
	t.span.End()
}

// reconcile compares the usage the CLI reports for the window since the
// last result with the calls seen. When they differ (a request the stream
// did not show, such as a subagent's or a compaction's), the difference
// cannot be attributed to a call: a model-call span without usage records
// it, so the invocation closes incomplete (usage_missing), never final with
// wrong totals.
func (m *mapper) reconcile(reported *rawUsage) {
	if reported == nil || m.windowUnknown {
		// A cut response's usage is unknown to both sides: its span
		// already keeps the invocation from final.
		return
	}
	seen := m.window
	diff := rawUsage{
		Input:         reported.Input - seen.Input,
		CacheRead:     reported.CacheRead - seen.CacheRead,
		CacheCreation: reported.CacheCreation - seen.CacheCreation,
		Output:        reported.Output - seen.Output,
	}
	if diff == (rawUsage{}) {
		return
	}
	if m.onMismatch != nil {
		m.onMismatch()
	}
	if m.turn == nil {
		m.startUnattributed(UnattributedUnreportedUsage)
	}
	_, span := m.tracer.Start(m.turn.ctx, contract.OpChat+" unreported",
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String(contract.AttrOperationName, contract.OpChat),
			attribute.String(contract.AttrProviderName, providerName),
			attribute.Int64(AttrUnexplainedPrefix+".input_tokens", diff.Input),
			attribute.Int64(AttrUnexplainedPrefix+".cache_read_input_tokens", diff.CacheRead),
			attribute.Int64(AttrUnexplainedPrefix+".cache_creation_input_tokens", diff.CacheCreation),
			attribute.Int64(AttrUnexplainedPrefix+".output_tokens", diff.Output),
		))
	instrument.NoteUnrecorded(m.turn.ctx, span, contract.OpChat+" unreported")
	span.End()
}
