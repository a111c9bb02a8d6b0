package otelopencode

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/genaicall"
	"github.com/agentledger/agentledger/instrument/internal/wireproxy"
)

// wireRig is a mapper in model-wire mode with its attributor, fed events
// by hand.
type wireRig struct {
	p *pipeline
	m *mapper
	w *wireAttributor
}

func newWireRig(t *testing.T) *wireRig {
	p := newPipeline(t)
	m := p.mapper()
	m.wire = true
	return &wireRig{p: p, m: m, w: &wireAttributor{m: m, wait: 50 * time.Millisecond, toolOwners: wireproxy.NewToolOwners(0)}}
}

// prompt registers a prompt of the Client in session and returns its
// invocation's context.
func (r *wireRig) prompt(session, msgID, text string) context.Context {
	ctx, _ := r.p.tracker.StartInvocation(context.Background(), "build", session)
	r.m.registerPrompt(session, msgID, text, ctx)
	return ctx
}

// assistant shows an assistant message answering parent.
func (r *wireRig) assistant(session, id, parent string) {
	r.m.handle(event{Type: evMessageUpdated, Properties: eventProperties{Info: &rawInfo{
		ID: id, SessionID: session, ParentID: parent, Role: "assistant", ModelID: "m", ProviderID: "p"}}})
}

func wireReq(session, body string) *http.Request {
	req, _ := http.NewRequest(http.MethodPost, "http://proxy/chat/completions", strings.NewReader(body))
	if session != "" {
		req.Header.Set(headerSessionID, session)
	}
	return req
}

const chatBody = `{"model":"m","tools":[{}],"messages":[{"role":"system","content":"You are opencode"},{"role":"user","content":"hi"}]}`

// unattributedReason returns the reason on the root of ctx's invocation
// when it is an unattributed one.
func (r *wireRig) reasonOf(t *testing.T, ctx context.Context) string {
	t.Helper()
	id := invocationOf(ctx)
	for reason, roots := range unattributedRoots(r.p) {
		for _, s := range roots {
			if attr(s, contract.AttrInvocationID).AsString() == id {
				return reason
			}
		}
	}
	return ""
}

func invocationOf(ctx context.Context) string { return instrument.InvocationIDFromContext(ctx) }

var zeroUsage genaicall.Usage

func TestWireAttribution(t *testing.T) {
	t.Run("a session's message claims the request", func(t *testing.T) {
		r := newWireRig(t)
		ctx := r.prompt("ses_a", "msg_1", "hi")
		r.assistant("ses_a", "msg_2", "msg_1")
		d := r.w.attribute(wireReq("ses_a", chatBody), []byte(chatBody))
		if invocationOf(d.Ctx) != invocationOf(ctx) {
			t.Fatal("not the prompt's invocation")
		}
		// The message is claimed: a second request waits, then is nobody's.
		d2 := r.w.attribute(wireReq("ses_a", chatBody), []byte(chatBody))
		d2.Done(zeroUsage)
		if invocationOf(d2.Ctx) == invocationOf(ctx) {
			t.Error("a second request took the claimed message")
		}
		if got := r.reasonOf(t, d2.Ctx); got != UnattributedNoMessage {
			t.Errorf("reason %q", got)
		}
		// The prompt's turn may own it (a retry): it cannot be final.
		if n := ambiguousIn(r.p, ctx); n != 1 {
			t.Errorf("%d ambiguous calls in the prompt's invocation, want 1", n)
		}
	})
	t.Run("the request waits for its message", func(t *testing.T) {
		r := newWireRig(t)
		r.w.wait = 5 * time.Second
		ctx := r.prompt("ses_a", "msg_1", "hi")
		go func() {
			time.Sleep(20 * time.Millisecond)
			r.assistant("ses_a", "msg_2", "msg_1")
		}()
		d := r.w.attribute(wireReq("ses_a", chatBody), []byte(chatBody))
		if invocationOf(d.Ctx) != invocationOf(ctx) {
			t.Fatal("not the prompt's invocation")
		}
	})
	t.Run("no session header", func(t *testing.T) {
		r := newWireRig(t)
		d := r.w.attribute(wireReq("", chatBody), []byte(chatBody))
		d.Done(zeroUsage)
		if got := r.reasonOf(t, d.Ctx); got != UnattributedNoSession {
			t.Errorf("reason %q", got)
		}
	})
	t.Run("a session nobody prompted", func(t *testing.T) {
		r := newWireRig(t)
		d := r.w.attribute(wireReq("ses_other", chatBody), []byte(chatBody))
		d.Done(zeroUsage)
		if got := r.reasonOf(t, d.Ctx); got != UnattributedOtherPrompt {
			t.Errorf("reason %q", got)
		}
	})
	t.Run("tool results of another invocation", func(t *testing.T) {
		r := newWireRig(t)
		a := r.prompt("ses_a", "msg_1", "one")
		b := r.prompt("ses_b", "msg_1", "two")
		r.w.toolOwners.Remember("call_b", b)
		r.assistant("ses_a", "msg_2", "msg_1")
		body := `{"model":"m","tools":[{}],"messages":[{"role":"user","content":"one"},{"role":"assistant","content":""},{"role":"tool","tool_call_id":"call_b","content":"x"}]}`
		d := r.w.attribute(wireReq("ses_a", body), []byte(body))
		d.Done(zeroUsage)
		if got := r.reasonOf(t, d.Ctx); got != UnattributedAmbiguous {
			t.Errorf("reason %q", got)
		}
		// Both candidates have a usage-less model call that keeps them
		// from final.
		for _, c := range []context.Context{a, b} {
			if n := ambiguousIn(r.p, c); n != 1 {
				t.Errorf("%d ambiguous calls in a candidate, want 1", n)
			}
		}
	})
	t.Run("title request", func(t *testing.T) {
		r := newWireRig(t)
		ctx := r.prompt("ses_a", "msg_1", "name me")
		body := `{"model":"m","messages":[{"role":"system","content":"You are a title generator. You output ONLY a thread title."},{"role":"user","content":"Generate a title for this conversation:\n"},{"role":"user","content":"name me"}]}`
		d := r.w.attribute(wireReq("ses_a", body), []byte(body))
		if invocationOf(d.Ctx) != invocationOf(ctx) {
			t.Fatal("the title request is not the prompt's")
		}
		// Two prompts of that text: ambiguous.
		r.prompt("ses_a", "msg_3", "name me")
		d = r.w.attribute(wireReq("ses_a", body), []byte(body))
		d.Done(zeroUsage)
		if got := r.reasonOf(t, d.Ctx); got != UnattributedAmbiguous {
			t.Errorf("reason %q", got)
		}
	})
}

// ambiguousIn counts the "chat ambiguous" spans under ctx's span.
func ambiguousIn(p *pipeline, ctx context.Context) int {
	n := 0
	for _, s := range spansNamed(p, contract.OpChat+" ambiguous") {
		if s.Parent().SpanID() == trace.SpanContextFromContext(ctx).SpanID() {
			n++
		}
	}
	return n
}

// TestWireUnseenCall: a model call that completes with usage although no
// request of the proxy claimed it (a provider not pointed at the proxy)
// keeps its turn from final.
func TestWireUnseenCall(t *testing.T) {
	r := newWireRig(t)
	ctx := r.prompt("ses_a", "msg_1", "hi")
	done := &rawInfo{ID: "msg_2", SessionID: "ses_a", ParentID: "msg_1", Role: "assistant", ModelID: "m", ProviderID: "p",
		Tokens: &tokens{Input: 10, Output: 2}}
	done.Time.Completed = 1
	r.assistant("ses_a", "msg_2", "msg_1")
	r.m.handle(event{Type: evMessageUpdated, Properties: eventProperties{Info: done}})
	if n := ambiguousIn(r.p, ctx); n != 1 {
		t.Errorf("%d ambiguous calls, want 1", n)
	}
	// A claimed one does not.
	r.assistant("ses_a", "msg_3", "msg_1")
	d := r.w.attribute(wireReq("ses_a", chatBody), []byte(chatBody))
	if invocationOf(d.Ctx) != invocationOf(ctx) {
		t.Fatal("not the prompt's")
	}
	claimed := *done
	claimed.ID = "msg_3"
	r.m.handle(event{Type: evMessageUpdated, Properties: eventProperties{Info: &claimed}})
	if n := ambiguousIn(r.p, ctx); n != 1 {
		t.Errorf("%d ambiguous calls after a claimed one, want 1", n)
	}
	if len(spansNamed(r.p, "chat m")) != 0 {
		t.Error("the events made a model-call span in wire mode")
	}
}

// TestWireOversized: a request too long for the proxy to read went
// upstream uncounted: the turn of the message it was keeps from final,
// and the next request does not take that message.
func TestWireOversized(t *testing.T) {
	r := newWireRig(t)
	ctx := r.prompt("ses_a", "msg_1", "hi")
	r.assistant("ses_a", "msg_2", "msg_1")
	r.w.oversized(wireReq("ses_a", ""))
	if n := ambiguousIn(r.p, ctx); n != 1 {
		t.Errorf("%d ambiguous calls, want 1", n)
	}
	d := r.w.attribute(wireReq("ses_a", chatBody), []byte(chatBody))
	d.Done(zeroUsage)
	if got := r.reasonOf(t, d.Ctx); got != UnattributedNoMessage {
		t.Errorf("the next request: reason %q, want %s", got, UnattributedNoMessage)
	}
	// Of a session nobody tracks: an unattributed invocation that cannot
	// be final.
	before := len(spansNamed(r.p, contract.OpChat+" ambiguous"))
	r.w.oversized(wireReq("ses_other", ""))
	if n := len(spansNamed(r.p, contract.OpChat+" ambiguous")) - before; n != 1 {
		t.Errorf("%d ambiguous calls for an untracked session, want 1", n)
	}
}
