package otelopencode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/agentledger/agentledger/instrument"
)

// Prompt is one prompt: the body of POST /session/:id/message.
type Prompt struct {
	// Text is sent as one text part when Parts is empty.
	Text string
	// Parts are OpenCode message parts, sent as they are.
	Parts []any
	// Agent names the OpenCode agent (default: the session's).
	Agent string
	// ProviderID and ModelID choose the model (default: the agent's).
	ProviderID, ModelID string
}

// Result is OpenCode's answer to a prompt.
type Result struct {
	// InvocationID is the invocation the prompt started.
	InvocationID string
	// MessageID is the id of the assistant message OpenCode returned.
	MessageID string
	// Text is the text of that message's text parts.
	Text string
	// Raw is the answer's JSON body.
	Raw json.RawMessage
}

// Prompt sends a prompt to a session and waits for OpenCode's answer (POST
// /session/:id/message) as an invocation: its root span starts now and
// ends when the answer is here and the spans of the answer's model calls
// and tool calls have started. Background jobs the prompt launched go on;
// Wait tells when the invocation is final. When neither the event stream
// nor a read-back of the session showed the turn by the answer (the stream
// lags or is down and the read-back failed), the turn is kept the same way
// as below until they do.
//
// A call that fails after the request may have reached the server (ctx
// cancelled or its deadline passed while OpenCode works, the connection
// broken) returns the error at once, but OpenCode runs the prompt's turn
// on: the rest of the turn is a background job of the invocation,
// "background turn" (KindTurn), that ends when the session goes idle after
// the turn, so the invocation is final only then, with the whole turn's
// usage. When the server cannot have received the request (ctx done
// before sending, no connection made) or answered it with an HTTP 4xx,
// no turn is running and nothing is kept.
func (c *Client) Prompt(ctx context.Context, session string, p Prompt) (*Result, error) {
	if !c.started() {
		return nil, ErrNotStarted
	}
	raw, err := json.Marshal(promptBody(p))
	if err != nil {
		return nil, fmt.Errorf("otelopencode: %w", err)
	}
	var res *Result
	_, err = c.invoke(ctx, session, raw, func(ctx context.Context, body []byte) ([]byte, error) {
		var out json.RawMessage
		if err := c.api.postJSON(ctx, "/session/"+url.PathEscape(session)+"/message", json.RawMessage(body), &out); err != nil {
			return nil, err
		}
		return out, nil
	}, func(id string, answer []byte) {
		res = &Result{InvocationID: id, Raw: answer}
		var mp messageWithParts
		if json.Unmarshal(answer, &mp) == nil {
			res.MessageID = mp.Info.ID
			for _, pt := range mp.Parts {
				if pt.Type == "text" {
					res.Text += pt.Text
				}
			}
		}
	})
	return res, err
}

// PromptAsync sends a prompt without waiting for the answer (POST
// /session/:id/prompt_async) as an invocation and returns its id. The
// caller gets OpenCode's answer from the session later, so the root span
// ends when the session is first idle after a turn answered the prompt;
// work left running after that is after the result, as with Prompt. A call
// that fails after the request may have reached the server keeps the
// prompt's turn in the invocation as Prompt does.
func (c *Client) PromptAsync(ctx context.Context, session string, p Prompt) (string, error) {
	if !c.started() {
		return "", ErrNotStarted
	}
	body := promptBody(p)
	msgID := c.ids.next(time.Now(), c.m.nextAfter(session))
	body["messageID"] = msgID
	agent := c.cfg.agent
	if p.Agent != "" {
		agent = p.Agent
	}
	rctx, inv := c.startInvocation(ctx, msgID, agent, session)
	c.m.registerAsync(session, msgID, promptText(body["parts"]), rctx, func() { inv.End() })
	var probe sendProbe
	err := probe.send(rctx, func(ctx context.Context) error {
		return c.api.postJSON(ctx, "/session/"+url.PathEscape(session)+"/prompt_async", body, nil)
	})
	if err != nil {
		if probe.turnMayRun(err) {
			c.m.keepRest(session, msgID)
		}
		c.m.promptDone(session, msgID)
		inv.Span().RecordError(err)
		inv.Span().SetStatus(codes.Error, err.Error())
		c.m.endSpan(func() { inv.End() })
		return inv.ID(), err
	}
	return inv.ID(), nil
}

func promptBody(p Prompt) map[string]any {
	body := map[string]any{}
	if len(p.Parts) > 0 {
		body["parts"] = p.Parts
	} else {
		body["parts"] = []any{map[string]any{"type": "text", "text": p.Text}}
	}
	if p.Agent != "" {
		body["agent"] = p.Agent
	}
	if p.ModelID != "" || p.ProviderID != "" {
		body["model"] = map[string]string{"providerID": p.ProviderID, "modelID": p.ModelID}
	}
	return body
}

// invoke runs one prompt as an invocation: body is the JSON object of POST
// /session/:id/message, send delivers it and returns the answer's body,
// done sees the invocation id and answer before the root ends. When send
// fails while the server may run the prompt's turn, or the turn's work
// was not seen when the answer came, the rest of the turn becomes a job of
// the invocation before the root ends (mapper.keepRest).
func (c *Client) invoke(ctx context.Context, session string, body []byte, send func(context.Context, []byte) ([]byte, error), done func(string, []byte)) (string, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return "", fmt.Errorf("otelopencode: prompt body is not a JSON object: %w", err)
	}
	body, msgID, agent, err := c.namePrompt(session, fields)
	if err != nil {
		return "", err
	}
	ctx, inv := c.startInvocation(ctx, msgID, agent, session)
	c.m.registerPrompt(session, msgID, promptText(fields["parts"]), ctx)
	var answer []byte
	var probe sendProbe
	err = probe.send(ctx, func(ctx context.Context) (err error) {
		answer, err = send(ctx, body)
		return err
	})
	switch {
	case probe.turnMayRun(err):
		// The caller gave up (or the connection broke) while OpenCode
		// may run the turn: the rest of it stays this invocation's, in a
		// job the events end; no read-back is needed for it.
		c.m.keepRest(session, msgID)
	case !c.sync(ctx, session, answer, err) && err == nil:
		// OpenCode answered, but the turn's work was not seen: it stays
		// this invocation's until the events or a read-back show it.
		c.m.keepRest(session, msgID)
	}
	c.m.promptDone(session, msgID)
	if err != nil {
		inv.Span().RecordError(err)
		inv.Span().SetStatus(codes.Error, err.Error())
	}
	if done != nil {
		done(inv.ID(), answer)
	}
	c.m.endSpan(func() { inv.End() })
	c.flushSpans()
	return inv.ID(), err
}

// sync makes sure the spans of everything the answered prompt did have
// started before its root ends: it waits for the event stream to deliver
// the answer's completion, or else reads the session's messages. It
// reports whether it could: false when the read-back failed.
func (c *Client) sync(ctx context.Context, session string, answer []byte, sendErr error) bool {
	var mp messageWithParts
	if sendErr == nil && json.Unmarshal(answer, &mp) == nil && mp.Info.ID != "" {
		timer := time.NewTimer(c.cfg.syncTimeout)
		defer timer.Stop()
	wait:
		for {
			ok, next := c.m.completed(session, mp.Info.ID)
			if ok {
				return true
			}
			select {
			case <-next:
			case <-timer.C:
				break wait
			case <-ctx.Done():
				break wait
			}
		}
	}
	// Not seen in time (or no answer): read what the server has. A
	// cancelled ctx must not stop this, or the root would end without
	// children the server did run.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.syncTimeout)
	defer cancel()
	msgs, err := c.api.messages(rctx, session)
	if err != nil {
		c.cfg.logger.Warn("otelopencode: reading session messages", "session", session, "error", err)
		return false
	}
	c.m.applyMessages(msgs)
	return true
}

// errNotSent wraps the error of a prompt that was not sent: its context
// was done before.
var errNotSent = errors.New("otelopencode: prompt not sent")

// sendProbe tells whether a prompt's request may have reached the server,
// from what net/http reports through httptrace: a transport built on
// net/http asks for a connection (GetConn) before anything else, and
// reports when it wrote the request (WroteRequest). Until the request is
// written, the server cannot have started the prompt's turn.
type sendProbe struct {
	asked, wrote atomic.Bool
}

// send calls post with ctx traced by the probe, unless ctx is done
// already: then nothing is sent, and the error wraps errNotSent.
func (p *sendProbe) send(ctx context.Context, post func(context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%w: %w", errNotSent, err)
	}
	return post(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GetConn:      func(string) { p.asked.Store(true) },
		WroteRequest: func(httptrace.WroteRequestInfo) { p.wrote.Store(true) },
	}))
}

// turnMayRun reports whether a prompt whose send failed with err may have
// a turn running on the server. It does unless the failure proves
// otherwise: the request was not sent (its context was done, net/http
// asked for a connection and never wrote the request, or the connection
// could not be made), or the server answered it with a 4xx status
// (OpenCode answers a prompt only once its turn has ended, or with 400
// when it cannot start one). A 5xx may come from a proxy in front of a
// server that still runs the turn; a request written and never answered
// (the caller's context ended, the connection broke) may be running.
func (p *sendProbe) turnMayRun(err error) bool {
	if err == nil || errors.Is(err, errNotSent) || p.asked.Load() && !p.wrote.Load() {
		return false
	}
	var status *statusError
	if errors.As(err, &status) && status.code/100 == 4 {
		return false
	}
	var op *net.OpError
	return !errors.As(err, &op) || op.Op != "dial"
}

// promptText returns the text of a prompt's text parts (parts as sent:
// decoded or raw JSON), joined by newlines, as OpenCode sends them to the
// model.
func promptText(parts any) string {
	raw, ok := parts.(json.RawMessage)
	if !ok {
		raw, _ = json.Marshal(parts)
	}
	var ps []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &ps)
	var texts []string
	for _, p := range ps {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// startInvocation starts the invocation of the prompt msgID: its id is
// msgID with WithMessageInvocationIDs, the first time, else a fresh one.
func (c *Client) startInvocation(ctx context.Context, msgID, agent, session string) (context.Context, *instrument.Invocation) {
	if c.cfg.messageIDs && c.ids.fresh(msgID) {
		if ictx, inv, err := c.tracker.StartInvocationWithID(ctx, msgID, agent, session); err == nil {
			return ictx, inv
		}
	}
	return c.tracker.StartInvocation(ctx, agent, session)
}

// namePrompt reads a prompt body's fields as OpenCode will: its message
// id, given one when the host gave none (the invocation is keyed by it),
// and its agent (the Client's when the body names none). It returns the
// body to send, with the id it was given.
func (c *Client) namePrompt(session string, fields map[string]json.RawMessage) (body []byte, msgID, agent string, err error) {
	if raw, ok := fields["messageID"]; ok {
		_ = json.Unmarshal(raw, &msgID)
	}
	if msgID == "" {
		msgID = c.ids.next(time.Now(), c.m.nextAfter(session))
		fields["messageID"], _ = json.Marshal(msgID)
	}
	agent = c.cfg.agent
	if raw, ok := fields["agent"]; ok {
		var a string
		if json.Unmarshal(raw, &a) == nil && a != "" {
			agent = a
		}
	}
	if body, err = json.Marshal(fields); err != nil {
		return nil, "", "", fmt.Errorf("otelopencode: %w", err)
	}
	return body, msgID, agent, nil
}
