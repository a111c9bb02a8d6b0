package otelcodex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/agentledger/agentledger/instrument"
)

// ErrNotPending is returned by Continue for a command that has not ended,
// or whose exit a turn has read already, or that has its continuation.
var ErrNotPending = errors.New("otelcodex: no completion pending for that command")

// Session is a warm Codex: one `codex app-server` process and one thread,
// whose prompts (Prompt) are each an invocation. Its turns run one at a
// time: a Prompt waits while a turn runs (app-server would fold it into
// that turn, whose requests would then have two owners).
type Session struct {
	c  *Client
	m  *mapper
	p  *proc
	id string
	// slot is held by the turn that runs.
	slot chan struct{}

	// mu guards calls and nextID: the JSON-RPC requests awaiting their
	// response; writeMu serializes writes to stdin.
	mu      sync.Mutex
	calls   map[int64]chan rpcMessage
	nextID  int64
	writeMu sync.Mutex
}

// Start starts `codex app-server` and a thread (approvalPolicy never,
// sandbox danger-full-access, WithDir as cwd). The process runs until
// Close, or until ctx is done, which stops it (SIGTERM, then SIGKILL
// after WithKillDelay); its commands are stopped with it and their
// followups closed interrupted.
func (c *Client) Start(ctx context.Context) (*Session, error) {
	m := newMapper(c.tracer, c.tracker, c.cfg.agent, "", c.cfg.turnSync)
	p, err := c.launch(ctx, m, []string{"app-server"}, nil, nil, true)
	if err != nil {
		return nil, err
	}
	s := &Session{c: c, m: m, p: p, slot: make(chan struct{}, 1), calls: make(map[int64]chan rpcMessage)}
	go c.lines(p, m, s.handle)
	go func() {
		<-p.exited
		s.failCalls()
	}()
	if err := s.handshake(); err != nil {
		return nil, errors.Join(err, s.Kill())
	}
	if c.cfg.continuations == ContinueAuto {
		go s.continuer()
	}
	return s, nil
}

func (s *Session) handshake() error {
	if err := s.call("initialize", map[string]any{"clientInfo": map[string]any{"name": "agentledger", "version": Version()}}, nil); err != nil {
		return err
	}
	if err := s.notify("initialized"); err != nil {
		return err
	}
	params := map[string]any{"approvalPolicy": "never", "sandbox": "danger-full-access", "model": s.c.cfg.model}
	if s.c.cfg.dir != "" {
		params["cwd"] = s.c.cfg.dir
	}
	var res struct {
		Thread struct {
			ID string `json:"id"`
		} `json:"thread"`
	}
	if err := s.call("thread/start", params, &res); err != nil {
		return err
	}
	if res.Thread.ID == "" {
		return errors.New("otelcodex: thread/start returned no thread id")
	}
	s.id = res.Thread.ID
	s.m.mu.Lock()
	s.m.session = s.id
	s.m.mu.Unlock()
	return nil
}

// SessionID is the thread's id: the invocations' gen_ai.conversation.id.
func (s *Session) SessionID() string { return s.id }

// Prompt runs one prompt as an invocation, once no other turn runs, and
// returns when its turn has completed: the invocation's root ends then.
// Background commands it started may still run; their continuations come
// later (ContinueAuto) or through Continue. When ctx is done first, Prompt
// returns ctx's error and the turn goes on.
func (s *Session) Prompt(ctx context.Context, text string) (Result, error) {
	if err := s.acquire(ctx); err != nil {
		return Result{}, err
	}
	ictx, inv := s.m.startPrompt(ctx)
	t, err := s.startTurn(ictx, text)
	if err != nil {
		endSpan(inv.Span(), err)
		s.release()
		return Result{InvocationID: inv.ID(), SessionID: s.id}, err
	}
	return s.await(ctx, t, inv.ID())
}

// Continue starts the continuation of the background command callID
// (Completion.CallID), which has ended and whose exit no turn has read:
// a turn with text, recorded as a continuation of the invocation that
// launched the command, with a followup link to it. It returns when the
// turn has completed. For ContinueByHost; with ContinueAuto the Session
// may have started it already (ErrNotPending).
func (s *Session) Continue(ctx context.Context, callID, text string) (Result, error) {
	if err := s.acquire(ctx); err != nil {
		return Result{}, err
	}
	s.m.mu.Lock()
	jobs := s.m.nextContinuation(callID)
	if len(jobs) == 0 {
		s.m.mu.Unlock()
		s.release()
		return Result{}, ErrNotPending
	}
	r, t, err := s.continueJobs(jobs, text)
	if err != nil {
		return r, err
	}
	return s.await(ctx, t, r.InvocationID)
}

// continueJobs starts the continuation of jobs with mu held (and
// released here) and the slot held.
func (s *Session) continueJobs(jobs []*job, text string) (Result, *turn, error) {
	cctx, cont, err := s.m.startContinuation(jobs)
	s.m.mu.Unlock()
	if err != nil {
		s.release()
		return Result{}, nil, err
	}
	r := Result{InvocationID: cont.InvocationID(), SessionID: s.id, ThreadID: s.id}
	t, err := s.startTurn(cctx, text)
	if err != nil {
		endSpan(cont.Span(), err)
		s.release()
		return r, nil, err
	}
	return r, t, nil
}

// continuer starts the continuations of ContinueAuto: whenever a job has
// ended unsettled or a turn completed, it takes the slot and starts one
// for the oldest pending job's invocation (with all its pending jobs),
// until none is pending.
func (s *Session) continuer() {
	for {
		select {
		case <-s.m.kick:
		case <-s.p.exited:
			return
		}
		for s.continueOnce() {
		}
	}
}

func (s *Session) continueOnce() bool {
	s.m.mu.Lock()
	idle := len(s.m.pending) == 0
	s.m.mu.Unlock()
	if idle || s.acquire(context.Background()) != nil {
		return false
	}
	s.m.mu.Lock()
	jobs := s.m.nextContinuation("")
	if len(jobs) == 0 {
		// A turn read them while this waited for the slot.
		s.m.mu.Unlock()
		s.release()
		return false
	}
	texts := make([]string, len(jobs))
	for i, j := range jobs {
		texts[i] = s.c.cfg.continueText(j.completion())
	}
	_, t, err := s.continueJobs(jobs, strings.Join(texts, "\n"))
	if err != nil {
		return false
	}
	select {
	case <-t.done:
	case <-s.p.exited:
	}
	s.release()
	return true
}

// acquire takes the slot: no other turn runs then.
func (s *Session) acquire(ctx context.Context) error {
	select {
	case s.slot <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.p.exited:
		return errExited
	}
}

func (s *Session) release() { <-s.slot }

// startTurn sends turn/start for the turn running in ctx (a root's or a
// continuation's) and registers the turn id it returns.
func (s *Session) startTurn(ctx context.Context, text string) (*turn, error) {
	s.m.sending()
	var res struct {
		Turn turnInfo `json:"turn"`
	}
	err := s.call("turn/start", map[string]any{
		"threadId": s.id,
		"input":    []any{map[string]any{"type": "text", "text": text}},
	}, &res)
	if err == nil && res.Turn.ID == "" {
		err = errors.New("otelcodex: turn/start returned no turn id")
	}
	if err != nil {
		res.Turn.ID = ""
	}
	t := s.m.started(res.Turn.ID, ctx)
	return t, err
}

// await waits for turn t of invocation id; the slot is released when the
// turn is done, whether or not the caller still waits.
func (s *Session) await(ctx context.Context, t *turn, id string) (Result, error) {
	go func() {
		select {
		case <-t.done:
		case <-s.p.exited:
		}
		s.release()
	}()
	r := Result{InvocationID: id, SessionID: s.id, ThreadID: s.id, TurnID: t.id}
	select {
	case <-t.done:
	case <-s.p.exited:
		<-t.done
	case <-ctx.Done():
		return r, ctx.Err()
	}
	s.c.flushSpans()
	s.m.mu.Lock()
	r.Text, r.Status = t.text, t.status
	err := t.err
	s.m.mu.Unlock()
	return r, err
}

// Wait waits until invocation id is final or incomplete in the ledger, or
// ctx is done, and returns its summary.
func (s *Session) Wait(ctx context.Context, id string) (instrument.Summary, error) {
	return s.c.Wait(ctx, id)
}

// State returns what the session still owes its invocations: OwesWork is
// true while a background command runs or its continuation is owed.
func (s *Session) State() (instrument.SessionState, error) {
	return s.c.Session(s.id)
}

// Close closes app-server's stdin, which ends it and the commands it
// runs (their followups are closed interrupted, those of commands that
// ended without a continuation session_closed), and waits until it has
// exited, or stops it when ctx is done first.
func (s *Session) Close(ctx context.Context) error {
	s.writeMu.Lock()
	err := s.p.stdin.Close()
	s.writeMu.Unlock()
	select {
	case <-s.p.exited:
	case <-ctx.Done():
		err = errors.Join(err, s.Kill(), ctx.Err())
		<-s.p.exited
	}
	return err
}

// Kill stops app-server and its commands at once (SIGKILL to its process
// group) and waits until it has exited: open followups close interrupted.
func (s *Session) Kill() error {
	err := s.p.kill()
	<-s.p.exited
	return err
}

// Exited is closed once the process has exited.
func (s *Session) Exited() <-chan struct{} { return s.p.exited }

// call sends a JSON-RPC request and waits for its response; result, when
// not nil, receives the response's result.
func (s *Session) call(method string, params any, result any) error {
	s.mu.Lock()
	s.nextID++
	id := s.nextID
	ch := make(chan rpcMessage, 1)
	if s.calls == nil {
		s.mu.Unlock()
		return errExited
	}
	s.calls[id] = ch
	s.mu.Unlock()
	if err := s.write(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params}); err != nil {
		s.mu.Lock()
		delete(s.calls, id)
		s.mu.Unlock()
		return err
	}
	msg, ok := <-ch
	if !ok {
		return fmt.Errorf("otelcodex: %s: %w", method, errors.Join(errExited, s.p.exitError()))
	}
	if msg.Error != nil {
		return fmt.Errorf("otelcodex: %s: %w", method, msg.Error)
	}
	if result != nil {
		if err := json.Unmarshal(msg.Result, result); err != nil {
			return fmt.Errorf("otelcodex: %s result: %w", method, err)
		}
	}
	return nil
}

func (s *Session) notify(method string) error {
	return s.write(map[string]any{"jsonrpc": "2.0", "method": method})
}

func (s *Session) write(msg any) error {
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	_, err = s.p.stdin.Write(append(b, '\n'))
	return err
}

// failCalls ends the requests awaiting a response: the process is gone.
func (s *Session) failCalls() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, ch := range s.calls {
		close(ch)
		delete(s.calls, id)
	}
	s.calls = nil
}

// handle reads one line of app-server's output.
func (s *Session) handle(line []byte) {
	var msg rpcMessage
	if json.Unmarshal(line, &msg) != nil {
		return
	}
	switch {
	case msg.Method == "" && len(msg.ID) > 0:
		id, err := strconv.ParseInt(string(msg.ID), 10, 64)
		if err != nil {
			return
		}
		s.mu.Lock()
		ch, ok := s.calls[id]
		delete(s.calls, id)
		s.mu.Unlock()
		if ok {
			ch <- msg
		}
	case msg.Method != "" && len(msg.ID) > 0:
		// A request of the server (an approval, with approvalPolicy
		// never not expected): declined, so that nothing waits on it.
		_ = s.write(map[string]any{"jsonrpc": "2.0", "id": msg.ID,
			"error": map[string]any{"code": -32601, "message": "agentledger: not supported"}})
	case msg.Method != "":
		s.m.event(readEvent(msg.Method, msg.Params))
		if f := s.c.cfg.onCompletion; f != nil {
			for _, c := range s.m.takeCompletions() {
				f(s, c)
			}
		} else {
			s.m.takeCompletions()
		}
	}
}
