package otelopencode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/genaicall"
	"github.com/agentledger/agentledger/instrument/internal/openaiwire"
	"github.com/agentledger/agentledger/instrument/internal/wireproxy"
)

// Attribution of the requests OpenCode sends through the model-wire
// proxy (WithModelProxy). OpenCode 1.18.33 sends every model request of a
// session with the header X-Session-Id (the session's id; a subagent's
// child session also has X-Parent-Session-Id), and runs one turn of a
// session at a time, each model request of it (a step) after an
// assistant message it created for it. A request is attributed by what
// it carries:
//
//   - a title request (OpenCode's title agent: no tools, its system
//     prompt) carries the text of the session's first prompt: the
//     Client's prompt of that text in the session owns it, while its
//     invocation is open;
//   - any other request of a session the Client tracks is the model call
//     of the session's oldest assistant message that no request has
//     claimed and that has not completed:
//     the turn the event stream put that message in owns it (the
//     prompt's root, a continuation, a subagent's job or task call, an
//     unattributed turn). The proxy waits, up to WithSyncTimeout, for the
//     event stream to show the message;
//   - the tool results it returns name the tool calls, and so the request
//     whose response asked for them: when that request's owner is not
//     the message's, the evidence names two owners.
//
// A request nobody can own (no session header, a session nobody prompted
// through the Client, no message in time) is an unattributed invocation
// (contract rule 7). Evidence that names two owners makes an
// unattributed invocation and keeps each candidate from final (a
// usage-less model call, AttrAmbiguous).

// AttrAmbiguous (string) is on the usage-less model-call span that keeps
// an invocation from final because a request of the model wire may have
// been its: the evidence that named it and another owner.
const AttrAmbiguous = "opencode.request.ambiguous"

// Reasons of the unattributed invocations the model-wire proxy starts,
// besides the turns' (UnattributedOtherPrompt for a session nobody
// prompted through the Client, UnattributedEndedTurn for a title request
// whose prompt's invocation has ended).
const (
	// UnattributedNoSession: a model request without OpenCode's
	// X-Session-Id header.
	UnattributedNoSession = "no_session"
	// UnattributedNoMessage: a model request of a tracked session for
	// which the event stream showed no assistant message in time (a
	// retry, a stream that is down).
	UnattributedNoMessage = "no_message"
	// UnattributedAmbiguous: a model request whose evidence names more
	// than one owner.
	UnattributedAmbiguous = "ambiguous"
)

// Headers OpenCode sends on its model requests.
const (
	headerSessionID       = "X-Session-Id"
	headerParentSessionID = "X-Parent-Session-Id"
)

// titleSystemPrompt begins the system prompt of OpenCode's title agent.
const titleSystemPrompt = "You are a title generator."

// describeWire tells the proxy which requests are model calls: POST
// .../chat/completions, .../responses, .../embeddings.
func describeWire(req *http.Request, body []byte) (genaicall.Request, bool) {
	op, ok := openaiwire.Classify(req)
	if !ok {
		return genaicall.Request{}, false
	}
	return op.Describe(body), true
}

// wireEvidence is what a model request carries.
type wireEvidence struct {
	session, parent string
	// title is set on a request of OpenCode's title agent; lastUser is
	// the text of its last user message.
	title    bool
	lastUser string
	// toolResults are the tool call ids of the tool messages after its
	// last assistant message.
	toolResults []string
}

func readWireEvidence(req *http.Request, body []byte) wireEvidence {
	ev := wireEvidence{session: req.Header.Get(headerSessionID), parent: req.Header.Get(headerParentSessionID)}
	var b struct {
		Messages []struct {
			Role       string          `json:"role"`
			Content    json.RawMessage `json:"content"`
			ToolCallID string          `json:"tool_call_id"`
		} `json:"messages"`
		Tools json.RawMessage `json:"tools"`
	}
	if json.Unmarshal(body, &b) != nil {
		return ev
	}
	for i := len(b.Messages) - 1; i >= 0; i-- {
		msg := b.Messages[i]
		if msg.Role == "assistant" {
			break
		}
		if msg.Role == "tool" && msg.ToolCallID != "" {
			ev.toolResults = append(ev.toolResults, msg.ToolCallID)
		}
	}
	if len(b.Tools) == 0 && len(b.Messages) > 0 && b.Messages[0].Role == "system" &&
		strings.HasPrefix(contentText(b.Messages[0].Content), titleSystemPrompt) {
		ev.title = true
		if last := b.Messages[len(b.Messages)-1]; last.Role == "user" {
			ev.lastUser = contentText(last.Content)
		}
	}
	return ev
}

// contentText is a chat message's content: a string, or its text parts.
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var texts []string
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}

// wireAttributor attributes the proxy's requests with the mapper's state.
type wireAttributor struct {
	m *mapper
	// wait bounds how long a request waits for its assistant message.
	wait time.Duration

	// toolOwners is guarded by m.mu.
	toolOwners *wireproxy.ToolOwners
}

// attribute decides the owner of one model request (see above). It runs
// on the proxy's goroutine for the request.
func (w *wireAttributor) attribute(req *http.Request, body []byte) wireproxy.Decision {
	ev := readWireEvidence(req, body)
	m := w.m
	deadline := time.NewTimer(w.wait)
	defer deadline.Stop()
	m.mu.Lock()
	defer m.mu.Unlock()
	for {
		ctx, reason, again := w.owner(ev)
		if ctx != nil {
			return w.decision(ctx, nil)
		}
		if !again {
			return w.unattributed(ev.session, reason)
		}
		started := m.started
		m.mu.Unlock()
		select {
		case <-started:
			m.mu.Lock()
		case <-deadline.C:
			m.mu.Lock()
			if ctx, _, _ := w.owner(ev); ctx != nil {
				return w.decision(ctx, nil)
			}
			if s := m.sessions.lookup(ev.session); s != nil {
				w.taintOpen(s, "no assistant message")
			}
			return w.unattributed(ev.session, UnattributedNoMessage)
		}
	}
}

// owner returns the context a request's call starts in; or nil, the
// reason it is nobody's, and whether the event stream may still show its
// owner (again).
func (w *wireAttributor) owner(ev wireEvidence) (ctx context.Context, reason string, again bool) {
	m := w.m
	if ev.session == "" {
		return nil, UnattributedNoSession, false
	}
	s := m.sessions.lookup(ev.session)
	tracked := s != nil && (s.tracked || m.awaitsJob(s))
	if !tracked {
		// A child session the event stream has not shown yet.
		if p := m.sessions.lookup(ev.parent); ev.parent != "" && p != nil && p.tracked {
			return nil, UnattributedUnknownTask, true
		}
		return nil, UnattributedOtherPrompt, false
	}
	if ev.title {
		return w.titleOwner(s, ev.lastUser)
	}
	a := s.oldestUnclaimed()
	if a == nil {
		return nil, UnattributedNoMessage, true
	}
	for _, id := range ev.toolResults {
		if c, ok := w.toolOwners.Owner(id); ok && !wireproxy.SameInvocation(c, a.turn) {
			a.claimed = true
			w.taint(a.turn, "tool results")
			w.taint(c, "tool results")
			return nil, UnattributedAmbiguous, false
		}
	}
	a.claimed = true
	return a.turn, "", false
}

// oldestUnclaimed returns the session's oldest assistant message that no
// request of the proxy has claimed and that has not completed (a
// message's request comes before its completion can), or nil.
func (s *sessionState) oldestUnclaimed() *assistantMsg {
	var oldest string
	for id, a := range s.assistants {
		if !a.claimed && !a.ended && (oldest == "" || id < oldest) {
			oldest = id
		}
	}
	if oldest == "" {
		return nil
	}
	return s.assistants[oldest]
}

// titleOwner returns the owner of a title request of session s that
// carries text: the open invocation of the Client's prompt of that text.
func (w *wireAttributor) titleOwner(s *sessionState, text string) (context.Context, string, bool) {
	var owners []context.Context
	for _, u := range s.users {
		if u.sent && u.text == text {
			owners = append(owners, u.owner)
		}
	}
	switch {
	case len(owners) == 0:
		return nil, UnattributedOtherPrompt, false
	case len(owners) > 1:
		for _, c := range owners {
			if c != nil {
				w.taint(c, "title prompt text")
			}
		}
		return nil, UnattributedAmbiguous, false
	case owners[0] == nil:
		return nil, UnattributedEndedTurn, false
	}
	return owners[0], "", false
}

// unattributed starts the unattributed invocation a request nobody owns
// is, ended when the call is done.
func (w *wireAttributor) unattributed(session, reason string) wireproxy.Decision {
	ctx, inv := w.m.tracker.StartUnattributed(context.Background(), "opencode", session, instrument.UnattributedReason(reason))
	return w.decision(ctx, func() { inv.End() })
}

// decision is the proxy's Decision for a call owned by ctx: the tool
// calls its response asks for are owned by ctx too; end, when set, runs
// once the call is done, with the mapper's lock held.
func (w *wireAttributor) decision(ctx context.Context, end func()) wireproxy.Decision {
	m := w.m
	return wireproxy.Decision{
		Ctx: ctx,
		OnTool: func(id string) {
			m.mu.Lock()
			defer m.mu.Unlock()
			w.toolOwners.Remember(id, ctx)
		},
		Done: func(genaicall.Usage) {
			if end != nil {
				m.endSpan(end)
			}
		},
	}
}

// taintOpen keeps every turn of s that may own a request from final:
// the turns of its open assistant messages, the turn it started by
// itself that runs, and its prompts whose invocation is open (a retry
// within a message, a request the event stream has not explained).
func (w *wireAttributor) taintOpen(s *sessionState, why string) {
	var done []context.Context
	taint := func(ctx context.Context) {
		for _, c := range done {
			if wireproxy.SameInvocation(c, ctx) {
				return
			}
		}
		done = append(done, ctx)
		w.taint(ctx, why)
	}
	for _, a := range s.assistants {
		if !a.ended {
			taint(a.turn)
		}
	}
	if s.current != nil && !s.current.ended {
		taint(s.current.ctx)
	}
	for _, u := range s.users {
		if u.owner != nil {
			taint(u.owner)
		}
	}
}

// taint records, in ctx's invocation, a model call of unknown usage: a
// request that may have been its. The invocation then closes incomplete
// (usage_missing), never final without it.
func (w *wireAttributor) taint(ctx context.Context, why string) { w.m.taint(ctx, why) }

// taint is wireAttributor.taint, for the mapper's own use: an assistant
// message that completed with usage although no request of the proxy
// claimed it (a provider that does not go through the proxy). It is
// wireproxy.KeepFromFinal.
func (m *mapper) taint(ctx context.Context, why string) {
	wireproxy.KeepFromFinal(m.tracer, ctx, attribute.String(AttrAmbiguous, why))
}

// startProxy starts the model-wire proxy of WithModelProxy for m. The
// proxy adds no header of its own to the requests: no propagation.
func startProxy(cfg config, m *mapper) (*wireproxy.Proxy, *genaicall.Middleware, error) {
	up, err := url.Parse(cfg.modelUpstream)
	if err != nil || (up.Scheme != "http" && up.Scheme != "https") || up.Host == "" {
		return nil, nil, fmt.Errorf("otelopencode: WithModelProxy upstream %q is not an http or https URL with a host", cfg.modelUpstream)
	}
	mw := genaicall.New(genaicall.Config{
		TracerProvider: cfg.tracerProvider,
		MeterProvider:  cfg.meterProvider,
		Propagators:    propagation.NewCompositeTextMapPropagator(),
	}.WithDefaults(), genaicall.Scope{Name: ScopeName, Version: Version(), Provider: contract.ProviderOpenAI})
	w := &wireAttributor{m: m, wait: cfg.syncTimeout, toolOwners: wireproxy.NewToolOwners(0)}
	m.wire = true
	p, err := wireproxy.Start(wireproxy.Config{
		Upstream:   up,
		Middleware: mw,
		Describe:   describeWire,
		Attribute:  w.attribute,
		Oversized:  w.oversized,
		Listen:     cfg.proxyAddr,
		// The provider's baseURL may be the proxy's URL or the proxy's URL
		// and the upstream's path (http://127.0.0.1:4098/v1).
		BaseAlias: true,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("otelopencode: model-wire proxy: %w", err)
	}
	return p, mw, nil
}

// oversized keeps every open turn of the request's session from final: a
// model call of it went upstream uncounted.
func (w *wireAttributor) oversized(req *http.Request) {
	m := w.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.sessions.lookup(req.Header.Get(headerSessionID)); s != nil {
		if a := s.oldestUnclaimed(); a != nil {
			a.claimed = true
			w.taint(a.turn, "request over the proxy's body limit")
			return
		}
	}
	ctx, inv := m.tracker.StartUnattributed(context.Background(), "opencode", req.Header.Get(headerSessionID), UnattributedNoMessage)
	w.taint(ctx, "request over the proxy's body limit")
	inv.End()
}
