package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
	"github.com/agentledger/agentledger/internal/testbin"
)

// watchWait is how long a watch that must wake waits at most; a change
// ends it long before.
const watchWait = 30 * time.Second

// foregroundInvocation is a turn with one model call and nothing in the
// background, in session: complete, it is final at once.
func foregroundInvocation(n byte, session string) (root, chat handSpan) {
	root = handSpan{trace: traceID(n), id: spanID(n), name: "invoke_agent e2e", end: time.Second, attrs: map[string]any{
		contract.AttrRole: contract.RoleRoot, contract.AttrChildren: 1,
		contract.AttrOperationName: contract.OpInvokeAgent, contract.AttrAgentName: "e2e",
		contract.AttrConversationID: session,
	}}
	chat = handSpan{trace: traceID(n), id: spanID(n + 1), parent: root.id, name: "chat scripted-1",
		start: 100 * time.Millisecond, end: 900 * time.Millisecond, attrs: map[string]any{
			contract.AttrOperationName: contract.OpChat, contract.AttrRequestModel: "scripted-1", contract.AttrChildren: 0,
			contract.AttrUsageInputTokens: 10 + int(n), contract.AttrUsageOutputTokens: 5,
		}}
	return root, chat
}

// watched is one answer of the session watch.
type watched struct {
	statusapi.Session
	next string
}

// watchAsync starts statusapi.Client.Watch after the token and returns
// its answer on the channel: start it, then make the change, then read.
func watchAsync(c *statusapi.Client, session, after string, wait time.Duration) <-chan watched {
	ch := make(chan watched, 1)
	go func() {
		s, next, err := c.Watch(context.Background(), session, after, wait)
		if err != nil {
			s.Session = "error: " + err.Error()
		}
		ch <- watched{s, next}
	}()
	return ch
}

// wakeUntil reads the watch started with watchAsync, and watches on
// until done holds, at most 10 answers; every answer must carry a new
// token (the watch woke on a change, it did not time out).
func wakeUntil(t *testing.T, c *statusapi.Client, session, after string, first <-chan watched, done func(statusapi.Session) bool) watched {
	t.Helper()
	for i := 0; i < 10; i++ {
		var w watched
		select {
		case w = <-first:
		case <-time.After(watchWait + 15*time.Second):
			t.Fatalf("session %s: no answer from the watch after %s", session, after)
		}
		if w.next == "" {
			t.Fatalf("session %s: watch after %s: %s", session, after, w.Session.Session)
		}
		if w.next == after {
			t.Fatalf("session %s: the watch after %s timed out without a change: %+v", session, after, w.Session)
		}
		if done(w.Session) {
			return w
		}
		after, first = w.next, watchAsync(c, session, w.next, watchWait)
	}
	t.Fatalf("session %s: condition not met after 10 changes", session)
	return watched{}
}

func openIDs(s statusapi.Session) []string {
	var ids []string
	for _, inv := range s.OpenInvocations {
		ids = append(ids, inv.ID)
	}
	return ids
}

// TestSessionWatchWakesOnEachChange runs the distribution with local.yaml
// and watches one session through statusapi.Client.Watch while hand-made
// invocations arrive over OTLP, one change kind at a time: the watch of
// an unknown session times out empty; it wakes when the session appears
// (a final turn), when owes_work turns true (a background job starts),
// not when the job ends (its followup is still owed), when an
// unattributed turn joins, when a turn turns final while owes_work stays,
// when the unattributed turn turns incomplete, and when the job's
// continuation makes the invocation final and owes_work false.
func TestSessionWatchWakesOnEachChange(t *testing.T) {
	bin := collectorBin(t)
	addrs, err := testbin.NewCollectorAddrs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	startCollector(t, bin, "local.yaml", addrs)
	c := statusClient(t, addrs.Status)
	const session = "watched-session"
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	ctx := context.Background()

	// An unknown session: the watch times out with the empty session.
	s, tok, err := c.Watch(ctx, session, "0", 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if tok != "0" || s.OwesWork || len(s.OpenInvocations)+len(s.ClosedInvocations) != 0 {
		t.Fatalf("unknown session after a timed-out watch: token %q %+v", tok, s)
	}

	// The session appears with a final turn.
	w := watchAsync(c, session, tok, watchWait)
	fRoot, fChat := foregroundInvocation(0x70, session)
	exportOTLP(t, addrs.OTLPGRPC, batch(t0, "watch-final-1", fRoot, fChat))
	got := wakeUntil(t, c, session, tok, w, func(s statusapi.Session) bool { return slices.Contains(s.ClosedInvocations, "watch-final-1") })
	if got.OwesWork || len(got.OpenInvocations) != 0 {
		t.Errorf("after the first final turn: %+v", got.Session)
	}

	// owes_work turns true: a background job runs.
	const bgID = "watch-background"
	root, chat1, tool, job, cont, chat2 := backgroundInvocation(0x60)
	root.attrs[contract.AttrConversationID] = session
	cont.attrs[contract.AttrChildren] = 2 // its chat and its wake span
	tok = got.next
	w = watchAsync(c, session, tok, watchWait)
	exportOTLP(t, addrs.OTLPGRPC, batch(t0, bgID, root, chat1, tool))
	got = wakeUntil(t, c, session, tok, w, func(s statusapi.Session) bool { return s.OwesWork })
	if ids := openIDs(got.Session); !slices.Equal(ids, []string{bgID}) {
		t.Errorf("open while the job runs: %v", ids)
	}

	// The job ends: its followup is owed, owes_work stays true, no change.
	tok = got.next
	exportOTLP(t, addrs.OTLPGRPC, batch(t0, bgID, job))
	waitInvocation(t, c, bgID, "waiting on the job's followup", func(i statusapi.Invocation) bool {
		return i.Waiting != nil && len(i.Waiting.MissingChildren) == 0 && len(i.Waiting.ExpectedFollowups) == 1
	})
	s, next, err := c.Watch(ctx, session, tok, 0)
	if err != nil {
		t.Fatal(err)
	}
	if next != tok || !s.OwesWork {
		t.Errorf("the job's end changed the session (token %s, was %s): %+v", next, tok, s)
	}
	s, next, err = c.Watch(ctx, session, tok, 200*time.Millisecond)
	if err != nil || next != tok {
		t.Errorf("a watch with no change: token %s (was %s), err %v", next, tok, err)
	}

	// The runtime starts the notification's turn by itself: the turn's
	// wake span, exported as it starts, wakes the watch although owes_work
	// was true already, and the session owes the running turn.
	wake := handSpan{trace: cont.trace, id: spanID(0x6e), parent: cont.id, name: "wake_agent e2e",
		start: cont.start, end: cont.start, attrs: map[string]any{
			contract.AttrRole: contract.RoleWake, contract.AttrConversationID: session, contract.AttrAgentName: "e2e",
		}}
	w = watchAsync(c, session, tok, watchWait)
	exportOTLP(t, addrs.OTLPGRPC, batch(t0, bgID, wake))
	got = wakeUntil(t, c, session, tok, w, func(s statusapi.Session) bool { return runningTurn(s) })
	if !got.OwesWork {
		t.Errorf("after the wake: %+v", got.Session)
	}
	tok = got.next

	// The session wakes by itself: an unattributed turn (its model call
	// still exporting) joins; owes_work was true already.
	const foreign = "watch-unattributed"
	uRoot, uChat := foregroundInvocation(0x74, session)
	uRoot.attrs[contract.AttrUnattributed] = "other_prompt"
	w = watchAsync(c, session, tok, watchWait)
	exportOTLP(t, addrs.OTLPGRPC, batch(t0, foreign, uRoot))
	got = wakeUntil(t, c, session, tok, w, func(s statusapi.Session) bool { return slices.Contains(openIDs(s), foreign) })
	if !got.OwesWork || len(got.ClosedInvocations) != 1 {
		t.Errorf("after the unattributed turn joined: %+v", got.Session)
	}

	// A turn turns final while the job's followup is still owed.
	tok = got.next
	gRoot, gChat := foregroundInvocation(0x72, session)
	w = watchAsync(c, session, tok, watchWait)
	exportOTLP(t, addrs.OTLPGRPC, batch(t0, "watch-final-2", gRoot, gChat))
	got = wakeUntil(t, c, session, tok, w, func(s statusapi.Session) bool { return slices.Contains(s.ClosedInvocations, "watch-final-2") })
	if !got.OwesWork {
		t.Errorf("owes_work false while the followup is owed: %+v", got.Session)
	}

	// The unattributed turn completes: incomplete.
	tok = got.next
	w = watchAsync(c, session, tok, watchWait)
	exportOTLP(t, addrs.OTLPGRPC, batch(t0, foreign, uChat))
	got = wakeUntil(t, c, session, tok, w, func(s statusapi.Session) bool { return slices.Contains(s.ClosedInvocations, foreign) })
	inv, err := c.Invocation(ctx, foreign)
	if err != nil {
		t.Fatal(err)
	}
	if inv.Status != statusapi.StatusIncomplete || !slices.Contains(inv.Reasons, contract.ReasonUnattributedWakeup+":other_prompt") {
		t.Errorf("the unattributed turn: %s %v", inv.Status, inv.Reasons)
	}
	if !got.OwesWork || !slices.Equal(openIDs(got.Session), []string{bgID}) {
		t.Errorf("after the unattributed turn closed: %+v", got.Session)
	}

	// The continuation: the invocation is final, the session owes nothing.
	tok = got.next
	w = watchAsync(c, session, tok, watchWait)
	exportOTLP(t, addrs.OTLPGRPC, batch(t0, bgID, cont, chat2))
	got = wakeUntil(t, c, session, tok, w, func(s statusapi.Session) bool { return slices.Contains(s.ClosedInvocations, bgID) })
	if got.OwesWork || len(got.OpenInvocations) != 0 {
		t.Errorf("after the continuation: %+v", got.Session)
	}
	if inv, err := c.Invocation(ctx, bgID); err != nil || inv.Status != statusapi.StatusFinal || inv.Continuations != 1 {
		t.Errorf("the background invocation: %+v, %v", inv, err)
	}
}

// watchHTTP is one GET of the session watch's URL.
type watchHTTP struct {
	status     int
	retryAfter string
	version    uint64
	err        error
}

func getWatch(ctx context.Context, addr, session string, after uint64, wait string) watchHTTP {
	url := fmt.Sprintf("http://%s/v1/sessions/%s?wait=%s&after=%d", addr, session, wait, after)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return watchHTTP{err: err}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return watchHTTP{err: err}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	out := watchHTTP{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After")}
	if resp.StatusCode == http.StatusOK {
		var s struct {
			Version uint64 `json:"version"`
		}
		out.err = json.Unmarshal(body, &s)
		out.version = s.Version
	}
	return out
}

// TestSessionWatchIsBounded runs the distribution with local.yaml and
// max_session_watches 2, max_watch_wait 30s: of three watches at once one
// is answered 503 with Retry-After while the two wait; a fourth, of
// another session, too (the bound is over all sessions); the processor
// still takes spans, and the change they make answers the two; then a
// watch is served again. A wait above max_watch_wait is 400.
func TestSessionWatchIsBounded(t *testing.T) {
	bin := collectorBin(t)
	dir := t.TempDir()
	addrs, err := testbin.NewCollectorAddrs(dir)
	if err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(dir, "watch-bounds.yaml")
	if err := os.WriteFile(overlay, []byte("extensions:\n  invocation_status:\n    max_session_watches: 2\n    max_watch_wait: 30s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	p, err := testbin.StartCollectorConfigs(ctx, bin, []string{repoPath(t, "collector-config", "local.yaml"), overlay}, addrs,
		filepath.Join(dir, "collector.log"))
	if p != nil {
		t.Cleanup(func() { stopAndReport(t, p) })
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(http.DefaultClient.CloseIdleConnections)

	if r := getWatch(ctx, addrs.Status, "bounded", 0, "31s"); r.status != http.StatusBadRequest {
		t.Errorf("wait above max_watch_wait: %+v, want 400", r)
	}
	// Three watches of an unknown session: two wait, the third is refused;
	// the first answer must be the refusal (the others wait for a change).
	answers := make(chan watchHTTP, 3)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	for range 3 {
		go func() { answers <- getWatch(wctx, addrs.Status, "bounded", 0, "30s") }()
	}
	if r := <-answers; r.status != http.StatusServiceUnavailable || r.retryAfter != "1" {
		t.Fatalf("first answer of three watches with max_session_watches 2: %+v, want 503 with Retry-After: 1", r)
	}
	if r := getWatch(ctx, addrs.Status, "another-session", 0, "30s"); r.status != http.StatusServiceUnavailable {
		t.Errorf("a watch of another session while two wait: %+v, want 503", r)
	}
	// The processor is not held by the waiting watches: the spans arrive
	// and the session's change answers both.
	root, chat := foregroundInvocation(0x78, "bounded")
	exportOTLP(t, addrs.OTLPGRPC, batch(time.Now().Add(-time.Minute), "bounded-final", root, chat))
	for range 2 {
		if r := <-answers; r.err != nil || r.status != http.StatusOK || r.version == 0 {
			t.Errorf("a waiting watch after the change: %+v, want 200 with a version", r)
		}
	}
	// Their slots are free again: a watch at the current version waits
	// (and times out with that version).
	now := getWatch(ctx, addrs.Status, "bounded", 0, "0s")
	if r := getWatch(ctx, addrs.Status, "bounded", now.version, "200ms"); r.status != http.StatusOK || r.version != now.version {
		t.Errorf("a watch after the waiters left: %+v, want 200 at version %d", r, now.version)
	}
}

// runningTurn reports whether one of the session's invocations owes a
// turn a wake span announced.
func runningTurn(s statusapi.Session) bool {
	for _, inv := range s.OpenInvocations {
		if inv.Waiting != nil && slices.ContainsFunc(inv.Waiting.Owed, statusapi.Owed.RunningTurn) {
			return true
		}
	}
	return false
}
