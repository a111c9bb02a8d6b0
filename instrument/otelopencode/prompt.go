package otelopencode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/codes"
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
// Wait tells when the invocation is final.
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
// work left running after that is after the result, as with Prompt.
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
	rctx, inv := c.tracker.StartInvocation(ctx, agent, session)
	c.m.registerAsync(session, msgID, rctx, func() { inv.End() })
	err := c.api.postJSON(rctx, "/session/"+url.PathEscape(session)+"/prompt_async", body, nil)
	if err != nil {
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
// done sees the invocation id and answer before the root ends.
func (c *Client) invoke(ctx context.Context, session string, body []byte, send func(context.Context, []byte) ([]byte, error), done func(string, []byte)) (string, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return "", fmt.Errorf("otelopencode: prompt body is not a JSON object: %w", err)
	}
	var msgID string
	if raw, ok := fields["messageID"]; ok {
		_ = json.Unmarshal(raw, &msgID)
	}
	if msgID == "" {
		msgID = c.ids.next(time.Now(), c.m.nextAfter(session))
		fields["messageID"], _ = json.Marshal(msgID)
	}
	agent := c.cfg.agent
	if raw, ok := fields["agent"]; ok {
		var a string
		if json.Unmarshal(raw, &a) == nil && a != "" {
			agent = a
		}
	}
	body, err := json.Marshal(fields)
	if err != nil {
		return "", fmt.Errorf("otelopencode: %w", err)
	}
	ctx, inv := c.tracker.StartInvocation(ctx, agent, session)
	c.m.registerPrompt(session, msgID, ctx)
	answer, err := send(ctx, body)
	c.sync(ctx, session, answer, err)
	c.m.promptDone(session, msgID)
	if err != nil {
		inv.Span().RecordError(err)
		inv.Span().SetStatus(codes.Error, err.Error())
	}
	if done != nil {
		done(inv.ID(), answer)
	}
	c.m.endSpan(func() { inv.End() })
	return inv.ID(), err
}

// sync makes sure the spans of everything the answered prompt did have
// started before its root ends: it waits for the event stream to deliver
// the answer's completion, or else reads the session's messages.
func (c *Client) sync(ctx context.Context, session string, answer []byte, sendErr error) {
	var mp messageWithParts
	if sendErr == nil && json.Unmarshal(answer, &mp) == nil && mp.Info.ID != "" {
		timer := time.NewTimer(c.cfg.syncTimeout)
		defer timer.Stop()
	wait:
		for {
			ok, next := c.m.completed(session, mp.Info.ID)
			if ok {
				return
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
		return
	}
	c.m.applyMessages(msgs)
}
