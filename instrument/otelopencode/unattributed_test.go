package otelopencode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
)

// unattributedRoots returns the root spans of unattributed turns, by reason.
func unattributedRoots(p *pipeline) map[string][]sdktrace.ReadOnlySpan {
	out := map[string][]sdktrace.ReadOnlySpan{}
	for _, sp := range p.rec.Ended() {
		if r := attr(sp, contract.AttrUnattributed).AsString(); r != "" {
			out[r] = append(out[r], sp)
		}
	}
	return out
}

// checkUnattributed checks that root is the root of an unattributed turn
// of session, outside every other trace, that the ledger closes
// incomplete with unattributed_wakeup:<reason> and the given usage.
func checkUnattributed(t *testing.T, p *pipeline, root sdktrace.ReadOnlySpan, session, reason string, in, out, calls int64) {
	t.Helper()
	if root.Parent().IsValid() || attr(root, contract.AttrRole).AsString() != contract.RoleRoot ||
		attr(root, contract.AttrConversationID).AsString() != session {
		t.Errorf("unattributed root %q: parent %v, attributes %v", root.Name(), root.Parent(), root.Attributes())
	}
	id := attr(root, contract.AttrInvocationID).AsString()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sum, err := p.sp.Ledger().Wait(ctx, id)
	if err != nil {
		t.Fatalf("unattributed %s: %v %+v", reason, err, sum)
	}
	want := contract.ReasonUnattributedWakeup + ":" + reason
	if sum.Status != contract.StatusIncomplete || !slices.Contains(sum.Reasons, want) {
		t.Errorf("unattributed %s: status %q reasons %v, want incomplete with %s", reason, sum.Status, sum.Reasons, want)
	}
	if u := sum.Usage; u.InputTokens != in || u.OutputTokens != out || u.ModelCalls != calls {
		t.Errorf("unattributed %s: usage %+v, want input %d output %d calls %d", reason, u, in, out, calls)
	}
}

// noUnattributed fails when any turn was recorded as unattributed.
func noUnattributed(t *testing.T, p *pipeline) {
	t.Helper()
	if roots := unattributedRoots(p); len(roots) > 0 {
		var reasons []string
		for r := range roots {
			reasons = append(reasons, r)
		}
		sort.Strings(reasons)
		t.Errorf("turns recorded as unattributed: %v", reasons)
	}
}

// promptDoneIn plays a prompt msg_01 of session answered by one model
// call, and returns its invocation, root ended.
func promptDoneIn(s *script, p *pipeline, session string) *instrument.Invocation {
	ctx, inv := p.tracker.StartInvocation(context.Background(), "build", session)
	s.session(session, "")
	s.m.registerPrompt(session, "msg_01", "", ctx)
	s.user(session, "msg_01")
	s.call(session, "msg_02", "msg_01", 10, 1, 0)
	s.idle(session)
	s.m.promptDone(session, "msg_01")
	s.end(inv)
	return inv
}

// A completion notification of a job the Client never saw start (a shell
// launched before it attached) starts a turn in a session it tracks: the
// turn is an invocation of its own, marked unattributed, with the turn's
// model calls and tools as its usage; the session owes work until the turn
// ends, and the earlier invocation is untouched.
func TestUnattributedNotificationOfUnknownJob(t *testing.T) {
	p := newPipeline(t)
	s := &script{t: t, m: p.mapper(), ms: 1_000_000}
	first := promptDoneIn(s, p, "ses_A")

	s.notification("ses_A", "msg_03", "bash_never_seen")
	created := s.now()
	s.send(`{"type":"message.updated","properties":{"sessionID":"ses_A","info":{"id":"msg_04","sessionID":"ses_A","role":"assistant","parentID":"msg_03","modelID":"m","providerID":"p","agent":"build","time":{"created":%d}}}}`, created)
	s.send(`{"type":"message.part.updated","properties":{"sessionID":"ses_A","part":{"type":"tool","tool":"bash","callID":"call_9","state":{"status":"completed","input":{"command":"cat log"},"time":{"start":%d,"end":%d}},"id":"prt_9","sessionID":"ses_A","messageID":"msg_04"}}}`, s.now(), s.now())
	s.send(`{"type":"message.updated","properties":{"sessionID":"ses_A","info":{"id":"msg_04","sessionID":"ses_A","role":"assistant","parentID":"msg_03","modelID":"m","providerID":"p","agent":"build","tokens":{"input":30,"output":3,"reasoning":0,"cache":{"read":0,"write":0}},"time":{"created":%d,"completed":%d}}}}`, created, s.now())
	s.call("ses_A", "msg_05", "msg_03", 40, 4, 0)

	if st := p.sp.Ledger().Session("ses_A"); !st.OwesWork || st.UnattributedTurns != 1 {
		t.Errorf("session while the unattributed turn runs: %+v, want owing work", st)
	}
	roots := unattributedRoots(p)
	if len(roots) != 0 {
		t.Fatalf("unattributed root ended while its turn runs: %v", roots)
	}
	s.idle("ses_A")
	if st := p.sp.Ledger().Session("ses_A"); st.OwesWork {
		t.Errorf("session after the turn: %+v", st)
	}
	roots = unattributedRoots(p)
	if len(roots[UnattributedUnknownTask]) != 1 || len(roots) != 1 {
		t.Fatalf("unattributed roots %v, want one %s", roots, UnattributedUnknownTask)
	}
	root := roots[UnattributedUnknownTask][0]
	checkUnattributed(t, p, root, "ses_A", UnattributedUnknownTask, 30+40, 3+4, 2)
	id := attr(root, contract.AttrInvocationID).AsString()
	if spanOf(p, "execute_tool bash", id) == nil {
		t.Errorf("the turn's tool call is not in the unattributed invocation")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if sum, err := p.sp.Ledger().Wait(ctx, first.ID()); err != nil || sum.Status != contract.StatusFinal || sum.Usage.InputTokens != 10 {
		t.Errorf("the earlier prompt: %v %+v", err, sum)
	}
}

// A turn whose user message the Client never saw (its events were lost
// while the stream was detached): the model calls that do arrive are an
// unattributed invocation.
func TestUnattributedUnseenMessage(t *testing.T) {
	p := newPipeline(t)
	s := &script{t: t, m: p.mapper(), ms: 1_000_000}
	promptDoneIn(s, p, "ses_A")
	// msg_03 (user) was posted while detached; the stream is back for the
	// turn's model call.
	s.call("ses_A", "msg_04", "msg_03", 30, 3, 0)
	s.idle("ses_A")
	roots := unattributedRoots(p)
	if len(roots[UnattributedUnseenMessage]) != 1 || len(roots) != 1 {
		t.Fatalf("unattributed roots %v", roots)
	}
	checkUnattributed(t, p, roots[UnattributedUnseenMessage][0], "ses_A", UnattributedUnseenMessage, 30, 3, 1)
}

// A prompt another client of the server sent into a session the Client
// tracks, and a turn that answers the Client's own prompt after its
// invocation ended (the caller gave up; OpenCode went on): both are
// unattributed invocations, never added to an invocation already closed.
func TestUnattributedOtherPromptAndEndedPrompt(t *testing.T) {
	p := newPipeline(t)
	s := &script{t: t, m: p.mapper(), ms: 1_000_000}
	first := promptDoneIn(s, p, "ses_A")
	s.call("ses_A", "msg_03", "msg_01", 20, 2, 0) // the ended prompt answered again
	s.user("ses_A", "msg_04")                     // another client's prompt
	s.call("ses_A", "msg_05", "msg_04", 30, 3, 0)
	s.idle("ses_A")
	roots := unattributedRoots(p)
	if len(roots[UnattributedEndedTurn]) != 1 || len(roots[UnattributedOtherPrompt]) != 1 || len(roots) != 2 {
		t.Fatalf("unattributed roots %v", roots)
	}
	checkUnattributed(t, p, roots[UnattributedEndedTurn][0], "ses_A", UnattributedEndedTurn, 20, 2, 1)
	checkUnattributed(t, p, roots[UnattributedOtherPrompt][0], "ses_A", UnattributedOtherPrompt, 30, 3, 1)
	if sum, _ := p.sp.Ledger().Summary(first.ID()); sum.Status != contract.StatusFinal || sum.Usage.InputTokens != 10 || len(sum.Anomalies) > 0 {
		t.Errorf("the ended prompt's invocation changed: %+v", sum)
	}
}

// A notification an abort left without a turn (its followup closed as
// abandoned: its fate was unknown) still gets a turn: the turn is the job's
// invocation's continuation, not unattributed, and the invocation, whose
// summary went out before it, stays incomplete. Answered once more after
// that turn ended, the notification's turn is unattributed (ended_turn).
func TestUnattributedSettledNotification(t *testing.T) {
	p := newPipeline(t)
	s := &script{t: t, m: p.mapper(), ms: 1_000_000}
	ctx, inv := p.tracker.StartInvocation(context.Background(), "build", "ses_A")
	bgLaunched(s, inv, ctx)
	s.call("ses_C", "msg_04", "msg_03", 30, 3, 0)
	s.childIdle()
	s.notification("ses_A", "msg_06", "ses_C")
	s.send(abortErrorEvent, "ses_A")
	s.idle("ses_A")
	s.call("ses_A", "msg_07", "msg_06", 20, 2, 0)
	s.idle("ses_A")
	if sum, _ := p.sp.Ledger().Summary(inv.ID()); sum.Status != contract.StatusIncomplete || !abandonedReason(sum) ||
		sum.Usage.InputTokens != 10+20+30+20 || sum.Usage.Continuations != 1 {
		t.Errorf("job's invocation: %+v", sum)
	}
	if n, c := len(spansNamed(p, contract.SpanNameFollowupClosed)), len(spansNamed(p, "continue_agent build")); n != 1 || c != 1 {
		t.Errorf("%d followup_closed and %d continuations, want 1 and 1", n, c)
	}
	noUnattributed(t, p)
	s.call("ses_A", "msg_08", "msg_06", 40, 4, 0)
	s.idle("ses_A")
	roots := unattributedRoots(p)
	if len(roots[UnattributedEndedTurn]) != 1 || len(roots) != 1 {
		t.Fatalf("unattributed roots %v", roots)
	}
	checkUnattributed(t, p, roots[UnattributedEndedTurn][0], "ses_A", UnattributedEndedTurn, 40, 4, 1)
}

// A job the Client dropped beyond WithMaxJobs goes on: its child session's
// turns and its notification's turn are unattributed invocations.
func TestUnattributedWorkOfDroppedJob(t *testing.T) {
	p := newPipeline(t)
	s := &script{t: t, m: p.mapperWith(1000, 1), ms: 1_000_000}
	launchIn(s, p, "ses_A", "ses_C1")
	launchIn(s, p, "ses_B", "ses_C2") // drops ses_C1's job
	s.user("ses_C1", "msg_03")
	s.call("ses_C1", "msg_04", "msg_03", 30, 3, 0)
	s.idle("ses_C1")
	s.notification("ses_A", "msg_05", "ses_C1")
	s.call("ses_A", "msg_06", "msg_05", 20, 2, 0)
	s.idle("ses_A")
	roots := unattributedRoots(p)
	if len(roots[UnattributedUntrackedJob]) != 1 || len(roots[UnattributedUnknownTask]) != 1 || len(roots) != 2 {
		t.Fatalf("unattributed roots %v", roots)
	}
	checkUnattributed(t, p, roots[UnattributedUntrackedJob][0], "ses_C1", UnattributedUntrackedJob, 30, 3, 1)
	checkUnattributed(t, p, roots[UnattributedUnknownTask][0], "ses_A", UnattributedUnknownTask, 20, 2, 1)
}

// A turn that started and ran while the event stream was detached, in a
// session the Client tracks that owed nothing: after reconnecting, the
// Client reads back the sessions the server reports busy too, and records
// the turn as unattributed; it ends at the session's idle.
func TestUnattributedTurnReadBackAfterReconnect(t *testing.T) {
	var status string
	mux := http.NewServeMux()
	mux.HandleFunc("GET /session/status", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, status) })
	mux.HandleFunc("GET /session/ses_A/message", func(w http.ResponseWriter, _ *http.Request) {
		msgs := []messageWithParts{
			{Info: rawInfo{ID: "msg_01", SessionID: "ses_A", Role: "user"}},
			{Info: rawInfo{ID: "msg_02", SessionID: "ses_A", Role: "assistant", ParentID: "msg_01", ModelID: "m", ProviderID: "p",
				Tokens: &tokens{Input: 10, Output: 1}, Time: msgTime{Created: 1_000_020, Completed: 1_000_030}}},
			{Info: rawInfo{ID: "msg_03", SessionID: "ses_A", Role: "user", Time: msgTime{Created: 2_000_000}}},
			{Info: rawInfo{ID: "msg_04", SessionID: "ses_A", Role: "assistant", ParentID: "msg_03", ModelID: "m", ProviderID: "p",
				Tokens: &tokens{Input: 30, Output: 3}, Time: msgTime{Created: 2_000_010, Completed: 2_000_020}}},
			{Info: rawInfo{ID: "msg_05", SessionID: "ses_A", Role: "assistant", ParentID: "msg_03", ModelID: "m", ProviderID: "p",
				Time: msgTime{Created: 2_000_030}}},
		}
		_ = json.NewEncoder(w).Encode(msgs)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	p := newPipeline(t)
	c, err := New(srv.URL, srv.Client(), WithTracerProvider(p.tp), WithLedger(p.sp.Ledger()))
	if err != nil {
		t.Fatal(err)
	}
	s := &script{t: t, m: c.m, ms: 1_000_000}
	first := promptDoneIn(s, p, "ses_A")

	status = `{"ses_A":{"type":"busy"}}`
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.stream.reconcile(ctx)
	if st := p.sp.Ledger().Session("ses_A"); !st.OwesWork || st.UnattributedTurns != 1 {
		t.Errorf("session while the turn read back runs: %+v, want owing work", st)
	}
	s.call("ses_A", "msg_05", "msg_03", 40, 4, 0)
	s.idle("ses_A")
	roots := unattributedRoots(p)
	if len(roots[UnattributedOtherPrompt]) != 1 || len(roots) != 1 {
		t.Fatalf("unattributed roots %v", roots)
	}
	checkUnattributed(t, p, roots[UnattributedOtherPrompt][0], "ses_A", UnattributedOtherPrompt, 30+40, 3+4, 2)
	if sum, _ := p.sp.Ledger().Summary(first.ID()); sum.Usage.ModelCalls != 1 {
		t.Errorf("the read-back changed the first prompt: %+v", sum)
	}
}

// The recorded background task, with the events that named the job (the
// task tool's part) lost: the child session's model call and the turn the
// completion woke are unattributed invocations with their recorded usage;
// the prompt keeps its own.
func TestReplayJobNeverObserved(t *testing.T) {
	p := newPipeline(t)
	prompts := replayFiltered(t, p, "background_task.sse", func(ev event) bool {
		pt := ev.Properties.Part
		return pt == nil || pt.Tool != "task"
	})
	if len(prompts) != 1 {
		t.Fatalf("prompts = %d", len(prompts))
	}
	in, out, cache, reasoning := reqs(4, 5)
	checkSummary(t, p, prompts[0], wantUsage{contract.StatusFinal, in, out, cache, reasoning, 0, 0, 2, 0, 0})
	roots := unattributedRoots(p)
	if len(roots[UnattributedUnknownTask]) != 2 || len(roots) != 1 {
		t.Fatalf("unattributed roots %v, want two %s", roots, UnattributedUnknownTask)
	}
	var got []int64
	for _, root := range roots[UnattributedUnknownTask] {
		sum, _ := p.sp.Ledger().Summary(attr(root, contract.AttrInvocationID).AsString())
		if sum.Status != contract.StatusIncomplete || !slices.Contains(sum.Reasons, contract.ReasonUnattributedWakeup+":"+UnattributedUnknownTask) {
			t.Errorf("unattributed %+v", sum)
		}
		got = append(got, sum.Usage.InputTokens)
	}
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	in6, _, _, _ := reqs(6)
	in7, _, _, _ := reqs(7)
	if fmt.Sprint(got) != fmt.Sprint([]int64{in6, in7}) {
		t.Errorf("unattributed input tokens %v, want the child's %d and the continuation's %d", got, in6, in7)
	}
}
