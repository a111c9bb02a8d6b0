package otelopencode

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/instrumenttest"
)

// trackedJobs is the number of jobs the mapper tracks.
func trackedJobs(m *mapper) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.jobs.len()
}

// sessionEntries is the number of messages, parts, turns, notifications
// and jobs the mapper holds for session id.
func sessionEntries(m *mapper, id string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions.lookup(id)
	if s == nil {
		return 0
	}
	return len(s.users) + len(s.assistants) + len(s.tools) + len(s.turns) + len(s.notes) + len(s.launched) + len(s.orphans)
}

// Every way a job's followup is settled forgets the job: the job map
// holds only jobs that still owe their followup.
func TestJobsForgottenWhenSettled(t *testing.T) {
	tests := []struct {
		name string
		// settle plays what follows the prompt's return (bgLaunched).
		settle func(s *script, p *pipeline)
		reason string // of the followup_closed span, "" for a continuation
	}{{
		name: "continuation",
		settle: func(s *script, _ *pipeline) {
			s.call("ses_C", "msg_04", "msg_03", 30, 3, 0)
			s.childIdle()
			s.notification("ses_A", "msg_06", "ses_C")
			s.call("ses_A", "msg_07", "msg_06", 20, 2, 0)
			s.idle("ses_A")
		},
	}, {
		name:   "interrupted",
		settle: func(s *script, _ *pipeline) { s.childError(); s.childIdle(); s.childFailed() },
		reason: contract.ReasonInterrupted,
	}, {
		name: "consumed by another invocation",
		settle: func(s *script, p *pipeline) {
			s.call("ses_C", "msg_04", "msg_03", 30, 3, 0)
			s.childIdle()
			ctx2, inv2 := p.tracker.StartInvocation(context.Background(), "build", "ses_A")
			s.m.registerPrompt("ses_A", "msg_07", "", ctx2)
			s.notification("ses_A", "msg_06", "ses_C")
			s.user("ses_A", "msg_07")
			s.call("ses_A", "msg_08", "msg_07", 40, 4, 0)
			s.idle("ses_A")
			s.m.promptDone("ses_A", "msg_07")
			s.end(inv2)
		},
		reason: contract.ReasonConsumedBy,
	}, {
		name: "session deleted",
		settle: func(s *script, _ *pipeline) {
			// OpenCode deletes a session's children first.
			s.send(`{"type":"session.deleted","properties":{"info":{"id":"ses_C"}}}`)
			s.send(`{"type":"session.deleted","properties":{"info":{"id":"ses_A"}}}`)
		},
		reason: contract.ReasonSessionClosed,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPipeline(t)
			s := &script{t: t, m: p.mapper(), ms: 1_000_000}
			ctx, inv := p.tracker.StartInvocation(context.Background(), "build", "ses_A")
			bgLaunched(s, inv, ctx)
			if n := trackedJobs(s.m); n != 1 {
				t.Fatalf("%d jobs tracked while the job runs, want 1", n)
			}
			tt.settle(s, p)
			if n := trackedJobs(s.m); n != 0 {
				t.Errorf("%d jobs tracked after the followup was settled, want 0", n)
			}
			if sum, _ := p.sp.Ledger().Summary(inv.ID()); sum.Status != contract.StatusFinal {
				t.Errorf("status %q after the followup was settled: %+v", sum.Status, sum)
			}
			var reasons []string
			for _, c := range spansNamed(p, contract.SpanNameFollowupClosed) {
				reasons = append(reasons, attr(c, contract.AttrFollowupReason).AsString())
			}
			if want := []string{tt.reason}; tt.reason == "" && len(reasons) != 0 || tt.reason != "" && fmt.Sprint(reasons) != fmt.Sprint(want) {
				t.Errorf("followup_closed reasons %v, want %q", reasons, tt.reason)
			}
		})
	}
}

// launchIn plays a prompt (msg_01) of session that launches a background
// subagent in session child and returns; its root has ended.
func launchIn(s *script, p *pipeline, session, child string) *instrument.Invocation {
	ctx, inv := p.tracker.StartInvocation(context.Background(), "build", session)
	s.session(session, "")
	s.m.registerPrompt(session, "msg_01", "", ctx)
	s.user(session, "msg_01")
	s.launch(session, "msg_02", "msg_01", child)
	s.idle(session)
	s.m.promptDone(session, "msg_01")
	s.end(inv)
	return inv
}

// Beyond WithMaxJobs the oldest job is dropped from tracking, fail-closed
// and counted: its running span ends with an error that says so, and its
// followup is never settled (no followup_closed, which would let its
// invocation be final while the job may still wake a turn whose usage
// lands elsewhere), so the invocation is never final: it stays pending,
// whatever the dropped job and its sessions do later, until the open
// timeout closes it incomplete with open_followup. The adapter forgets
// the job all the same, and the dropped job's later work is not added to
// its invocation.
func TestJobBoundDropsOldestFailClosed(t *testing.T) {
	clk := newManualClock()
	p := newPipeline(t, instrumenttest.WithClock(clk))
	c, err := New("http://127.0.0.1:1", &http.Client{}, WithTracerProvider(p.tp), WithLedger(p.sp.Ledger()), WithMaxJobs(2))
	if err != nil {
		t.Fatal(err)
	}
	s := &script{t: t, m: c.m, ms: 1_000_000}
	inv1 := launchIn(s, p, "ses_A", "ses_C1")
	inv2 := launchIn(s, p, "ses_B", "ses_C2")
	if n := trackedJobs(c.m); n != 2 || c.Stats().EvictedJobs != 0 {
		t.Fatalf("%d jobs, %d evicted before the bound", n, c.Stats().EvictedJobs)
	}
	inv3 := launchIn(s, p, "ses_D", "ses_C3")
	if n := trackedJobs(c.m); n != 2 {
		t.Errorf("%d jobs tracked, want the bound 2", n)
	}
	if n := c.Stats().EvictedJobs; n != 1 {
		t.Errorf("EvictedJobs = %d, want 1", n)
	}
	bg := spanOf(p, "background subagent", inv1.ID())
	if bg == nil || bg.Status().Code != codes.Error || !strings.Contains(bg.Status().Description, "no longer tracked") ||
		attr(bg, contract.AttrFollowups).AsInt64() != 1 {
		t.Fatalf("dropped job's background span: %v", bg)
	}
	notFinal := func(when string) {
		t.Helper()
		if sum, _ := p.sp.Ledger().Summary(inv1.ID()); sum.Status != contract.StatusPending {
			t.Fatalf("%s: the dropped job's invocation is %q, want pending: %+v", when, sum.Status, sum)
		}
		if closed := spansNamed(p, contract.SpanNameFollowupClosed); len(closed) != 0 {
			t.Fatalf("%s: followup_closed spans %v, want none", when, closed)
		}
	}
	notFinal("after the drop")
	for _, inv := range []*instrument.Invocation{inv2, inv3} {
		if sum, _ := p.sp.Ledger().Summary(inv.ID()); sum.Status != contract.StatusPending {
			t.Errorf("tracked job's invocation %q: %+v", sum.Status, sum)
		}
	}
	// The dropped job goes on and notifies: none of it is inv1's, and
	// nothing of it settles inv1's followup.
	before := spansOf(p, inv1.ID())
	s.user("ses_C1", "msg_03")
	s.call("ses_C1", "msg_04", "msg_03", 30, 3, 0)
	s.idle("ses_C1")
	notFinal("after the dropped job's turn")
	s.notification("ses_A", "msg_05", "ses_C1")
	s.call("ses_A", "msg_06", "msg_05", 20, 2, 0)
	s.idle("ses_A")
	notFinal("after the dropped job's notification and its turn")
	if after := spansOf(p, inv1.ID()); after != before {
		t.Errorf("%d spans added to the invocation whose job was dropped", after-before)
	}
	// Forgotten: the launching session no longer holds the job.
	c.m.mu.Lock()
	launched := len(c.m.sessions.lookup("ses_A").launched)
	c.m.mu.Unlock()
	if launched != 0 {
		t.Errorf("the launching session still holds %d jobs", launched)
	}
	// The other jobs still settle normally.
	s.user("ses_C2", "msg_03")
	s.call("ses_C2", "msg_04", "msg_03", 30, 3, 0)
	s.idle("ses_C2")
	s.notification("ses_B", "msg_05", "ses_C2")
	s.call("ses_B", "msg_06", "msg_05", 20, 2, 0)
	s.idle("ses_B")
	if sum, _ := p.sp.Ledger().Summary(inv2.ID()); sum.Status != contract.StatusFinal || sum.Usage.InputTokens != 10+30+20 {
		t.Errorf("second invocation: %+v", sum)
	}
	// Deleting the dropped job's sessions settles nothing either.
	s.send(`{"type":"session.deleted","properties":{"info":{"id":"ses_C1"}}}`)
	s.send(`{"type":"session.deleted","properties":{"info":{"id":"ses_A"}}}`)
	notFinal("after its sessions were deleted")
	if st, _ := c.Session("ses_A"); !st.OwesWork || len(st.ExpectedFollowups) != 1 {
		t.Errorf("the dropped job's session: %+v, want its followup expected", st)
	}
	clk.Advance(instrument.DefaultOpenTimeout)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sum, err := c.Wait(ctx, inv1.ID())
	want := contract.ReasonOpenFollowup + ":background subagent"
	if err != nil || sum.Status != contract.StatusIncomplete || !slices.Contains(sum.Reasons, contract.ReasonOpenTimeout) ||
		!slices.Contains(sum.Reasons, want) {
		t.Errorf("the dropped job's invocation at the open timeout: %v %+v, want incomplete with %s", err, sum, want)
	}
}

// A session that always owes something (a job that never ends) while the
// caller keeps prompting holds only what is still open, and a read-back of
// its whole history changes nothing.
func TestBusySessionStaysSmall(t *testing.T) {
	p := newPipeline(t)
	s := &script{t: t, m: p.mapper(), ms: 1_000_000}
	job := launchIn(s, p, "ses_A", "ses_C")
	const prompts = 30
	var last *instrument.Invocation
	for i := range prompts {
		user, call, tool := fmt.Sprintf("msg_1%03d", 2*i), fmt.Sprintf("msg_1%03d", 2*i+1), fmt.Sprintf("prt_%03d", i)
		ctx, inv := p.tracker.StartInvocation(context.Background(), "build", "ses_A")
		s.m.registerPrompt("ses_A", user, "", ctx)
		s.user("ses_A", user)
		created := s.now()
		s.send(`{"type":"message.updated","properties":{"sessionID":"ses_A","info":{"id":%q,"sessionID":"ses_A","role":"assistant","parentID":%q,"modelID":"m","providerID":"p","time":{"created":%d}}}}`, call, user, created)
		s.send(`{"type":"message.part.updated","properties":{"sessionID":"ses_A","part":{"type":"tool","tool":"bash","callID":"call_%d","state":{"status":"completed","input":{"command":"ls"},"time":{"start":%d,"end":%d}},"id":%q,"sessionID":"ses_A","messageID":%q}}}`, i, s.now(), s.now(), tool, call)
		s.send(`{"type":"message.updated","properties":{"sessionID":"ses_A","info":{"id":%q,"sessionID":"ses_A","role":"assistant","parentID":%q,"modelID":"m","providerID":"p","tokens":{"input":7,"output":1,"reasoning":0,"cache":{"read":0,"write":0}},"time":{"created":%d,"completed":%d}}}}`, call, user, created, s.now())
		s.idle("ses_A")
		s.m.promptDone("ses_A", user)
		s.end(inv)
		last = inv
	}
	if n := sessionEntries(s.m, "ses_A"); n > 2 {
		t.Errorf("session holds %d entries after %d answered prompts with a job running, want at most 2", n, prompts)
	}
	chats, tools := len(spansNamed(p, "chat m")), len(spansNamed(p, "execute_tool bash"))
	s.replaySent()
	if c, tl := len(spansNamed(p, "chat m")), len(spansNamed(p, "execute_tool bash")); c != chats || tl != tools {
		t.Errorf("a read-back of the history made %d chat and %d tool spans, want %d and %d", c, tl, chats, tools)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if sum, err := p.sp.Ledger().Wait(ctx, last.ID()); err != nil || sum.Usage.InputTokens != 7 || sum.Usage.ModelCalls != 1 {
		t.Errorf("last prompt: %v %+v", err, sum)
	}
	if sum, _ := p.sp.Ledger().Summary(job.ID()); sum.Status != contract.StatusPending {
		t.Errorf("the job's invocation %q with the job running", sum.Status)
	}
}

// Messages of a child session seen before its job are kept once each
// (however often they are updated) and only for a session this Client
// tracks; a child of a session nobody prompted through the Client keeps
// nothing.
func TestOrphansBounded(t *testing.T) {
	p := newPipeline(t)
	s := &script{t: t, m: p.mapper(), ms: 1_000_000}
	s.session("ses_U", "")
	s.session("ses_K", "ses_U")
	for i := range 20 {
		s.call("ses_K", fmt.Sprintf("msg_%03d", 2*i+1), fmt.Sprintf("msg_%03d", 2*i), 5, 1, 0)
	}
	if n := sessionEntries(s.m, "ses_K"); n != 0 {
		t.Errorf("child of an untracked session holds %d entries, want 0", n)
	}

	ctx, inv := p.tracker.StartInvocation(context.Background(), "build", "ses_A")
	s.session("ses_A", "")
	s.m.registerPrompt("ses_A", "msg_01", "", ctx)
	s.user("ses_A", "msg_01")
	s.session("ses_C", "ses_A")
	// The child's model call and a tool part, each updated several times,
	// before the task tool's part names the child session.
	s.user("ses_C", "msg_03")
	created := s.now()
	for range 3 {
		s.send(`{"type":"message.updated","properties":{"sessionID":"ses_C","info":{"id":"msg_04","sessionID":"ses_C","role":"assistant","parentID":"msg_03","modelID":"m","providerID":"p","time":{"created":%d}}}}`, created)
		s.send(`{"type":"message.part.updated","properties":{"sessionID":"ses_C","part":{"type":"tool","tool":"bash","callID":"call_c","state":{"status":"running","input":{}, "time":{"start":%d}},"id":"prt_c","sessionID":"ses_C","messageID":"msg_04"}}}`, created)
	}
	s.send(`{"type":"message.part.updated","properties":{"sessionID":"ses_C","part":{"type":"tool","tool":"bash","callID":"call_c","state":{"status":"completed","input":{}, "time":{"start":%d,"end":%d}},"id":"prt_c","sessionID":"ses_C","messageID":"msg_04"}}}`, created, s.now())
	s.send(`{"type":"message.updated","properties":{"sessionID":"ses_C","info":{"id":"msg_04","sessionID":"ses_C","role":"assistant","parentID":"msg_03","modelID":"m","providerID":"p","tokens":{"input":30,"output":3,"reasoning":0,"cache":{"read":0,"write":0}},"time":{"created":%d,"completed":%d}}}}`, created, s.now())
	s.m.mu.Lock()
	orphans := len(s.m.sessions.lookup("ses_C").orphans)
	s.m.mu.Unlock()
	if orphans > 2 {
		t.Errorf("%d orphans kept for one message and one part", orphans)
	}
	s.launch("ses_A", "msg_02", "msg_01", "ses_C")
	s.childIdle()
	s.idle("ses_A")
	s.m.promptDone("ses_A", "msg_01")
	s.end(inv)
	s.notification("ses_A", "msg_06", "ses_C")
	s.call("ses_A", "msg_07", "msg_06", 20, 2, 0)
	s.idle("ses_A")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sum, err := p.sp.Ledger().Wait(ctx, inv.ID())
	if err != nil || sum.Usage.InputTokens != 10+30+20 || sum.Usage.ModelCalls != 3 {
		t.Errorf("%v %+v", err, sum)
	}
	if spanOf(p, "execute_tool bash", inv.ID()) == nil {
		t.Errorf("the child's tool call has no span")
	}
}

// spansOf is the number of ended spans of invocation id.
func spansOf(p *pipeline, id string) int {
	var n int
	for _, sp := range p.rec.Ended() {
		if attr(sp, contract.AttrInvocationID).AsString() == id {
			n++
		}
	}
	return n
}
