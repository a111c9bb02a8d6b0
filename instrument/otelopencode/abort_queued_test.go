package otelopencode

import (
	"context"
	"strings"
	"testing"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
)

// An abort racing a completion notification that is already posted.
//
// OpenCode 1.18.33 posts a background job's notification as a prompt of
// its own (TaskTool.injectBackgroundResult -> SessionPrompt.prompt): it
// writes the synthetic user message, then calls SessionRunState's
// ensureRunning, which joins the session's running turn if there is one
// and starts a turn otherwise. An abort (SessionRunState.cancel)
// interrupts the running turn; a notification that had joined it never
// gets a turn of its own (the session's next turn reads it), but one
// whose ensureRunning comes after the abort starts a fresh turn that
// answers it. Both look the same until then: the notification is
// posted, the session reports the abort and goes idle. So the
// notification's followup can be neither discharged as interrupted (its
// turn may still come, and its usage is the job's invocation's) nor left
// open (nothing may ever come).

// queuedThenAborted plays bgLaunched, then a second prompt (invocation B,
// msg_06) whose turn is running when the job finishes and its
// notification (msg_08) is posted; then the caller aborts the session:
// the turn's model call is cancelled, the session reports the abort and
// goes idle, and the second prompt's call returns.
func queuedThenAborted(s *script, p *pipeline) (a, b *instrument.Invocation) {
	ctxA, a := p.tracker.StartInvocation(context.Background(), "build", "ses_A")
	bgLaunched(s, a, ctxA)
	ctxB, b := p.tracker.StartInvocation(context.Background(), "build", "ses_A")
	s.m.registerPrompt("ses_A", "msg_06", "", ctxB)
	s.user("ses_A", "msg_06")
	s.started("ses_A", "msg_07", "msg_06")
	s.call("ses_C", "msg_04", "msg_03", 30, 3, 0)
	s.childIdle()
	s.notification("ses_A", "msg_08", "ses_C")
	// SessionProcessor.halt, then the runner's own idle.
	s.send(abortErrorEvent, "ses_A")
	s.idle("ses_A")
	s.abortedCall("ses_A", "msg_07", "msg_06")
	s.idle("ses_A")
	s.m.promptDone("ses_A", "msg_06")
	s.end(b)
	return a, b
}

// started is an assistant message created, its model call running.
func (s *script) started(session, id, parent string) {
	s.send(`{"type":"message.updated","properties":{"sessionID":%q,"info":{"id":%q,"sessionID":%q,"role":"assistant","parentID":%q,"modelID":"m","providerID":"p","agent":"build","tokens":{"input":0,"output":0,"reasoning":0,"cache":{"read":0,"write":0}},"time":{"created":%d}}}}`,
		session, id, session, parent, s.now())
}

// abandonedReason is the reason the invocation of a job whose queued
// notification an abort left in doubt closes incomplete with.
func abandonedReason(sum instrument.Summary) bool {
	for _, r := range sum.Reasons {
		if strings.HasPrefix(r, contract.ReasonAbandonedFollowup+":") {
			return true
		}
	}
	return false
}

// notFinalAfterAbort fails when invocation a, whose job's notification
// was queued when the session was aborted, is final: its notification
// may still start a turn.
func notFinalAfterAbort(t *testing.T, p *pipeline, a *instrument.Invocation, when string) {
	t.Helper()
	sum, _ := p.sp.Ledger().Summary(a.ID())
	if sum.Status == contract.StatusFinal {
		t.Fatalf("%s: final while its queued notification may still start a turn: %+v", when, sum)
	}
	if sum.Status != contract.StatusIncomplete || !abandonedReason(sum) {
		t.Errorf("%s: status %q reasons %v, want incomplete with %s", when, sum.Status, sum.Reasons, contract.ReasonAbandonedFollowup)
	}
}

// The bad order: OpenCode runs the notification's turn after the abort.
// The invocation was never final, and the turn is its continuation.
func TestAbortQueuedNotificationTurnRunsAfter(t *testing.T) {
	p := newPipeline(t)
	s := &script{t: t, m: p.mapper(), ms: 1_000_000}
	a, b := queuedThenAborted(s, p)
	notFinalAfterAbort(t, p, a, "after the abort")
	s.call("ses_A", "msg_09", "msg_08", 50, 5, 0)
	notFinalAfterAbort(t, p, a, "during the notification's turn")
	s.idle("ses_A")
	notFinalAfterAbort(t, p, a, "after the notification's turn")
	noUnattributed(t, p)
	sum, _ := p.sp.Ledger().Summary(a.ID())
	// launch 10+1, after-launch 20+2, child 30+3, the turn 50+5.
	if u := sum.Usage; u.InputTokens != 110 || u.OutputTokens != 11 || u.ModelCalls != 4 || u.Continuations != 1 {
		t.Errorf("usage %+v, want the notification's turn in it", u)
	}
	if cont := spanOf(p, "continue_agent build", a.ID()); cont == nil {
		t.Error("no continuation of the job's invocation")
	}
	sumB, _ := p.sp.Ledger().Summary(b.ID())
	if sumB.Status != contract.StatusFinal || sumB.Usage.ModelCalls != 1 || sumB.Usage.InputTokens != 0 {
		t.Errorf("the aborted prompt: %+v", sumB)
	}
}

// The notification had joined the aborted turn: OpenCode gives it no turn
// of its own, and the caller's next prompt reads it. The job's invocation
// stays incomplete (it cannot be told from the order above until then);
// the reading turn's usage is the next prompt's own.
func TestAbortQueuedNotificationReadByNextPrompt(t *testing.T) {
	p := newPipeline(t)
	s := &script{t: t, m: p.mapper(), ms: 1_000_000}
	a, _ := queuedThenAborted(s, p)
	notFinalAfterAbort(t, p, a, "after the abort")
	ctxC, c := p.tracker.StartInvocation(context.Background(), "build", "ses_A")
	s.m.registerPrompt("ses_A", "msg_09", "", ctxC)
	s.user("ses_A", "msg_09")
	s.call("ses_A", "msg_10", "msg_09", 60, 6, 0)
	s.idle("ses_A")
	s.m.promptDone("ses_A", "msg_09")
	s.end(c)
	notFinalAfterAbort(t, p, a, "after the next prompt")
	sumC, _ := p.sp.Ledger().Summary(c.ID())
	if sumC.Status != contract.StatusFinal || sumC.Usage.InputTokens != 60 || sumC.Usage.ModelCalls != 1 {
		t.Errorf("the next prompt: %+v", sumC)
	}
	sum, _ := p.sp.Ledger().Summary(a.ID())
	if u := sum.Usage; u.InputTokens != 60 || u.ModelCalls != 3 || u.Continuations != 0 {
		t.Errorf("usage %+v", u)
	}
	// Neither the next prompt's turn nor a late answer to the
	// notification is the job's invocation's continuation.
	if cont := spanOf(p, "continue_agent build", a.ID()); cont != nil {
		t.Error("a continuation of the job's invocation")
	}
	noUnattributed(t, p)
	if s.m.sessions.lookup("ses_A").busy() {
		t.Error("the session still waits for the notification after a later turn read it")
	}
}

// Nothing follows the abort: the invocation is incomplete at once, not
// pending until the open timeout, and the session owes nothing the
// Client waits for.
func TestAbortQueuedNotificationNothingMore(t *testing.T) {
	p := newPipeline(t)
	s := &script{t: t, m: p.mapper(), ms: 1_000_000}
	a, _ := queuedThenAborted(s, p)
	notFinalAfterAbort(t, p, a, "after the abort")
	if s.m.sessions.lookup("ses_A").busy() {
		t.Error("the session is busy with a notification closed as abandoned")
	}
	closed := spansNamed(p, contract.SpanNameFollowupClosed)
	if len(closed) != 1 || attr(closed[0], contract.AttrFollowupReason).AsString() != contract.ReasonAbandoned ||
		attr(closed[0], contract.AttrInvocationID).AsString() != a.ID() {
		t.Errorf("followup_closed spans %v", closed)
	}
	// A second abort, or the session's deletion, closes nothing more.
	s.send(abortErrorEvent, "ses_A")
	s.idle("ses_A")
	s.send(`{"type":"session.deleted","properties":{"info":{"id":"ses_A"}}}`)
	if n := len(spansNamed(p, contract.SpanNameFollowupClosed)); n != 1 {
		t.Errorf("%d followup_closed spans, want 1", n)
	}
	noUnattributed(t, p)
}

// The orders in which the abort leaves no doubt keep their exact final:
// the notification's message reaches the Client only after the abort's
// events (the notification was posted after the abort, or its durable
// message events came late), or the session was idle when it was posted
// (the abort finds no turn running and reports no error: only an idle),
// and its turn runs.
func TestAbortNotificationPostedAfterOrIdle(t *testing.T) {
	tests := []struct {
		name  string
		abort func(s *script)
	}{{
		name: "notification after the abort's events",
		abort: func(s *script) {
			s.send(abortErrorEvent, "ses_A")
			s.idle("ses_A")
			s.abortedCall("ses_A", "msg_07", "msg_06")
			s.idle("ses_A")
			s.m.promptDone("ses_A", "msg_06")
			s.notification("ses_A", "msg_08", "ses_C")
		},
	}, {
		name: "notification's message first, abort without a running turn",
		abort: func(s *script) {
			s.call("ses_A", "msg_07", "msg_06", 40, 4, 0)
			s.idle("ses_A")
			s.m.promptDone("ses_A", "msg_06")
			s.notification("ses_A", "msg_08", "ses_C")
			s.idle("ses_A") // SessionRunState.cancel of an idle session
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPipeline(t)
			s := &script{t: t, m: p.mapper(), ms: 1_000_000}
			ctxA, a := p.tracker.StartInvocation(context.Background(), "build", "ses_A")
			bgLaunched(s, a, ctxA)
			ctxB, b := p.tracker.StartInvocation(context.Background(), "build", "ses_A")
			s.m.registerPrompt("ses_A", "msg_06", "", ctxB)
			s.user("ses_A", "msg_06")
			s.started("ses_A", "msg_07", "msg_06")
			s.call("ses_C", "msg_04", "msg_03", 30, 3, 0)
			s.childIdle()
			tt.abort(s)
			s.end(b)
			if sum, _ := p.sp.Ledger().Summary(a.ID()); sum.Status != contract.StatusPending {
				t.Fatalf("before the notification's turn: %+v", sum)
			}
			s.call("ses_A", "msg_09", "msg_08", 50, 5, 0)
			s.idle("ses_A")
			sum, _ := p.sp.Ledger().Summary(a.ID())
			if sum.Status != contract.StatusFinal || sum.Usage.InputTokens != 110 || sum.Usage.Continuations != 1 {
				t.Errorf("%+v", sum)
			}
			if closed := spansNamed(p, contract.SpanNameFollowupClosed); len(closed) != 0 {
				t.Errorf("followup_closed spans %v", closed)
			}
			noUnattributed(t, p)
		})
	}
}
