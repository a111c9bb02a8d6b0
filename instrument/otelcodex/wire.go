package otelcodex

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/genaicall"
	"github.com/agentledger/agentledger/instrument/internal/openaiwire"
	"github.com/agentledger/agentledger/instrument/internal/wireproxy"
)

// Attribution of the requests Codex sends through the model-wire proxy.
// A request is attributed by what it carries, never by when it comes:
//
//   - in a one-shot run every request is the run's invocation's (one
//     prompt, one process);
//   - in a session, the turn its X-Codex-Turn-Metadata header names (and
//     its body's client_metadata, which must agree): the turn a
//     turn/start of the Client returned, so the prompt's invocation or
//     the continuation's;
//   - the tool results it returns must be of calls the same invocation's
//     requests asked for.
//
// Evidence naming two owners (header and body naming different turns,
// tool results of another invocation, a turn two prompts share) fails
// closed: the request is an unattributed invocation and each candidate
// gets a usage-less model call, so none is final. A request naming a turn
// nobody started (or one the Client could not learn in time) is an
// unattributed invocation.
//
// The tool results a request returns are the tool uses' end: each is an
// execute_tool span from when the proxy read the call to this request.
// An exec_command result "Process running with session ID N" starts a
// background shell; a write_stdin result "Process exited with code C"
// for session N is the command's exit read by this request's turn.

// describe tells the proxy which requests are model calls: POST
// .../responses.
func describe(req *http.Request, body []byte) (genaicall.Request, bool) {
	op, ok := openaiwire.Classify(req)
	if !ok || op != openaiwire.Responses {
		return genaicall.Request{}, false
	}
	return op.Describe(body), true
}

// attribute decides the owner of one model request. It runs on the
// proxy's goroutine for the request.
func (m *mapper) attribute(req *http.Request, body []byte) wireproxy.Decision {
	ev := readEvidence(req.Header, body)
	m.mu.Lock()
	defer m.mu.Unlock()
	if ev.isSub {
		return m.attributeSubagent(ev, body)
	}
	ctx, reason := m.owner(ev)
	if ctx == nil {
		if m.exited {
			reason = UnattributedExited
		}
		var inv *instrument.Invocation
		ctx, inv = m.tracker.StartUnattributed(context.Background(), m.agent, m.session, instrument.UnattributedReason(reason))
		inv.Span().SetAttributes(providerAttr)
		m.toolResults(ctx, ev)
		m.answersRead(ctx, body)
		return m.decision(ctx, func() { inv.End() })
	}
	m.toolResults(ctx, ev)
	m.answersRead(ctx, body)
	return m.decision(ctx, nil)
}

// owner returns the context a request's call starts in, or nil and the
// reason it is nobody's. It is called with mu held.
func (m *mapper) owner(ev evidence) (context.Context, string) {
	if ev.turnID != "" && ev.bodyTurnID != "" && ev.turnID != ev.bodyTurnID {
		for _, id := range []string{ev.turnID, ev.bodyTurnID} {
			if t, ok := m.turns[id]; ok {
				m.taint(t.ctx, "header and body name different turns")
			}
		}
		if m.fixed != nil {
			m.taint(m.fixed, "header and body name different turns")
		}
		return nil, UnattributedAmbiguous
	}
	ctx := m.fixed
	if ctx == nil {
		id := ev.turnID
		if id == "" {
			id = ev.bodyTurnID
		}
		t := m.waitTurn(id)
		if t == nil {
			return nil, UnattributedUnknownTurn
		}
		if t.folded {
			m.taint(t.ctx, "prompt folded into a running turn")
			return nil, UnattributedAmbiguous
		}
		ctx = t.ctx
	}
	for _, o := range ev.outputs {
		if c, ok := m.toolOwners.Owner(o.callID); ok && !wireproxy.SameInvocation(c, ctx) {
			m.taint(c, "tool results")
			m.taint(ctx, "tool results")
			return nil, UnattributedAmbiguous
		}
	}
	return ctx, ""
}

// decision is the proxy's Decision for a call owned by ctx: the tool uses
// its response asks for are owned by ctx too; end, when set, runs once
// the call is done.
func (m *mapper) decision(ctx context.Context, end func()) wireproxy.Decision {
	m.calls++
	return wireproxy.Decision{
		Ctx: ctx,
		OnTool: func(id string) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.toolOwners.Remember(id, ctx)
			if _, ok := m.asked[id]; !ok {
				m.asked[id] = time.Now()
				if len(m.asked) > 2*wireproxy.DefaultMaxTools {
					// Calls asked for and never answered (the process
					// stopped): the oldest go.
					m.asked = make(map[string]time.Time)
				}
			}
		},
		Done: func(genaicall.Usage) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.calls--
			if end != nil {
				end()
			}
		},
	}
}

// toolResults records the tool results a request owned by ctx returns:
// each tool use's execute_tool span (under the call that asked for it),
// the background shell an exec_command left running, the exit of one a
// write_stdin read. A result already recorded (a retried request) is
// skipped. It is called with mu held.
func (m *mapper) toolResults(ctx context.Context, ev evidence) {
	for _, o := range ev.outputs {
		if _, ok := m.results[o.callID]; ok {
			continue
		}
		m.results[o.callID] = struct{}{}
		m.resultOrder = append(m.resultOrder, o.callID)
		if len(m.resultOrder) > wireproxy.DefaultMaxTools {
			delete(m.results, m.resultOrder[0])
			m.resultOrder = m.resultOrder[1:]
		}
		parent, ok := m.toolOwners.Owner(o.callID)
		if !ok {
			parent = ctx
		}
		name := o.name
		if name == "" {
			name = "unknown"
		}
		opts := []trace.SpanStartOption{
			trace.WithSpanKind(trace.SpanKindInternal),
			trace.WithAttributes(
				attribute.String(contract.AttrOperationName, contract.OpExecuteTool),
				attribute.String(contract.AttrToolName, name),
				attribute.String(contract.AttrToolCallID, o.callID),
			),
		}
		if at, ok := m.asked[o.callID]; ok {
			opts = append(opts, trace.WithTimestamp(at))
			delete(m.asked, o.callID)
		}
		tctx, span := m.tracer.Start(parent, contract.OpExecuteTool+" "+name, opts...)
		st := readProcessState(o.output)
		switch name {
		case "exec_command":
			if st.running {
				m.startJob(tctx, o, st.session)
			}
		case "spawn_agent":
			m.spawned(tctx, o)
		case "write_stdin":
			if sid, ok := stdinSession(o.args); ok && st.exited {
				if j, ok := m.bySession[sid]; ok {
					m.collected(j, ctx, st.code)
				}
			}
		}
		span.End()
	}
}
