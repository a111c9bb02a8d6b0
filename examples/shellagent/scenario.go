package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// stepUsage is what every scripted model response reports.
var stepUsage = scriptedmodel.Usage{InputTokens: 10, OutputTokens: 2}

// script answers the runtime's model calls from the conversation, the way
// a model would: a title for a title request; a text answer after a tool
// result or a notification; otherwise what the user's prompt asks for.
// Prompts are "shell: CMD" (run CMD in the foreground), "shell&: CMD" (run
// it in the background), optionally prefixed by "hold:NAME " to hold that
// primary response until the driver releases NAME.
type script struct {
	// mu guards holds.
	mu    sync.Mutex
	holds map[string]*hold
}

type hold struct {
	reached chan struct{} // closed when the held request arrived
	release chan struct{} // closed by the driver
}

func newScript() *script { return &script{holds: make(map[string]*hold)} }

func (sc *script) hold(name string) *hold {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	h, ok := sc.holds[name]
	if !ok {
		h = &hold{reached: make(chan struct{}), release: make(chan struct{})}
		sc.holds[name] = h
	}
	return h
}

func (sc *script) respond(r scriptedmodel.Request) scriptedmodel.Step {
	msgs, _ := r.Body["messages"].([]any)
	if len(msgs) == 0 {
		return scriptedmodel.Step{Status: 400, ErrorMessage: "no messages"}
	}
	first, _ := msgs[0].(map[string]any)
	last, _ := msgs[len(msgs)-1].(map[string]any)
	text := func(m map[string]any) string { s, _ := m["content"].(string); return s }
	switch {
	case first["role"] == "system" && strings.Contains(text(first), "title"):
		return scriptedmodel.Step{Text: "Shell session", Usage: stepUsage}
	case last["role"] == "tool":
		return scriptedmodel.Step{Text: "done: " + text(last), Usage: stepUsage}
	case last["role"] != "user" || strings.HasPrefix(text(last), "[notification]"):
		return scriptedmodel.Step{Text: "noted", Usage: stepUsage}
	}
	prompt := text(last)
	if name, rest, ok := strings.Cut(prompt, " "); ok && strings.HasPrefix(name, "hold:") {
		h := sc.hold(strings.TrimPrefix(name, "hold:"))
		close(h.reached)
		<-h.release
		prompt = rest
	}
	var args shellArgs
	switch {
	case strings.HasPrefix(prompt, "shell&: "):
		args = shellArgs{Command: strings.TrimPrefix(prompt, "shell&: "), Background: true}
	case strings.HasPrefix(prompt, "shell: "):
		args = shellArgs{Command: strings.TrimPrefix(prompt, "shell: ")}
	default:
		return scriptedmodel.Step{Text: "ok", Usage: stepUsage}
	}
	raw, _ := json.Marshal(args)
	return scriptedmodel.Step{
		ToolCalls: []scriptedmodel.ToolCall{{Name: "shell", Arguments: string(raw)}},
		Usage:     stepUsage,
	}
}

// driver runs scenarios against a runtime.
type driver struct {
	rt     *Runtime
	script *script
	idle   *simClock
	dir    string // for gate fifos
	gates  []gate // created gates, to release on failure

	// mu guards notified.
	mu       sync.Mutex
	notified map[string]chan struct{} // per session: a notification was posted
}

func newDriver(rt *Runtime, sc *script, idle *simClock, dir string) *driver {
	d := &driver{rt: rt, script: sc, idle: idle, dir: dir, notified: make(map[string]chan struct{})}
	rt.onNotify = func(session string) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if ch, ok := d.notified[session]; ok {
			close(ch)
			delete(d.notified, session)
		}
	}
	return d
}

// expectNotification returns a channel closed at the next notification
// posted into session.
func (d *driver) expectNotification(session string) <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	ch := make(chan struct{})
	d.notified[session] = ch
	return ch
}

// scenario is one named scenario; it returns the invocations it started,
// in order.
type scenario struct {
	name string
	run  func(d *driver, ctx context.Context, session string) ([]string, error)
}

var scenarios = []scenario{
	{"foreground", (*driver).foreground},
	{"background", (*driver).background},
	{"interrupt-race", (*driver).interruptRace},
	{"warm-second", (*driver).warmSecond},
	{"consumed", (*driver).consumed},
	{"interrupt-queued", (*driver).interruptQueued},
	{"long-background", (*driver).longBackground},
}

func findScenario(name string) (scenario, bool) {
	for _, s := range scenarios {
		if s.name == name {
			return s, true
		}
	}
	return scenario{}, false
}

// gate is a fifo a background job blocks on (cat GATE) until the driver
// opens it.
type gate string

func (d *driver) gate(name string) (gate, error) {
	path := filepath.Join(d.dir, name)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		return "", fmt.Errorf("gate %s: %w", path, err)
	}
	d.gates = append(d.gates, gate(path))
	return gate(path), nil
}

// releaseGates lets every job still blocked on a gate finish, so that a
// failed scenario leaves no job behind. A gate nobody reads is skipped.
func (d *driver) releaseGates() {
	for _, g := range d.gates {
		f, err := os.OpenFile(string(g), os.O_WRONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			continue // no reader: its job already finished
		}
		_, _ = f.WriteString("go\n")
		_ = f.Close()
	}
	d.gates = nil
}

// open lets the job that reads the gate finish.
func (g gate) open() error {
	f, err := os.OpenFile(string(g), os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("open gate: %w", err)
	}
	_, err = f.WriteString("go\n")
	return errors.Join(err, f.Close())
}

func (d *driver) prompt(ctx context.Context, session, text string) (string, error) {
	res, err := d.rt.Prompt(ctx, session, text)
	if err != nil {
		return res.InvocationID, err
	}
	s := res.AtResult
	d.rt.log.Info("caller got result", "session", session, "invocation", res.InvocationID,
		"status", s.Status, "reasons", s.Reasons, "input_tokens", s.Usage.InputTokens,
		"output_tokens", s.Usage.OutputTokens, "answer", res.Answer)
	return res.InvocationID, nil
}

// foreground: a title, a shell call, an answer: final when the caller gets
// its result.
func (d *driver) foreground(ctx context.Context, session string) ([]string, error) {
	id, err := d.prompt(ctx, session, "shell: printf done")
	return []string{id}, err
}

// background: the job outlives the call; its notification wakes a
// continuation of the same invocation.
func (d *driver) background(ctx context.Context, session string) ([]string, error) {
	id, err := d.prompt(ctx, session, "shell&: sleep 1")
	return []string{id}, err
}

// interruptRace: the job exits while the caller interrupts the session.
// Whichever wins, the invocation closes: no notification, a continuation,
// or a followup closed as interrupted.
func (d *driver) interruptRace(ctx context.Context, session string) ([]string, error) {
	g, err := d.gate(session)
	if err != nil {
		return nil, err
	}
	id, err := d.prompt(ctx, session, "shell&: cat "+string(g))
	if err != nil {
		return []string{id}, err
	}
	opened := make(chan error, 1)
	go func() { opened <- g.open() }()
	d.rt.Interrupt(ctx, session)
	return []string{id}, <-opened
}

// warmSecond: a second invocation runs on the session while the first's
// job runs; the job's continuation belongs to the first.
func (d *driver) warmSecond(ctx context.Context, session string) ([]string, error) {
	g, err := d.gate(session)
	if err != nil {
		return nil, err
	}
	first, err := d.prompt(ctx, session, "shell&: cat "+string(g))
	if err != nil {
		return []string{first}, err
	}
	second, err := d.prompt(ctx, session, "shell: printf second")
	if err != nil {
		return []string{first, second}, err
	}
	return []string{first, second}, g.open()
}

// consumed: the first invocation's job exits while a turn of the second
// runs; that turn reads the notification (followup closed consumed_by),
// and its usage stays its own.
func (d *driver) consumed(ctx context.Context, session string) ([]string, error) {
	return d.exitDuringAnotherTurn(ctx, session, nil)
}

// interruptQueued: the first invocation's job exits while a turn of the
// second runs, and the caller interrupts before that turn reads the
// notification: the followup is closed as interrupted.
func (d *driver) interruptQueued(ctx context.Context, session string) ([]string, error) {
	return d.exitDuringAnotherTurn(ctx, session, func() { d.rt.Interrupt(ctx, session) })
}

// exitDuringAnotherTurn starts a background job in a first invocation,
// then lets it exit while a second invocation's turn is held at its model
// call; between the notification and the turn's next step it calls
// between (if not nil).
func (d *driver) exitDuringAnotherTurn(ctx context.Context, session string, between func()) ([]string, error) {
	g, err := d.gate(session)
	if err != nil {
		return nil, err
	}
	first, err := d.prompt(ctx, session, "shell&: cat "+string(g))
	if err != nil {
		return []string{first}, err
	}
	h := d.script.hold(session)
	type result struct {
		id  string
		err error
	}
	second := make(chan result, 1)
	go func() {
		id, err := d.prompt(ctx, session, "hold:"+session+" shell: printf second")
		second <- result{id, err}
	}()
	select {
	case <-h.reached: // the second turn is running, its model call held
	case <-ctx.Done():
		return []string{first}, ctx.Err()
	}
	notified := d.expectNotification(session)
	if err := g.open(); err != nil {
		close(h.release)
		return []string{first}, err
	}
	select {
	case <-notified:
		if between != nil {
			between()
		}
	case <-ctx.Done():
	}
	close(h.release)
	r := <-second
	return []string{first, r.id}, errors.Join(r.err, ctx.Err())
}

// idleWindow is how long an idle session stays loaded.
const idleWindow = 30 * time.Minute

// longBackground: a job outlives the 30-minute idle window (on the
// simulated idle clock); the session owes work throughout and is kept,
// the invocation is final when the job's continuation ends, and the idle
// session is reaped after that.
func (d *driver) longBackground(ctx context.Context, session string) ([]string, error) {
	g, err := d.gate(session)
	if err != nil {
		return nil, err
	}
	id, err := d.prompt(ctx, session, "shell&: cat "+string(g))
	if err != nil {
		return []string{id}, err
	}
	for elapsed := time.Duration(0); elapsed <= idleWindow; elapsed += time.Minute {
		d.idle.Advance(time.Minute)
		if reaped := d.rt.ReapIdle(ctx); slices.Contains(reaped, session) {
			return []string{id}, fmt.Errorf("session %s reaped while it owes work", session)
		}
		if st := d.rt.ledger.Session(session); !st.OwesWork {
			return []string{id}, fmt.Errorf("session %s owes no work after %v idle with a job running", session, elapsed)
		}
	}
	if err := g.open(); err != nil {
		return []string{id}, err
	}
	s, err := d.rt.ledger.Wait(ctx, id)
	if err != nil {
		return []string{id}, err
	}
	if s.Status != contract.StatusFinal {
		return []string{id}, fmt.Errorf("invocation %s %s: %v", id, s.Status, s.Reasons)
	}
	if err := d.rt.Wait(ctx); err != nil {
		return []string{id}, err
	}
	d.idle.Advance(idleWindow)
	if err := d.rt.collectorSettled(ctx, session); err != nil {
		return []string{id}, err
	}
	if reaped := d.rt.ReapIdle(ctx); !slices.Contains(reaped, session) {
		return []string{id}, fmt.Errorf("after final, reaped %v, not %s", reaped, session)
	}
	return []string{id}, nil
}

// simClock is a simulated clock: it moves only when advanced. It drives
// the runtime's idle reaper, so a 30-minute idle window passes at once.
type simClock struct {
	mu     sync.Mutex // guards now and timers
	now    time.Time
	timers []*simTimer
}

type simTimer struct {
	c    *simClock
	when time.Time
	f    func()
}

func newSimClock(start time.Time) *simClock { return &simClock{now: start} }

// Now returns the simulated time.
func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc calls f when the clock has been advanced by d.
func (c *simClock) AfterFunc(d time.Duration, f func()) instrument.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &simTimer{c: c, when: c.now.Add(d), f: f}
	c.timers = append(c.timers, t)
	return t
}

// Stop cancels the timer.
func (t *simTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	for i, x := range t.c.timers {
		if x == t {
			t.c.timers = append(t.c.timers[:i], t.c.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Advance moves the clock and runs the timers that became due.
func (c *simClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*simTimer
	kept := c.timers[:0]
	for _, t := range c.timers {
		if t.when.After(c.now) {
			kept = append(kept, t)
		} else {
			due = append(due, t)
		}
	}
	c.timers = kept
	c.mu.Unlock()
	for _, t := range due {
		t.f()
	}
}

// sessionID names a scenario's session uniquely within a run.
func sessionID(scenario string, run int) string {
	return fmt.Sprintf("%s-%d-%d", scenario, os.Getpid(), run)
}
