package otelopencode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/agentledger/agentledger/contract"
)

// promptServer is a fake OpenCode server for prompts a caller abandons:
// GET /event connects and stays open (the test plays the events itself),
// POST /session/:id/message and /prompt_async report the prompt's
// message id and hold the request until the client goes away, as a
// server still running the turn does; GET read-backs answer empty.
type promptServer struct {
	// prompts receives the message id of every prompt posted.
	prompts chan string
	// answer makes POST /session/:id/message answer at once, as after the
	// whole turn, with an assistant message answering the prompt.
	answer bool
	// readsFail makes GET /session/:id/message fail.
	readsFail bool
}

func newPromptServer() *promptServer { return &promptServer{prompts: make(chan string, 4)} }

func (f *promptServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/event":
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"type\":\"server.connected\",\"properties\":{}}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	case r.Method == http.MethodPost && strings.Contains(r.URL.Path, "ses_missing"):
		http.Error(w, `{"name":"NotFoundError"}`, http.StatusNotFound)
	case r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/message") || strings.HasSuffix(r.URL.Path, "/prompt_async")):
		var body struct {
			MessageID string `json:"messageID"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.prompts <- body.MessageID
		if f.answer && strings.HasSuffix(r.URL.Path, "/message") {
			fmt.Fprintf(w, `{"info":{"id":"%s1","sessionID":"ses_A","role":"assistant","parentID":%q},"parts":[{"type":"text","text":"done"}]}`,
				body.MessageID, body.MessageID)
			return
		}
		<-r.Context().Done()
	case r.URL.Path == "/session/status":
		fmt.Fprint(w, `{}`)
	case f.readsFail:
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	default:
		fmt.Fprint(w, `[]`)
	}
}

// startPromptClient starts a Client on p against a new promptServer.
func startPromptClient(t *testing.T, p *pipeline, opts ...Option) (*Client, *promptServer) {
	t.Helper()
	f := newPromptServer()
	return startClientOf(t, p, f, opts...), f
}

// startClientOf starts a Client on p against f.
func startClientOf(t *testing.T, p *pipeline, f *promptServer, opts ...Option) *Client {
	t.Helper()
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	opts = append([]Option{WithTracerProvider(p.tp), WithLedger(p.sp.Ledger()),
		WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))}, opts...)
	c, err := New(srv.URL, srv.Client(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return c
}

// abandonedCall is a prompt call a test gives up.
type abandonedCall struct {
	msgID  string
	cancel context.CancelFunc
	done   chan error
	// id is the invocation id the call returned.
	id string
}

// sendFunc sends a prompt through a Client and returns its invocation id.
type sendFunc func(c *Client, ctx context.Context, session string) (string, error)

func viaPrompt(c *Client, ctx context.Context, session string) (string, error) {
	res, err := c.Prompt(ctx, session, Prompt{Text: "work on it"})
	if res == nil {
		return "", err
	}
	return res.InvocationID, err
}

func viaPromptAsync(c *Client, ctx context.Context, session string) (string, error) {
	return c.PromptAsync(ctx, session, Prompt{Text: "work on it"})
}

// promptAndHold sends a prompt to session with send and returns once the
// server holds it.
func promptAndHold(t *testing.T, c *Client, f *promptServer, session string, send sendFunc) *abandonedCall {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	call := &abandonedCall{cancel: cancel, done: make(chan error, 1)}
	go func() {
		id, err := send(c, ctx, session)
		call.id = id
		call.done <- err
	}()
	select {
	case call.msgID = <-f.prompts:
	case <-time.After(10 * time.Second):
		t.Fatal("the prompt never reached the server")
	}
	return call
}

// abandon cancels the call and returns its invocation id, once Prompt has
// returned (with the cancellation's error).
func (call *abandonedCall) abandon(t *testing.T) string {
	t.Helper()
	call.cancel()
	err := <-call.done
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Prompt after the caller gave up: %v, want context.Canceled", err)
	}
	if call.id == "" {
		t.Fatal("no invocation id from the abandoned call")
	}
	return call.id
}

// rootStart is the start of the one root span started and not ended.
func rootStart(t *testing.T, p *pipeline) time.Time {
	t.Helper()
	for _, sp := range p.rec.Started() {
		if attr(sp, contract.AttrRole).AsString() == contract.RoleRoot && sp.EndTime().IsZero() {
			return sp.StartTime()
		}
	}
	t.Fatal("no root running")
	return time.Time{}
}

// assistantStart and assistantDone are a model call answering parent:
// created, then completed with usage.
func (s *script) assistantStart(session, id, parent string) int64 {
	created := s.now()
	s.send(`{"type":"message.updated","properties":{"sessionID":%q,"info":{"id":%q,"sessionID":%q,"role":"assistant","parentID":%q,"modelID":"m","providerID":"p","agent":"build","time":{"created":%d}}}}`,
		session, id, session, parent, created)
	return created
}

func (s *script) assistantDone(session, id, parent string, created, input, output int64, finish string) {
	s.send(`{"type":"message.updated","properties":{"sessionID":%q,"info":{"id":%q,"sessionID":%q,"role":"assistant","parentID":%q,"modelID":"m","providerID":"p","agent":"build","finish":%q,"tokens":{"input":%d,"output":%d,"reasoning":0,"cache":{"read":0,"write":0}},"time":{"created":%d,"completed":%d}}}}`,
		session, id, session, parent, finish, input, output, created, s.now())
}

// bashPart is a bash tool call of assistant message msg, completed.
func (s *script) bashPart(session, msg, id string) {
	start := s.now()
	s.send(`{"type":"message.part.updated","properties":{"sessionID":%q,"part":{"type":"tool","tool":"bash","callID":"call_%s","state":{"status":"completed","input":{"command":"make"},"time":{"start":%d,"end":%d}},"id":%q,"sessionID":%q,"messageID":%q}}}`,
		session, id, start, s.now(), id, session, msg)
}

// A caller that gives up a Prompt call (its context is cancelled) while
// OpenCode goes on with the turn: the turn the caller started is its
// invocation's to the end. The model call running at the cancellation,
// the tool call it makes next and the model call after it all count in
// the caller's invocation (the later ones after its result), which is not
// final, and whose session owes work, until the turn ends (the session's
// idle); then it is final with the whole turn's usage, and nothing of the
// turn is unattributed.
func TestAbandonedPromptKeepsItsTurn(t *testing.T) {
	t.Run("Prompt", func(t *testing.T) { testAbandonedPromptKeepsItsTurn(t, viaPrompt) })
	t.Run("PromptAsync", func(t *testing.T) { testAbandonedPromptKeepsItsTurn(t, viaPromptAsync) })
}

func testAbandonedPromptKeepsItsTurn(t *testing.T, send sendFunc) {
	p := newPipeline(t)
	c, f := startPromptClient(t, p)
	s := &script{t: t, m: c.m, ms: 1_000_000}
	s.session("ses_A", "")
	call := promptAndHold(t, c, f, "ses_A", send)
	msg := call.msgID
	s.ms = rootStart(t, p).UnixMilli() - 20 // the model call starts with the root
	s.user("ses_A", msg)
	first := s.assistantStart("ses_A", msg+"1", msg)
	id := call.abandon(t)
	s.ms = time.Now().UnixMilli() + 1 // after the root's end
	notFinal := func(when string) {
		t.Helper()
		if sum, _ := p.sp.Ledger().Summary(id); sum.Status != contract.StatusPending {
			t.Fatalf("%s: the abandoned prompt's invocation is %q while its turn runs: %+v", when, sum.Status, sum)
		}
		if st, _ := c.Session("ses_A"); !st.OwesWork {
			t.Errorf("%s: the session owes nothing while the abandoned turn runs: %+v", when, st)
		}
	}
	notFinal("at the cancellation")
	s.bashPart("ses_A", msg+"1", "prt_1")
	s.assistantDone("ses_A", msg+"1", msg, first, 10, 1, "tool-calls")
	notFinal("after the first model call")
	second := s.assistantStart("ses_A", msg+"2", msg)
	s.assistantDone("ses_A", msg+"2", msg, second, 20, 2, "stop")
	notFinal("after the second model call")
	s.idle("ses_A")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sum, err := c.Wait(ctx, id)
	if err != nil || sum.Status != contract.StatusFinal {
		t.Fatalf("after the turn ended: %v %+v", err, sum)
	}
	if u := sum.Usage; u.InputTokens != 30 || u.OutputTokens != 3 || u.ModelCalls != 2 || u.AfterResultInputTokens != 20 || len(sum.Anomalies) > 0 {
		t.Errorf("the abandoned prompt's invocation: %+v, want the whole turn (30 in, 3 out, 2 calls, 20 after the result)", sum)
	}
	if spanOf(p, "execute_tool bash", id) == nil {
		t.Errorf("the turn's tool call is not in the invocation")
	}
	root := spanOf(p, "invoke_agent build", id)
	if root == nil || root.Status().Code != codes.Error {
		t.Errorf("root of the abandoned call: %v", root)
	}
	if st, _ := c.Session("ses_A"); st.OwesWork {
		t.Errorf("session owes work after the turn ended: %+v", st)
	}
	rest := spanOf(p, "background "+KindTurn, id)
	if rest == nil || rest.Parent().SpanID() != root.SpanContext().SpanID() || attr(rest, contract.AttrFollowups).AsInt64() != 0 ||
		rest.Status().Code == codes.Error {
		t.Errorf("the rest of the turn: %v, want a background job under the root, no followup, no error", rest)
	}
	noUnattributed(t, p)
}

// The rest of an abandoned turn ends with the turn however it ends: an
// abort (the running model call then fails without usage) or the
// session's deletion; the invocation is final then, its job span in
// error.
func TestAbandonedTurnAbortedOrDeleted(t *testing.T) {
	tests := []struct {
		name string
		end  func(s *script, msg string)
		want string // the job span's error
	}{{
		name: "abort",
		end: func(s *script, msg string) {
			s.send(abortErrorEvent, "ses_A")
			s.idle("ses_A")
			s.abortedCall("ses_A", msg+"1", msg)
		},
		want: errAborted.Error(),
	}, {
		name: "deleted",
		end: func(s *script, msg string) {
			s.send(`{"type":"session.deleted","properties":{"info":{"id":"ses_A"}}}`)
		},
		want: errDeleted.Error(),
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPipeline(t)
			c, f := startPromptClient(t, p)
			s := &script{t: t, m: c.m, ms: 1_000_000}
			s.session("ses_A", "")
			call := promptAndHold(t, c, f, "ses_A", viaPrompt)
			s.user("ses_A", call.msgID)
			s.assistantStart("ses_A", call.msgID+"1", call.msgID)
			id := call.abandon(t)
			if sum, _ := p.sp.Ledger().Summary(id); sum.Status != contract.StatusPending {
				t.Fatalf("while the turn runs: %+v", sum)
			}
			tt.end(s, call.msgID)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			sum, err := c.Wait(ctx, id)
			if err != nil || sum.Status != contract.StatusFinal || sum.Usage.ModelCalls != 1 || sum.Usage.BackgroundJobs != 1 {
				t.Fatalf("after the turn ended: %v %+v", err, sum)
			}
			rest := spanOf(p, "background "+KindTurn, id)
			if rest == nil || rest.Status().Code != codes.Error || rest.Status().Description != tt.want {
				t.Errorf("the rest of the turn: %v, want an error %q", rest, tt.want)
			}
			if st, _ := c.Session("ses_A"); st.OwesWork {
				t.Errorf("session owes work: %+v", st)
			}
		})
	}
}

// An idle the session reports before a turn answered the abandoned prompt
// (the end of the loop that ran before it) does not end the rest of its
// turn: only an idle after an answer does.
func TestAbandonedTurnOutlivesAnEarlierIdle(t *testing.T) {
	p := newPipeline(t)
	c, f := startPromptClient(t, p)
	s := &script{t: t, m: c.m, ms: 1_000_000}
	s.session("ses_A", "")
	call := promptAndHold(t, c, f, "ses_A", viaPrompt)
	id := call.abandon(t)
	s.ms = time.Now().UnixMilli() + 1
	s.user("ses_A", call.msgID)
	s.idle("ses_A")
	if sum, _ := p.sp.Ledger().Summary(id); sum.Status != contract.StatusPending {
		t.Fatalf("after an idle before any answer: %+v, want pending", sum)
	}
	s.call("ses_A", call.msgID+"1", call.msgID, 20, 2, 0)
	s.idle("ses_A")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if sum, err := c.Wait(ctx, id); err != nil || sum.Status != contract.StatusFinal || sum.Usage.InputTokens != 20 ||
		sum.Usage.AfterResultInputTokens != 20 {
		t.Fatalf("after the answer and its idle: %v %+v", err, sum)
	}
	noUnattributed(t, p)
}

// When the events already showed the prompt's turn over (answered, then
// the session idle) as the caller gives up, nothing is kept open: the
// invocation is final at once with the turn's usage.
func TestAbandonedPromptWhoseTurnWasOver(t *testing.T) {
	p := newPipeline(t)
	c, f := startPromptClient(t, p)
	s := &script{t: t, m: c.m, ms: 1_000_000}
	s.session("ses_A", "")
	call := promptAndHold(t, c, f, "ses_A", viaPrompt)
	s.user("ses_A", call.msgID)
	s.call("ses_A", call.msgID+"1", call.msgID, 20, 2, 0)
	s.idle("ses_A")
	id := call.abandon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if sum, err := c.Wait(ctx, id); err != nil || sum.Status != contract.StatusFinal || sum.Usage.InputTokens != 20 || sum.Usage.BackgroundJobs != 0 {
		t.Fatalf("%v %+v", err, sum)
	}
	if rest := spanOf(p, "background "+KindTurn, id); rest != nil {
		t.Errorf("a job for a turn that was over: %v", rest)
	}
}

// refusingTransport sends POSTs of prompts to an address nobody listens
// on, and every other request to the server.
type refusingTransport struct {
	base   *http.Transport
	closed string
}

func (r *refusingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.HasPrefix(req.URL.Path, "/session/ses_") {
		out := req.Clone(req.Context())
		out.URL.Host = r.closed
		return r.base.RoundTrip(out)
	}
	return r.base.RoundTrip(req)
}

// A prompt the server cannot have received (the caller's context was done
// before it was sent, no connection could be made) or that it refused
// (4xx) has no turn running: its invocation is final at once, without a
// job, and the session owes nothing.
func TestPromptWithoutTurnKeepsNothing(t *testing.T) {
	closed := func(t *testing.T) string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		return addr
	}
	tests := []struct {
		name    string
		session string
		refuse  bool
		ctx     func() context.Context
	}{{
		name: "context done before sending", session: "ses_A",
		ctx: func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		},
	}, {
		name: "connection refused", session: "ses_A", refuse: true,
	}, {
		name: "session not found", session: "ses_missing",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPipeline(t)
			var opts []Option
			c, f := startPromptClient(t, p, opts...)
			if tt.refuse {
				tr := &http.Transport{}
				t.Cleanup(tr.CloseIdleConnections)
				c.api.hc = &http.Client{Transport: &refusingTransport{base: tr, closed: closed(t)}}
			}
			ctx := context.Background()
			if tt.ctx != nil {
				ctx = tt.ctx()
			}
			for _, send := range []sendFunc{viaPrompt, viaPromptAsync} {
				id, err := send(c, ctx, tt.session)
				if err == nil || id == "" {
					t.Fatalf("send: %q %v, want an error and an invocation", id, err)
				}
				wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				sum, werr := c.Wait(wctx, id)
				cancel()
				if werr != nil || sum.Status != contract.StatusFinal || sum.Usage.BackgroundJobs != 0 {
					t.Errorf("after %v: %v %+v, want final without a job", err, werr, sum)
				}
				if st, _ := c.Session(tt.session); st.OwesWork {
					t.Errorf("after %v: the session owes work: %+v", err, st)
				}
			}
			select {
			case msg := <-f.prompts:
				if tt.ctx != nil {
					t.Errorf("prompt %s sent with a context already done", msg)
				}
			default:
			}
		})
	}
}

// Which failures of a prompt's request leave a turn possibly running on
// the server.
func TestTurnMayRun(t *testing.T) {
	dial := &url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("refused")}}
	reset := &url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "read", Net: "tcp", Err: errors.New("reset")}}
	tests := []struct {
		name         string
		err          error
		asked, wrote bool
		want         bool
	}{
		{"answered", nil, true, true, false},
		{"not sent", fmt.Errorf("%w: %w", errNotSent, context.Canceled), false, false, false},
		{"no connection", context.Canceled, true, false, false},
		{"dial failed", dial, false, false, false},
		{"refused with 4xx", &statusError{code: 404, status: "404 Not Found"}, true, true, false},
		{"cancelled while waiting", context.Canceled, true, true, true},
		{"deadline while waiting", context.DeadlineExceeded, true, true, true},
		{"connection broken", reset, true, true, true},
		{"5xx from a proxy", &statusError{code: 504, status: "504 Gateway Timeout"}, true, true, true},
		{"transport without tracing", context.Canceled, false, false, true},
	}
	for _, tt := range tests {
		var p sendProbe
		p.asked.Store(tt.asked)
		p.wrote.Store(tt.wrote)
		if got := p.turnMayRun(tt.err); got != tt.want {
			t.Errorf("%s: turnMayRun = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A prompt OpenCode answered while neither the event stream nor a
// read-back of the session showed the turn's work (the stream lags or is
// down, the read-back failed): the root ends at the answer, and the turn
// the answer closed stays the invocation's, which is not final until the
// events show it, then final with its usage (not an unattributed turn).
func TestAnsweredPromptUnseenKeepsItsTurn(t *testing.T) {
	p := newPipeline(t)
	f := newPromptServer()
	f.answer, f.readsFail = true, true
	c := startClientOf(t, p, f, WithSyncTimeout(time.Millisecond))
	s := &script{t: t, m: c.m, ms: 1_000_000}
	s.session("ses_A", "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.Prompt(ctx, "ses_A", Prompt{Text: "work on it"})
	if err != nil || res.Text != "done" {
		t.Fatalf("Prompt: %+v %v", res, err)
	}
	msg := <-f.prompts
	if sum, _ := p.sp.Ledger().Summary(res.InvocationID); sum.Status != contract.StatusPending {
		t.Fatalf("the answered prompt whose turn nobody saw is %q: %+v", sum.Status, sum)
	}
	// The events arrive late.
	s.user("ses_A", msg)
	s.call("ses_A", msg+"1", msg, 20, 2, 0)
	s.idle("ses_A")
	sum, err := c.Wait(ctx, res.InvocationID)
	if err != nil || sum.Status != contract.StatusFinal || sum.Usage.InputTokens != 20 || sum.Usage.ModelCalls != 1 {
		t.Fatalf("after the events: %v %+v", err, sum)
	}
	noUnattributed(t, p)
}
