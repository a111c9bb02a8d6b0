package invocationstatusextension

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
)

// fakeTimers replaces the timers of watches' waits: a wait ends only when
// the test fires it.
type fakeTimers struct {
	// mu guards timers and waits.
	mu     sync.Mutex
	timers []chan time.Time
	waits  []time.Duration
	// waiting gets a value when a wait starts: its watch waits (it
	// registered before starting its timer).
	waiting chan struct{}
}

func newFakeTimers() *fakeTimers { return &fakeTimers{waiting: make(chan struct{}, 64)} }

func (f *fakeTimers) start(d time.Duration) (<-chan time.Time, func() bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	f.timers = append(f.timers, ch)
	f.waits = append(f.waits, d)
	f.waiting <- struct{}{}
	return ch, func() bool { return true }
}

// started returns how many waits started.
func (f *fakeTimers) started() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waits)
}

// fire ends the i-th wait started.
func (f *fakeTimers) fire(t *testing.T, i int) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Less(t, i, len(f.timers), "wait %d never started", i)
	f.timers[i] <- t0
}

// watchHarness is an extension on an httptest server whose watches' timers
// the test fires, and which reports each watch that starts waiting.
type watchHarness struct {
	e      *statusExtension
	srv    *httptest.Server
	timers *fakeTimers
}

func newWatchHarness(t *testing.T, mod func(*Config)) *watchHarness {
	t.Helper()
	h := &watchHarness{e: newTestExtension(t, mod), timers: newFakeTimers()}
	h.e.timer = h.timers.start
	h.srv = serve(t, h.e)
	// Before the server closes, which waits for the watches: a failed
	// test must not hang.
	t.Cleanup(func() { _ = h.e.Shutdown(context.Background()) })
	return h
}

type answer struct {
	code    int
	session statusapi.Session
	body    string
}

// watch starts GET path in a goroutine; the answer comes on the channel.
func (h *watchHarness) watch(t *testing.T, path string) <-chan answer {
	t.Helper()
	out := make(chan answer, 1)
	go func() {
		resp, err := h.srv.Client().Get(h.srv.URL + path)
		if err != nil {
			out <- answer{code: -1, body: err.Error()}
			return
		}
		defer resp.Body.Close()
		var a answer
		a.code = resp.StatusCode
		var raw json.RawMessage
		_ = json.NewDecoder(resp.Body).Decode(&raw)
		a.body = string(raw)
		_ = json.Unmarshal(raw, &a.session)
		out <- a
	}()
	return out
}

// waitingWatch starts a watch and returns once it waits.
func (h *watchHarness) waitingWatch(t *testing.T, path string) <-chan answer {
	t.Helper()
	ch := h.watch(t, path)
	select {
	case <-h.timers.waiting:
	case a := <-ch:
		t.Fatalf("GET %s answered at once: %d %s", path, a.code, a.body)
	case <-time.After(10 * time.Second):
		t.Fatalf("GET %s never started waiting", path)
	}
	return ch
}

func recv(t *testing.T, ch <-chan answer) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
		return answer{}
	}
}

func (h *watchHarness) version(t *testing.T, session string) uint64 {
	t.Helper()
	var s statusapi.Session
	getJSON(t, h.srv, "/v1/sessions/"+session+"?wait=0s", &s)
	return s.Version
}

func settlingView(id, session string) statusapi.Invocation {
	return openView(id, session, time.Minute, statusapi.Waiting{
		RemoteSettling: &statusapi.RemoteSettling{Spans: []string{"background shell"}, Until: t0.Add(time.Second)},
		OpenTimeoutAt:  t0.Add(4 * time.Hour),
	})
}

// TestWatchWakesOnEachChange checks that a waiting watch answers at each
// kind of change, with a new version, and that a publish changing none
// of them leaves it waiting.
func TestWatchWakesOnEachChange(t *testing.T) {
	h := newWatchHarness(t, func(c *Config) { c.MaxClosed = 2 })
	watchAfter := func(v uint64) <-chan answer {
		return h.waitingWatch(t, fmt.Sprintf("/v1/sessions/s1?wait=30s&after=%d", v))
	}

	// Appears: a watch of an unknown session at version 0 waits for it.
	ch := watchAfter(0)
	h.e.PublishInvocations([]statusapi.Invocation{settlingView("inv-1", "s1")})
	a := recv(t, ch)
	require.Equal(t, http.StatusOK, a.code, a.body)
	assert.NotZero(t, a.session.Version)
	assert.False(t, a.session.OwesWork)
	assert.Equal(t, []string{"inv-1"}, ids(a.session.OpenInvocations))
	v := a.session.Version

	// owes_work turns true: a job starts.
	ch = watchAfter(v)
	// A publish that changes nothing the watch cares about (usage grows,
	// another session) does not answer it...
	more := settlingView("inv-1", "s1")
	more.Usage.InputTokens = 500
	h.e.PublishInvocations([]statusapi.Invocation{more, openView("inv-x", "s2", time.Minute, childWaiting("x"))})
	assert.Equal(t, v, h.version(t, "s1"))
	// ...the job does.
	h.e.PublishInvocations([]statusapi.Invocation{openView("inv-1", "s1", time.Minute, childWaiting("execute_tool shell"))})
	a = recv(t, ch)
	assert.True(t, a.session.OwesWork)
	assert.Greater(t, a.session.Version, v)
	v = a.session.Version

	// A second invocation that owes work too: owes_work stays true, no
	// change.
	ch = watchAfter(v)
	h.e.PublishInvocations([]statusapi.Invocation{openView("inv-2", "s1", time.Second, jobWaiting("background shell", t0))})
	assert.Equal(t, v, h.version(t, "s1"))
	// The session wakes by itself: an unattributed turn joins it.
	wake := settlingView("inv-wake", "s1")
	wake.Reasons = []string{"unattributed_wakeup:self_started"}
	h.e.PublishInvocations([]statusapi.Invocation{wake})
	a = recv(t, ch)
	assert.Greater(t, a.session.Version, v)
	v = a.session.Version

	// An invocation turns final (the session still owes inv-2's work).
	ch = watchAfter(v)
	h.e.PublishInvocations([]statusapi.Invocation{closedView("inv-1", "s1", statusapi.StatusFinal, 1, time.Minute)})
	a = recv(t, ch)
	assert.True(t, a.session.OwesWork)
	assert.Equal(t, []string{"inv-1"}, a.session.ClosedInvocations)
	v = a.session.Version

	// owes_work turns false and one turns incomplete, in one publish: one
	// answer.
	ch = watchAfter(v)
	h.e.PublishInvocations([]statusapi.Invocation{
		closedView("inv-2", "s1", statusapi.StatusFinal, 1, time.Second),
		closedView("inv-wake", "s1", statusapi.StatusIncomplete, 1, time.Second),
	})
	a = recv(t, ch)
	assert.False(t, a.session.OwesWork)
	v = a.session.Version

	// A revision of a closed invocation.
	ch = watchAfter(v)
	h.e.PublishInvocations([]statusapi.Invocation{closedView("inv-wake", "s1", statusapi.StatusIncomplete, 2, time.Second)})
	a = recv(t, ch)
	v = a.session.Version

	// Vanishes: other closings evict its views (max_closed 2); a vanished
	// session is version 0.
	ch = watchAfter(v)
	h.e.PublishInvocations([]statusapi.Invocation{
		closedView("o1", "s3", statusapi.StatusFinal, 1, time.Second),
		closedView("o2", "s3", statusapi.StatusFinal, 1, time.Second),
	})
	a = recv(t, ch)
	require.Equal(t, http.StatusOK, a.code, a.body)
	assert.Zero(t, a.session.Version)
	assert.Empty(t, a.session.OpenInvocations)
	assert.Empty(t, a.session.ClosedInvocations)
	// It comes back with a version it never had.
	h.e.PublishInvocations([]statusapi.Invocation{settlingView("inv-3", "s1")})
	assert.Greater(t, h.version(t, "s1"), v)

	waiters, _ := h.e.store.watchCounts()
	assert.Zero(t, waiters)
}

// TestWatchAnswersAtOnce checks a watch whose version is stale, and the
// plain GET's version.
func TestWatchAnswersAtOnce(t *testing.T) {
	h := newWatchHarness(t, nil)
	h.e.PublishInvocations([]statusapi.Invocation{openView("inv-1", "s1", time.Minute, childWaiting("x"))})
	var plain statusapi.Session
	getJSON(t, h.srv, "/v1/sessions/s1", &plain)
	require.NotZero(t, plain.Version)
	for _, after := range []string{"", "&after=0", fmt.Sprintf("&after=%d", plain.Version+7)} {
		var s statusapi.Session
		getJSON(t, h.srv, "/v1/sessions/s1?wait=30s"+after, &s)
		assert.Equal(t, plain.Version, s.Version, after)
		assert.True(t, s.OwesWork)
	}
	assert.Empty(t, h.timers.waits, "no watch waited")
}

// TestWatchTimesOutEmpty checks that a wait that passes answers with the
// same version, for a known and an unknown session, and that the wait
// asked for is the one timed.
func TestWatchTimesOutEmpty(t *testing.T) {
	h := newWatchHarness(t, nil)
	h.e.PublishInvocations([]statusapi.Invocation{settlingView("inv-1", "s1")})
	v := h.version(t, "s1")

	ch := h.waitingWatch(t, fmt.Sprintf("/v1/sessions/s1?wait=25s&after=%d", v))
	h.timers.fire(t, 0)
	a := recv(t, ch)
	require.Equal(t, http.StatusOK, a.code, a.body)
	assert.Equal(t, v, a.session.Version)

	ch = h.waitingWatch(t, "/v1/sessions/nobody?wait=1m")
	h.timers.fire(t, 1)
	a = recv(t, ch)
	require.Equal(t, http.StatusOK, a.code, a.body)
	assert.Zero(t, a.session.Version)
	assert.False(t, a.session.OwesWork)
	assert.Equal(t, "nobody", a.session.Session)
	assert.NotNil(t, a.session.OpenInvocations)
	assert.Equal(t, []time.Duration{25 * time.Second, time.Minute}, h.timers.waits)

	// Only sessions with views keep state once nobody waits.
	waiters, sessions := h.e.store.watchCounts()
	assert.Zero(t, waiters)
	assert.Equal(t, 1, sessions)
	code, _ := get(t, h.srv, "/v1/sessions/nobody")
	assert.Equal(t, http.StatusNotFound, code, "the plain GET still says unknown")
}

// TestWatchBounded checks max_session_watches and that waits end with
// Shutdown and with the client going away.
func TestWatchBounded(t *testing.T) {
	h := newWatchHarness(t, func(c *Config) { c.MaxSessionWatches = 2 })
	first := h.waitingWatch(t, "/v1/sessions/a?wait=30s")
	second := h.waitingWatch(t, "/v1/sessions/b?wait=30s")
	code, body := get(t, h.srv, "/v1/sessions/c?wait=30s")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, string(body), "max_session_watches 2")
	// Not a watch: answered as always.
	code, _ = get(t, h.srv, "/v1/sessions/c")
	assert.Equal(t, http.StatusNotFound, code)

	// The client of the first goes away: its place is free.
	h.timers.fire(t, 0)
	recv(t, first)
	third := h.waitingWatch(t, "/v1/sessions/c?wait=30s")
	waiters, _ := h.e.store.watchCounts()
	assert.Equal(t, 2, waiters)

	// Shutdown answers every watch at once.
	require.NoError(t, h.e.Shutdown(t.Context()))
	for _, ch := range []<-chan answer{second, third} {
		a := recv(t, ch)
		assert.Equal(t, http.StatusOK, a.code, a.body)
	}
	waiters, sessions := h.e.store.watchCounts()
	assert.Zero(t, waiters)
	assert.Zero(t, sessions)
}

func TestWatchParams(t *testing.T) {
	h := newWatchHarness(t, func(c *Config) { c.MaxWatchWait = 45 * time.Second })
	for q, want := range map[string]string{
		"wait=soon":           `wait must be a duration from 0s to 45s (max_watch_wait) such as 30s, got \"soon\"`,
		"wait=46s":            "max_watch_wait",
		"wait=-1s":            "wait must be a duration",
		"wait=1s&after=-1":    `after must be a version this API answered (a non-negative integer), got \"-1\"`,
		"wait=1s&after=x":     "after must be a version",
		"after=3":             "after needs wait",
		"wait=1s&wait=2s":     `query parameter \"wait\" given 2 times`,
		"wait=1s&verbose=yes": "unknown query parameter",
	} {
		code, body := get(t, h.srv, "/v1/sessions/s1?"+q)
		assert.Equal(t, http.StatusBadRequest, code, q)
		assert.Contains(t, string(body), want, q)
	}
	assert.Empty(t, h.timers.waits)
}

// TestWatchWakesOnATurnStart: a wake span (an owed running_turn appears)
// answers the watch although the session owed work already (issue 33,
// observation 2); the same turn again does not; a closed invocation that
// owes again (a late job) keeps the session owing.
func TestWatchWakesOnATurnStart(t *testing.T) {
	h := newWatchHarness(t, nil)
	job := jobWaiting("background shell", t0)
	h.e.PublishInvocations([]statusapi.Invocation{openView("inv-1", "s1", time.Minute, job)})
	v := h.version(t, "s1")
	ch := h.waitingWatch(t, fmt.Sprintf("/v1/sessions/s1?wait=30s&after=%d", v))
	woken := job
	woken.Owed = []statusapi.Owed{
		{Reason: "open_followup:background shell", Waits: "a followup", SpanID: "0000000000000004", Missing: 1},
		{Reason: "running_turn:wake_agent coder", Waits: "the turn", SpanID: "000000000000000b", Missing: 1},
	}
	h.e.PublishInvocations([]statusapi.Invocation{openView("inv-1", "s1", time.Minute, woken)})
	a := recv(t, ch)
	require.Equal(t, http.StatusOK, a.code, a.body)
	assert.True(t, a.session.OwesWork)
	assert.Greater(t, a.session.Version, v)
	v = a.session.Version
	// The same running turn again is no change.
	h.e.PublishInvocations([]statusapi.Invocation{openView("inv-1", "s1", time.Minute, woken)})
	assert.Equal(t, v, h.version(t, "s1"))

	// Closed, but a late job re-opened a followup: still owing.
	late := closedView("inv-1", "s1", statusapi.StatusIncomplete, 2, time.Minute)
	late.Waiting = &statusapi.Waiting{Owed: []statusapi.Owed{{Reason: "open_followup:background shell", SpanID: "0000000000000009", Missing: 1}}}
	h.e.PublishInvocations([]statusapi.Invocation{late})
	var s statusapi.Session
	getJSON(t, h.srv, "/v1/sessions/s1", &s)
	assert.True(t, s.OwesWork, "a closed invocation that owes again")
	assert.Equal(t, []string{"inv-1"}, s.ClosedInvocations)
}
