package otelcodex

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"go.opentelemetry.io/otel/attribute"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/wireproxy"
)

// execLine handles one event of `codex exec --json`. For the event that
// ends the turn it returns the edit that names the turn's invocation in
// it (ExecFieldTurnID).
func (x *Process) execLine(line []byte) func([]byte) []byte {
	var ev execEvent
	if json.Unmarshal(line, &ev) != nil {
		return nil
	}
	m := x.m
	m.mu.Lock()
	defer m.mu.Unlock()
	switch ev.Type {
	case "thread.started":
		if m.session == "" {
			m.session = ev.ThreadID
		}
	case "turn.completed", "turn.failed":
		if x.root == nil || x.rootEnded {
			return nil
		}
		x.rootEnded = true
		var err error
		if ev.Type == "turn.failed" {
			msg := "codex: turn failed"
			if ev.Error != nil {
				msg += ": " + ev.Error.Message
			}
			err = errors.New(msg)
		}
		endSpan(x.root.Span(), err)
		return withTurnID(x.root.ID())
	}
	return nil
}

// attribute decides the owner of one model request: a `codex exec`'s
// first one starts its invocation, with the turn and thread ids it names.
func (x *Process) attribute(req *http.Request, body []byte) wireproxy.Decision {
	if x.mode == modeExec {
		x.startRoot(req.Header)
	}
	return x.m.attribute(req, body)
}

func (x *Process) startRoot(h http.Header) {
	var meta struct {
		TurnID   string `json:"turn_id"`
		ThreadID string `json:"thread_id"`
	}
	if v := h.Get(headerTurnMetadata); v != "" {
		_ = json.Unmarshal([]byte(v), &meta)
	}
	m := x.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fixed != nil {
		return
	}
	if meta.ThreadID != "" {
		m.session = meta.ThreadID
	}
	ctx, inv := x.startInvocation(context.Background(), meta.TurnID, m.session)
	if m.session != "" {
		inv.Span().SetAttributes(attribute.String(AttrThreadID, m.session))
	}
	x.root, m.fixed = inv, ctx
}

// startInvocation starts the root of a turn: with the turn id as its
// invocation id, or a fresh one when the turn has none (or it is not a
// valid id).
func (x *Process) startInvocation(ctx context.Context, turnID, session string) (context.Context, *instrument.Invocation) {
	var inv *instrument.Invocation
	if turnID != "" {
		var err error
		if ctx, inv, err = x.m.tracker.StartInvocationWithID(ctx, turnID, x.m.agent, session); err != nil {
			inv = nil
		}
	}
	if inv == nil {
		ctx, inv = x.m.tracker.StartInvocation(ctx, x.m.agent, session)
	}
	inv.Span().SetAttributes(providerAttr)
	if turnID != "" {
		inv.Span().SetAttributes(attribute.String(AttrTurnID, turnID))
	}
	return ctx, inv
}
