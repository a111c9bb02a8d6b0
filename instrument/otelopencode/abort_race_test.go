package otelopencode

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
)

// The orders of events an abort racing a background subagent's completion
// gives, as recorded from opencode 1.18.33 (TestServer's "abort racing
// the completion", events logged per iteration). A prompt launched the job
// and returned; then the job either is cancelled mid-call or finishes and
// gets its notification's turn, which the abort cancels.

// bgLaunched plays a prompt (msg_01) of session ses_A that launches a
// background subagent in ses_C, whose model call msg_04 starts, and
// returns; the root has ended.
func bgLaunched(s *script, inv *instrument.Invocation, ctx context.Context) {
	s.session("ses_A", "")
	s.m.registerPrompt("ses_A", "msg_01", "", ctx)
	s.user("ses_A", "msg_01")
	s.launch("ses_A", "msg_02", "msg_01", "ses_C")
	s.user("ses_C", "msg_03")
	s.send(`{"type":"message.updated","properties":{"sessionID":"ses_C","info":{"id":"msg_04","sessionID":"ses_C","role":"assistant","parentID":"msg_03","modelID":"m","providerID":"p","agent":"general","tokens":{"input":0,"output":0,"reasoning":0,"cache":{"read":0,"write":0}},"time":{"created":%d}}}}`, s.now())
	s.call("ses_A", "msg_05", "msg_01", 20, 2, 0)
	s.idle("ses_A")
	s.m.promptDone("ses_A", "msg_01")
	s.end(inv)
}

// Abort events of OpenCode's SessionProcessor.halt for the child's call:
// session.error, the session idle, then the message completed with the
// error.
func (s *script) childError()  { s.send(abortErrorEvent, "ses_C") }
func (s *script) childIdle()   { s.idle("ses_C") }
func (s *script) childFailed() { s.abortedCall("ses_C", "msg_04", "msg_03") }

const abortErrorEvent = `{"type":"session.error","properties":{"sessionID":%q,"error":{"name":"MessageAbortedError","data":{"message":"Aborted"}}}}`

// abortedCall is an assistant message completed with MessageAbortedError
// and no usage (OpenCode may report its creation in the same event).
func (s *script) abortedCall(session, id, parent string) {
	at := s.now()
	s.send(`{"type":"message.updated","properties":{"sessionID":%q,"info":{"id":%q,"sessionID":%q,"role":"assistant","parentID":%q,"modelID":"m","providerID":"p","agent":"build","tokens":{"input":0,"output":0,"reasoning":0,"cache":{"read":0,"write":0}},"time":{"created":%d,"completed":%d},"error":{"name":"MessageAbortedError","data":{"message":"Aborted"}}}}}`,
		session, id, session, parent, at, at)
}

// TestAbortRacingCompletionOrders plays every order of the abort race
// seen from a real server, and one that OpenCode's split of durable
// (message.*) and plain (session.*) events allows: the invocation is
// pending until its last obligation arrives, then final, and the job's
// one promised followup is settled exactly once, by the path the job's
// outcome implies.
func TestAbortRacingCompletionOrders(t *testing.T) {
	tests := []struct {
		name string
		// after plays what follows the prompt's return; the invocation
		// must be final after the last step and pending before it.
		after []func(s *script)
		// closed and conts are the followup_closed spans (reason
		// interrupted) and continuations the job's followup gets.
		closed, conts int
		calls         int64
	}{{
		name: "child cancelled mid-call, halt order",
		after: []func(s *script){
			(*script).childError, (*script).childIdle, (*script).childFailed,
		},
		closed: 1, calls: 3,
	}, {
		name: "child cancelled mid-call, message before the session events",
		after: []func(s *script){
			(*script).childFailed, (*script).childError, (*script).childIdle,
		},
		closed: 1, calls: 3,
	}, {
		name: "child done, notification's turn cancelled before its model call",
		after: []func(s *script){
			func(s *script) { s.call("ses_C", "msg_04", "msg_03", 30, 3, 0) },
			(*script).childIdle,
			func(s *script) { s.notification("ses_A", "msg_06", "ses_C") },
			func(s *script) { s.abortedCall("ses_A", "msg_07", "msg_06") },
			func(s *script) { s.idle("ses_A") },
		},
		conts: 1, calls: 4,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPipeline(t)
			s := &script{t: t, m: p.mapper(), ms: 1_000_000}
			ctx, inv := p.tracker.StartInvocation(context.Background(), "build", "ses_A")
			bgLaunched(s, inv, ctx)
			for i, step := range tt.after {
				if sum, _ := p.sp.Ledger().Summary(inv.ID()); sum.Status != contract.StatusPending {
					t.Fatalf("before step %d: status %q, want pending: %+v", i, sum.Status, sum)
				}
				step(s)
			}
			sum, _ := p.sp.Ledger().Summary(inv.ID())
			if sum.Status != contract.StatusFinal {
				t.Fatalf("after the last step: %+v", sum)
			}
			bg := spanOf(p, "background subagent", inv.ID())
			if bg == nil {
				t.Fatal("no background span")
			}
			followups := attr(bg, contract.AttrFollowups).AsInt64()
			var closed int
			for _, c := range spansNamed(p, contract.SpanNameFollowupClosed) {
				if attr(c, contract.AttrInvocationID).AsString() == inv.ID() &&
					attr(c, contract.AttrFollowupReason).AsString() == contract.ReasonInterrupted {
					closed++
				}
			}
			conts := len(spansNamed(p, "continue_agent build"))
			if followups != 1 || closed != tt.closed || conts != tt.conts || int64(closed+conts) != followups {
				t.Errorf("followups %d settled by %d followup_closed and %d continuations, want %d and %d",
					followups, closed, conts, tt.closed, tt.conts)
			}
			if aborted := bg.Status().Code == codes.Error; aborted != (tt.closed == 1) {
				t.Errorf("background span status %v with %d followup_closed", bg.Status(), closed)
			}
			var anomalies []string
			if tt.closed == 1 {
				// The aborted job's followup was closed interrupted.
				anomalies = []string{contract.AnomalyFollowupInterrupted + ":background subagent"}
			}
			if sum.Usage.ModelCalls != tt.calls || sum.Usage.BackgroundJobs != 1 || fmt.Sprint(sum.Anomalies) != fmt.Sprint(anomalies) {
				t.Errorf("summary %+v, want anomalies %v", sum, anomalies)
			}
			noUnattributed(t, p)
		})
	}
}

// gateProcessor passes spans on to next, but holds the end of the first
// span named name until release is closed, telling entered when it holds
// it.
type gateProcessor struct {
	next    sdktrace.SpanProcessor
	name    string
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (g *gateProcessor) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) {
	g.next.OnStart(ctx, s)
}

func (g *gateProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	if s.Name() == g.name {
		g.once.Do(func() {
			close(g.entered)
			<-g.release
		})
	}
	g.next.OnEnd(s)
}

func (g *gateProcessor) Shutdown(ctx context.Context) error   { return g.next.Shutdown(ctx) }
func (g *gateProcessor) ForceFlush(ctx context.Context) error { return g.next.ForceFlush(ctx) }

// The span that makes an invocation final must reach the processors after
// the ledger's (the exporter) before any waiter wakes; otherwise "abort
// racing the completion" sees final with its followup_closed or
// continuation span not yet recorded. instrument.SpanProcessor hands a span
// on before the ledger counts it, and Client.Wait also returns only after
// the event it waited for was handled: while the exporter holds the
// settling span, the invocation is still pending.
func TestWaitReturnsAfterTheFinalSpanPassed(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	gate := &gateProcessor{next: rec, name: contract.SpanNameFollowupClosed,
		entered: make(chan struct{}), release: make(chan struct{})}
	sp := instrument.NewSpanProcessor(gate)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	c, err := New("http://127.0.0.1:1", &http.Client{}, WithTracerProvider(tp), WithLedger(sp.Ledger()))
	if err != nil {
		t.Fatal(err)
	}
	s := &script{t: t, m: c.m, ms: 1_000_000}
	ctx, inv := c.tracker.StartInvocation(context.Background(), "build", "ses_A")
	bgLaunched(s, inv, ctx)
	// The order in which followup_closed is the last obligation.
	s.childFailed()
	s.childError()
	recorded := func() int {
		var n int
		for _, sp := range rec.Ended() {
			if sp.Name() == contract.SpanNameFollowupClosed {
				n++
			}
		}
		return n
	}
	// The event goroutine: it stops inside the followup_closed span's
	// end, after the ledger and before the recorder.
	handled := make(chan struct{})
	go func() {
		defer close(handled)
		s.idle("ses_C")
	}()
	released := false
	release := func() {
		if !released {
			released = true
			close(gate.release)
		}
	}
	t.Cleanup(func() { release(); <-handled })
	select {
	case <-gate.entered:
	case <-handled:
		t.Fatal("no followup_closed span")
	}
	if sum, _ := sp.Ledger().Summary(inv.ID()); sum.Status == contract.StatusFinal || recorded() != 0 {
		t.Fatalf("ledger %q with %d followup_closed recorded while the exporter holds the settling span; want not final and 0", sum.Status, recorded())
	}
	got := make(chan int, 1)
	waiting := make(chan struct{})
	go func() {
		wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		close(waiting)
		sum, err := c.Wait(wctx, inv.ID())
		if err != nil || sum.Status != contract.StatusFinal {
			t.Errorf("wait: %v %+v", err, sum)
		}
		got <- recorded()
	}()
	<-waiting
	release()
	if n := <-got; n != 1 {
		t.Errorf("Wait returned with %d followup_closed spans recorded, want 1", n)
	}
}
