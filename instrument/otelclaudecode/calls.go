package otelclaudecode

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// providerName is gen_ai.provider.name of the CLI's model calls and of
// its invocations' invoke_agent spans.
const providerName = contract.ProviderAnthropic

// providerAttr is providerName as the attribute of an invoke_agent span.
var providerAttr = attribute.String(contract.AttrProviderName, providerName)

// tool is one tool use: its span runs from the assistant message that asks
// for it to the tool_result that answers it.
type tool struct {
	ctx   context.Context
	span  trace.Span
	ended bool
	// turnCtx is the context of the turn the tool ran in.
	turnCtx context.Context
}

// toolCtx returns the context a tool use's span starts in: that of the
// model call whose response asked for it (the proxy saw the response
// before the CLI printed it), else that of the subagent's Agent tool use
// (parent) or of the running turn; nil when none is known.
func (m *mapper) toolCtx(parent, id string) context.Context {
	if ctx, ok := m.toolOwners.Owner(id); ok {
		return ctx
	}
	if t, ok := m.tools[parent]; ok && parent != "" {
		return t.ctx
	}
	if m.turn != nil {
		return m.turn.ctx
	}
	return nil
}

func (m *mapper) toolUse(parent string, b block) {
	if _, ok := m.tools[b.ID]; ok {
		return
	}
	pctx := m.toolCtx(parent, b.ID)
	if pctx == nil {
		// No call of ours asked for it: its jobs are nobody's we know, and
		// their notifications make unattributed turns.
		return
	}
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
// last result (model_usage_since_last_result) with the calls the proxy saw
// end in it. The proxy's counts are the ones recorded; a difference is a
// cross-check that failed: it is counted (agentledger.claudecode.usage.
// mismatches) and marked on the running turn's invoke_agent span
// (invocation.usage.mismatch, so the summary carries the anomaly
// usage_mismatch:<span name>, contract v0.8; the CLI's counts as
// AttrReportedPrefix attributes), and changes no total.
func (m *mapper) reconcile(reported *rawUsage) {
	if reported == nil || m.wire.unknown || m.wire.subagent || m.wire.afterSubagent || m.calls > 0 {
		// A call without complete usage, a subagent's call in this window
		// or the one before, or one still in flight (a background
		// subagent's): the window cannot be compared.
		return
	}
	if *reported == m.wire.rawUsage {
		return
	}
	if m.onMismatch != nil {
		m.onMismatch()
	}
	if m.turn == nil {
		return
	}
	sp := trace.SpanFromContext(m.turn.ctx)
	sp.SetAttributes(
		attribute.Bool(contract.AttrUsageMismatch, true),
		attribute.Int64(AttrReportedPrefix+".input_tokens", reported.Input),
		attribute.Int64(AttrReportedPrefix+".cache_read_input_tokens", reported.CacheRead),
		attribute.Int64(AttrReportedPrefix+".cache_creation_input_tokens", reported.CacheCreation),
		attribute.Int64(AttrReportedPrefix+".output_tokens", reported.Output),
	)
}
