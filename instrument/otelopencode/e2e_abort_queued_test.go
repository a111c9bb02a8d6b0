package otelopencode

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// notificationAnswer reads session's messages on the server (a test
// oracle): the id of the completion notification, and whether an
// assistant message answers it (its own turn ran).
func notificationAnswer(t *testing.T, base, session string) (noteID string, answered bool) {
	t.Helper()
	resp, err := http.Get(base + "/session/" + session + "/message")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var msgs []messageWithParts
	if err := json.NewDecoder(resp.Body).Decode(&msgs); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		for _, p := range m.Parts {
			if _, _, ok := parseNotification(p); ok {
				noteID = m.Info.ID
			}
		}
	}
	for _, m := range msgs {
		if noteID != "" && m.Info.Role == "assistant" && m.Info.ParentID == noteID {
			answered = true
		}
	}
	return noteID, answered
}

// TestServerAbortQueuedNotification: a background subagent of invocation A
// finishes while the turn of a second prompt B runs, so OpenCode queues
// its notification behind that turn; then the caller aborts the session.
// OpenCode cancels B's turn; the notification, which joined it, gets no
// turn of its own (unless the abort came between posting it and joining,
// then its turn runs after the abort: the log says which happened). The
// Client cannot tell the two apart: A must not be final, it closes
// incomplete with abandoned_followup at once, and no turn is unattributed;
// the next prompt's turn reads the notification and keeps its own usage.
func TestServerAbortQueuedNotification(t *testing.T) {
	s := startServer(t)
	if answered := abortQueued(t, s, -1); answered {
		t.Log("the abort came before the notification joined the running turn")
	}
}

// TestServerAbortQueuedNotificationSweep (AGENTLEDGER_ABORT_SWEEP=1, about
// a second per step) aborts at 0 to 200 ms after the child's model call is
// released, to land the abort on both sides of the notification's
// posting, and checks every outcome as abortQueued does.
func TestServerAbortQueuedNotificationSweep(t *testing.T) {
	if os.Getenv("AGENTLEDGER_ABORT_SWEEP") == "" {
		t.Skip("set AGENTLEDGER_ABORT_SWEEP=1 to sweep the abort's timing against a real server")
	}
	s := startServer(t)
	outcomes := map[string]int{}
	for ms := 0; ms <= 200; ms += 5 {
		var answered bool
		ok := t.Run(fmt.Sprintf("%dms", ms), func(t *testing.T) {
			answered = abortQueued(t, s, time.Duration(ms)*time.Millisecond)
		})
		if !ok {
			break
		}
		outcomes[fmt.Sprintf("own turn after the abort: %v", answered)]++
	}
	t.Logf("outcomes: %v", outcomes)
}

// abortQueued plays the scenario once in a new session, aborting after
// delay from the child's release (delay < 0: once the notification is
// posted), and reports whether the notification got a turn of its own
// (OpenCode's records). The job's invocation must be final only when
// its usage is exactly OpenCode's, and otherwise incomplete with
// abandoned_followup; no turn is unattributed; the next prompt's turn
// keeps its own usage.
func abortQueued(t *testing.T, s *server, delay time.Duration) (answered bool) {
	childGate := make(chan struct{})
	hold := newGate()
	other := func(q req) (string, scriptedmodel.Step) {
		if strings.Contains(q.lastUser, "HOLD") {
			hold.pass(s.model.stop)
			return "held", scriptedmodel.Step{Text: "held"}
		}
		return "other", scriptedmodel.Step{Text: "other"}
	}
	s.model.reset(bgRoute(s.model.stop, childGate, nil, other))
	unattributedBefore := len(unattributedRoots(s.p))
	sess := s.session(t, "abort queued notification")
	a := s.prompt(t, sess, "BG start a job")

	bDone := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		_, err := s.client.Prompt(ctx, sess, Prompt{Text: "HOLD second"})
		bDone <- err
	}()
	select {
	case <-hold.arrived:
	case <-time.After(60 * time.Second):
		t.Fatalf("the second prompt's call never arrived; calls %v", s.model.labels())
	}
	close(childGate)
	deadline := time.Now().Add(60 * time.Second)
	if delay >= 0 {
		time.Sleep(delay)
	} else {
		for !hasNotification(s.url, sess) {
			if time.Now().After(deadline) {
				t.Fatalf("no notification posted; calls %v", s.model.labels())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.client.Abort(ctx, sess); err != nil {
		t.Fatal(err)
	}
	close(hold.open)
	if err := <-bDone; err != nil {
		t.Logf("the second prompt: %v", err)
	}
	sum := s.wait(t, a.InvocationID)
	for !sessionIdle(t, s.url, sess) || !sessionIdle(t, s.url, childSessions(t, s.url, sess)[0]) {
		if time.Now().After(deadline) {
			t.Fatal("the sessions stay busy after the abort")
		}
		time.Sleep(20 * time.Millisecond)
	}
	noteID, answered := notificationAnswer(t, s.url, sess)
	own := serverUsage(t, s.url, childSessions(t, s.url, sess)...)
	t.Logf("after the abort: notification %q, answered by a turn of its own %v; job's invocation %s %v",
		noteID, answered, sum.Status, sum.Reasons)

	// The next prompt's turn reads the notification, if any.
	c := s.prompt(t, sess, "hello after the abort")
	if sumC := s.wait(t, c.InvocationID); sumC.Status != contract.StatusFinal || sumC.Usage.ModelCalls != 1 {
		t.Errorf("next prompt: %+v", sumC)
	}
	if _, again := notificationAnswer(t, s.url, sess); again != answered {
		t.Errorf("the notification got its own turn only after the next prompt")
	}
	sum, _ = s.p.sp.Ledger().Summary(a.InvocationID)
	want := s.model.sum("launch", "after-launch")
	want.InputTokens += own.InputTokens
	want.OutputTokens += own.OutputTokens
	want.CacheReadInputTokens += own.CacheReadInputTokens
	want.ReasoningOutputTokens += own.ReasoningOutputTokens
	want.ModelCalls += own.ModelCalls
	if answered {
		cont := s.model.sum("continuation")
		want.InputTokens += cont.InputTokens
		want.OutputTokens += cont.OutputTokens
		want.CacheReadInputTokens += cont.CacheReadInputTokens
		want.ReasoningOutputTokens += cont.ReasoningOutputTokens
		want.ModelCalls += cont.ModelCalls
	}
	switch {
	case sum.Status == contract.StatusFinal:
		checkUsage(t, "final job's invocation (exact)", sum, want)
	case sum.Status != contract.StatusIncomplete || !abandonedReason(sum):
		t.Errorf("job's invocation: %+v", sum)
	default:
		checkUsage(t, "incomplete job's invocation", sum, want)
	}
	if conts := spanOf(s.p, "continue_agent build", a.InvocationID) != nil; answered != conts {
		t.Errorf("notification answered by its own turn %v, continuation of the job's invocation %v", answered, conts)
	}
	if n := len(unattributedRoots(s.p)) - unattributedBefore; n != 0 {
		t.Errorf("%d turns unattributed: %v", n, unattributedRoots(s.p))
	}
	return answered
}
