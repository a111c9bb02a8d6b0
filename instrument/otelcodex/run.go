package otelcodex

import (
	"context"
	"encoding/json"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
)

// Run is one `codex exec --json` for one prompt: one invocation, whose
// root starts before the process and ends at turn.completed, the result.
// It returns once the process has exited: `codex exec` exits after its
// turn, killing the commands it left running in the background (their
// background shells close interrupted, so the summary carries
// followup_interrupted). The process's environment carries the root's
// context (TRACEPARENT, BAGGAGE), for Codex's own spans
// (WithOwnTelemetry) and those of any instrumented program its commands
// run. ctx bounds the process's whole life.
func (c *Client) Run(ctx context.Context, text string) (Result, error) {
	// The caller gets the result once the invocation is exported.
	defer c.flushSpans()
	session := newID()
	m := newMapper(c.tracer, c.tracker, c.cfg.agent, session, c.cfg.turnSync)
	ictx, inv := m.startPrompt(ctx)
	if c.cfg.ownTelemetry {
		inv.Span().SetAttributes(attribute.Bool(contract.AttrRemote, true))
	}
	m.fixed = ictx
	res := Result{InvocationID: inv.ID(), SessionID: session}
	args := []string{"exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"}
	p, err := c.launch(ctx, m, args, []string{"--", text}, c.traceEnv(ictx), false)
	if err != nil {
		endSpan(inv.Span(), err)
		return res, err
	}
	var turnErr error
	ended := false
	c.lines(p, m, func(line []byte) {
		var ev execEvent
		if json.Unmarshal(line, &ev) != nil {
			return
		}
		switch ev.Type {
		case "thread.started":
			res.ThreadID = ev.ThreadID
			inv.Span().SetAttributes(attribute.String(AttrThreadID, ev.ThreadID))
		case "item.completed":
			if ev.Item.Type == "agent_message" {
				res.Text = ev.Item.Text
			}
		case "turn.completed", "turn.failed":
			if ended {
				return
			}
			ended = true
			res.Status = "completed"
			if ev.Type == "turn.failed" {
				res.Status = "failed"
				msg := "codex: turn failed"
				if ev.Error != nil {
					msg += ": " + ev.Error.Message
				}
				turnErr = errors.New(msg)
			}
			endSpan(inv.Span(), turnErr)
		case "error":
			turnErr = errors.New("codex: " + ev.Message)
		}
	})
	if !ended {
		err := errors.Join(turnErr, errExited, p.exitError())
		endSpan(inv.Span(), err)
		return res, err
	}
	return res, turnErr
}

// traceEnv is the environment that hands ctx's invocation to a process:
// TRACEPARENT, TRACESTATE, BAGGAGE and the fields of the configured
// propagators.
func (c *Client) traceEnv(ctx context.Context) []string {
	carrier := propagation.MapCarrier{}
	propagation.NewCompositeTextMapPropagator(c.cfg.propagators, propagation.TraceContext{}, propagation.Baggage{}).Inject(ctx, carrier)
	env := make([]string, 0, len(carrier))
	for _, k := range carrier.Keys() {
		env = append(env, envName(k)+"="+carrier[k])
	}
	return env
}

// envName is the environment variable of a propagation field.
func envName(key string) string {
	b := []byte(key)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case c == '-' || c == '.':
			b[i] = '_'
		}
	}
	return string(b)
}

// Wait waits until invocation id is final or incomplete in the ledger, or
// ctx is done, and returns its summary.
func (c *Client) Wait(ctx context.Context, id string) (instrument.Summary, error) {
	if c.cfg.ledger == nil {
		return instrument.Summary{}, ErrNoLedger
	}
	return c.cfg.ledger.Wait(ctx, id)
}

// Session returns what the session (Result.SessionID) still owes its
// invocations.
func (c *Client) Session(session string) (instrument.SessionState, error) {
	if c.cfg.ledger == nil {
		return instrument.SessionState{}, ErrNoLedger
	}
	return c.cfg.ledger.Session(session), nil
}
