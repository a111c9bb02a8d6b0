package otelopencode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
)

// fakeStream serves GET /event from a list of scripted connections: each
// is the raw text written before the connection is closed, except the last
// one, which stays open until the client goes away.
type fakeStream struct {
	conns []string

	// mu guards n.
	mu sync.Mutex
	n  int
	// connected receives the number of every connection served.
	connected chan int
	// reads counts the reconcile requests (GET /session/...).
	reads chan string
}

func (f *fakeStream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/event" {
		select {
		case f.reads <- r.URL.Path:
		default:
		}
		if r.URL.Path == "/session/status" {
			fmt.Fprint(w, `{}`)
			return
		}
		fmt.Fprint(w, `[]`)
		return
	}
	f.mu.Lock()
	i := f.n
	f.n++
	f.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	if i < len(f.conns) {
		fmt.Fprint(w, f.conns[i])
	}
	w.(http.Flusher).Flush()
	f.connected <- i
	if i >= len(f.conns)-1 {
		<-r.Context().Done()
	}
}

func TestStreamRobust(t *testing.T) {
	defer goleak.VerifyNone(t)
	first := strings.Join([]string{
		`data: {"type":"server.connected","properties":{}}`, ``,
		`: a comment line`, ``,
		`data: {not json`, ``,
		`event: custom`, `data: {"type":"brand.new.event","properties":{"status":[1,2,3]}}`, ``,
		`data: {"type":"message.updated","properties":{"info":"not an object"}}`, ``,
		`data: {"type":"session.idle","properties":{"sessionID":"ses_x"}}`, ``,
		`data: {"type":"message.part.updated",`, `data: "properties":{"part":{"id":"p","sessionID":"ses_x","messageID":"m","type":"text","text":"hi"}}}`, ``,
		`data: []`, ``,
		`data: {"type":"message.updated"}`, ``,
		``,
	}, "\n")
	f := &fakeStream{
		conns:     []string{first, "data: {\"type\":\"server.connected\",\"properties\":{}}\n\n"},
		connected: make(chan int, 4),
		reads:     make(chan string, 16),
	}
	srv := httptest.NewServer(f)
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	p := newPipeline(t)
	c, err := New(srv.URL, &http.Client{Transport: tr}, WithTracerProvider(p.tp),
		WithReconnectBackoff(time.Millisecond, time.Millisecond),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for want := 0; want < 2; want++ {
		select {
		case got := <-f.connected:
			if got != want {
				t.Fatalf("connection %d, want %d", got, want)
			}
		case <-ctx.Done():
			t.Fatalf("connection %d never came: %v", want, c.Stats())
		}
	}
	// The second connection's server.connected event is written; wait
	// (bounded) until the client has read it.
	for i := 0; i < 5000 && c.Stats().Events < 9; i++ {
		time.Sleep(time.Millisecond)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	st := c.Stats()
	// Malformed: "{not json", info not an object, "[]", message.updated
	// without properties.
	if st.Malformed != 4 || st.Ignored != 3 || st.Reconnects < 1 || st.Events != 9 {
		t.Errorf("stats %+v, want 4 malformed, 3 ignored (2 server.connected, 1 unknown), 9 events, a reconnect", st)
	}
	srv.Close()
	tr.CloseIdleConnections()
}

func TestStartFailsWhileServerDown(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c, err := New(url, &http.Client{}, WithReconnectBackoff(time.Millisecond, 2*time.Millisecond),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.Start(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start = %v, want a deadline error", err)
	}
	if err := c.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c.Stats().Reconnects == 0 {
		t.Errorf("no reconnect attempts")
	}
}

func TestPromptBeforeStart(t *testing.T) {
	c, err := New("http://127.0.0.1:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Prompt(context.Background(), "ses_x", Prompt{Text: "hi"}); !errors.Is(err, ErrNotStarted) {
		t.Errorf("Prompt before Start = %v", err)
	}
	if _, err := c.Wait(context.Background(), "x"); !errors.Is(err, ErrNoLedger) {
		t.Errorf("Wait without ledger = %v", err)
	}
}

func TestNewRejectsBadURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:4096", "ftp://x", "http://[::1"} {
		if _, err := New(u, nil); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}

func TestMessageIDsAscend(t *testing.T) {
	var s idSource
	now := time.UnixMilli(1795947604000)
	var ids []string
	for i := 0; i < 50; i++ {
		ids = append(ids, s.next(now.Add(time.Duration(i/10)*time.Millisecond), ""))
	}
	if !sort.StringsAreSorted(ids) {
		t.Errorf("ids not ascending: %v", ids)
	}
	// The recorded OpenCode id msg_226d179be001... was made at
	// 1795947604...; ours for a later time must sort after it.
	if id := s.next(time.UnixMilli(1795947604900), ""); id <= "msg_226d179be001MVKRMKIt8DyqkU" || len(id) != len("msg_226d179be001MVKRMKIt8DyqkU") {
		t.Errorf("id %q does not sort after OpenCode's of the same second", id)
	}
	// A server clock ahead of ours: the id still sorts after the
	// session's latest message.
	ahead := "msg_ffff00000001MVKRMKIt8DyqkU"
	if id := s.next(now, ahead); id <= ahead || !strings.HasPrefix(id, "msg_ffff00000002") {
		t.Errorf("id %q does not sort after %q", id, ahead)
	}
}

func TestParseNotification(t *testing.T) {
	cases := []struct {
		p            part
		job, state   string
		notification bool
	}{
		{part{Type: "text", Synthetic: true, Text: "<task id=\"ses_1\" state=\"completed\">\n<summary>x</summary>"}, "ses_1", "completed", true},
		{part{Type: "text", Synthetic: true, Text: `<task id="ses_1" state="error">`}, "ses_1", "error", true},
		{part{Type: "text", Synthetic: true, Text: `<task id="ses_1" state="running">`}, "", "", false},
		{part{Type: "text", Synthetic: false, Text: `<task id="ses_1" state="completed">`}, "", "", false},
		{part{Type: "text", Synthetic: true, Text: `please look at <task id="ses_1" state="completed">`}, "", "", false},
		{part{Type: "tool", Synthetic: true, Text: `<task id="ses_1" state="completed">`}, "", "", false},
	}
	for i, c := range cases {
		job, state, ok := parseNotification(c.p)
		if job != c.job || state != c.state || ok != c.notification {
			t.Errorf("case %d: got %q %q %v", i, job, state, ok)
		}
	}
}

// FuzzEvents feeds arbitrary event data to the parser and every event it
// accepts to a mapper that already holds the state of a recorded session
// with a background job, whose prompts the fuzzer registers as a caller
// would. Nothing may panic, and no model call may vanish or float: every
// model-call span belongs to an invocation whose root started, every
// unattributed turn names a known reason, and no assistant message of a
// tracked session is left without a span.
func FuzzEvents(f *testing.F) {
	for _, name := range []string{"background_task.sse", "abort_before_completion.sse"} {
		data, err := readFixtureFile(name)
		if err != nil {
			f.Fatal(err)
		}
		for i, d := range data {
			if i%7 == 0 {
				f.Add(d)
			}
		}
	}
	f.Add([]byte(`{"type":"message.part.updated","properties":{"part":{"id":"p","sessionID":"s","messageID":"m","type":"tool","state":{"status":"completed","input":[1],"metadata":{"sessionId":"c","background":true}}}}}`))
	f.Add([]byte(`{"type":"message.updated","properties":{"info":{"id":"m","sessionID":"s","role":"assistant","parentID":"u","time":{"completed":-1}}}}`))
	f.Add([]byte(`{"type":"message.part.updated","properties":{"part":{"id":"p","sessionID":"s","messageID":"n","type":"text","synthetic":true,"text":"<task id=\"ses_x\" state=\"completed\">"}}}`))
	f.Add([]byte(`{"type":"message.updated","properties":{"info":{"id":"v","sessionID":"s","role":"assistant","parentID":"n","time":{"created":5}}}}`))
	recorded, err := readFixtureFile("second_prompt.sse")
	if err != nil {
		f.Fatal(err)
	}
	known := map[string]bool{UnattributedUnknownTask: true, UnattributedOtherPrompt: true,
		UnattributedEndedTurn: true, UnattributedUnseenMessage: true, UnattributedUntrackedJob: true}
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, ok, err := parseEvent(data)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error %v does not wrap errMalformed", err)
			}
			return
		}
		if !ok {
			return
		}
		p := newPipelineTB(t)
		m := p.mapper()
		var invs []*instrument.Invocation
		prompt := func(session, msgID string) {
			ctx, inv := p.tracker.StartInvocation(context.Background(), "build", session)
			m.registerPrompt(session, msgID, "", ctx)
			invs = append(invs, inv)
		}
		prompt("s", "u")
		m.handle(ev)
		m.handle(ev)
		// The same event in the middle of a recorded session with jobs,
		// continuations and a second prompt.
		at := len(data) % len(recorded)
		prompted := map[string]bool{}
		for i, d := range recorded {
			if i == at {
				m.handle(ev)
			}
			rec, ok, err := parseEvent(d)
			if err != nil || !ok {
				continue
			}
			if info := rec.Properties.Info; rec.Type == evMessageUpdated && info != nil && info.Role == "user" &&
				info.SessionID == recordedSession && !prompted[info.ID] && !syntheticIn(recorded, info.ID) {
				prompted[info.ID] = true
				prompt(info.SessionID, info.ID)
			}
			m.handle(rec)
		}
		for _, inv := range invs {
			inv.End()
		}
		roots := map[string]bool{}
		for _, sp := range p.rec.Started() {
			if attr(sp, contract.AttrRole).AsString() == contract.RoleRoot || attr(sp, contract.AttrRole).AsString() == contract.RoleContinuation {
				roots[attr(sp, contract.AttrInvocationID).AsString()] = true
			}
			if r := attr(sp, contract.AttrUnattributed).AsString(); r != "" && !known[r] {
				t.Errorf("unattributed turn with unknown reason %q", r)
			}
		}
		for _, sp := range p.rec.Started() {
			if attr(sp, contract.AttrOperationName).AsString() == contract.OpChat && !roots[attr(sp, contract.AttrInvocationID).AsString()] {
				t.Errorf("model call %q outside any invocation: %v", sp.Name(), sp.Attributes())
			}
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		for id, s := range m.sessions.byID {
			if !s.tracked {
				continue
			}
			for msg, a := range s.assistants {
				if a.span == nil {
					t.Errorf("assistant message %s of tracked session %s has no span", msg, id)
				}
			}
		}
	})
}

// recordedSession is the top-level session of second_prompt.sse.
const recordedSession = "ses_dd9303a24ffeAjyDqhGgxPrMUt"

// syntheticIn reports whether message id has a synthetic part in the
// recorded events (a notification, not a prompt).
func syntheticIn(recorded [][]byte, id string) bool {
	for _, d := range recorded {
		if ev, ok, err := parseEvent(d); err == nil && ok {
			if pt := ev.Properties.Part; pt != nil && pt.Synthetic && pt.MessageID == id {
				return true
			}
		}
	}
	return false
}

func readFixtureFile(name string) ([][]byte, error) {
	var out [][]byte
	f, err := openFixture(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := newSSEReader(f)
	for {
		d, err := r.next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
}

// TestStartRetriesAnUnansweredStream: a server that accepts the first
// GET /event and answers nothing (no headers), then answers the next one,
// as opencode serve did when the first request came as it started
// listening. Start returns once the second connection is up; without a
// bound on the attempt it would wait for its context.
func TestStartRetriesAnUnansweredStream(t *testing.T) {
	defer goleak.VerifyNone(t)
	var mu sync.Mutex
	attempts := 0
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/event" {
			fmt.Fprint(w, `[]`)
			return
		}
		mu.Lock()
		attempts++
		n := attempts
		mu.Unlock()
		if n == 1 {
			select { // no headers, no event: until the client gives up
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		fmt.Fprint(w, "data: {\"type\":\"server.connected\",\"properties\":{}}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	defer srv.Close()
	defer close(release)
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c, err := New(srv.URL, &http.Client{Transport: tr}, WithConnectWait(20*time.Millisecond),
		WithReconnectBackoff(time.Millisecond, time.Millisecond),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatalf("Start = %v, want the second connection up", err)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if attempts != 2 {
		t.Errorf("%d connections, want 2 (the unanswered one dropped)", attempts)
	}
	srv.CloseClientConnections()
	tr.CloseIdleConnections()
}
