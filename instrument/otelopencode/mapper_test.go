package otelopencode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
)

// pipeline is an SDK provider whose spans go through the core
// SpanProcessor (ledger) into a recorder.
type pipeline struct {
	tp      *sdktrace.TracerProvider
	rec     *tracetest.SpanRecorder
	sp      *instrument.SpanProcessor
	tracker *instrument.Tracker
}

// newPipeline returns a pipeline whose SpanProcessor (and ledger) has
// the given options, such as a manual clock.
func newPipeline(t testing.TB, opts ...instrument.SpanProcessorOption) *pipeline {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	sp := instrument.NewSpanProcessor(rec, opts...)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &pipeline{tp: tp, rec: rec, sp: sp, tracker: instrument.NewTracker(instrument.WithTracerProvider(tp))}
}

func newPipelineTB(t testing.TB) *pipeline { return newPipeline(t) }

func openFixture(name string) (*os.File, error) {
	return os.Open(filepath.Join("testdata", name))
}

func (p *pipeline) mapper() *mapper {
	return p.mapperWith(1000, 1000)
}

// mapperWith is a mapper of p with the given bounds and telemetry to a
// no-op meter.
func (p *pipeline) mapperWith(maxSessions, maxJobs int) *mapper {
	return newMapper(p.tp.Tracer(ScopeName), p.tracker, newTelemetry(noop.NewMeterProvider()), maxSessions, maxJobs)
}

// readFixture returns the data of every event of a recorded stream.
func readFixture(t *testing.T, name string) [][]byte {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := newSSEReader(f)
	var out [][]byte
	for {
		data, err := r.next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, data)
	}
}

// replayed is one prompt of a replay: the invocation the replay started
// for a user message the recorded caller sent.
type replayed struct {
	msgID string
	inv   *instrument.Invocation
	ended bool
}

// replay feeds a recorded stream through a mapper, acting as the caller
// did: it starts an invocation when a caller's user message appears in a
// top-level session, and ends its root at the session's next idle (when
// the recorded POST /message returned, or a prompt_async prompt was
// answered), with the recorded clock.
func replay(t *testing.T, p *pipeline, name string) []*replayed {
	t.Helper()
	return replayFiltered(t, p, name, nil)
}

// replayFiltered is replay with only the events keep accepts (all when
// keep is nil), as if the others had been lost.
func replayFiltered(t *testing.T, p *pipeline, name string, keep func(event) bool) []*replayed {
	t.Helper()
	events := readFixture(t, name)
	// Pre-scan: child sessions and synthetic messages are not prompts.
	child := map[string]bool{}
	synthetic := map[string]bool{}
	for _, data := range events {
		ev, known, err := parseEvent(data)
		if err != nil || !known {
			continue
		}
		if ev.Type == evSessionCreated && ev.Properties.Info != nil && ev.Properties.Info.ParentID != "" {
			child[ev.Properties.Info.ID] = true
		}
		if pt := ev.Properties.Part; pt != nil && pt.Synthetic {
			synthetic[pt.MessageID] = true
		}
	}
	m := p.mapper()
	var prompts []*replayed
	open := map[string][]*replayed{} // by session
	var clock int64
	for _, data := range events {
		ev, known, err := parseEvent(data)
		if err != nil {
			t.Fatalf("fixture event: %v", err)
		}
		if !known || keep != nil && !keep(ev) {
			continue
		}
		pr := ev.Properties
		if info := pr.Info; info != nil && ev.Type == evMessageUpdated {
			clock = max(clock, info.Time.Created, info.Time.Completed)
			if info.Role == "user" && !child[info.SessionID] && !synthetic[info.ID] {
				known := false
				for _, r := range prompts {
					known = known || r.msgID == info.ID
				}
				if !known {
					ctx, inv := p.tracker.StartInvocation(context.Background(), "build", info.SessionID)
					m.registerPrompt(info.SessionID, info.ID, "", ctx)
					r := &replayed{msgID: info.ID, inv: inv}
					prompts = append(prompts, r)
					open[info.SessionID] = append(open[info.SessionID], r)
				}
			}
		}
		if pt := pr.Part; pt != nil && pt.State != nil {
			clock = max(clock, pt.State.Time.Start, pt.State.Time.End)
		}
		m.handle(ev)
		if ev.Type == evSessionIdle {
			for _, r := range open[pr.SessionID] {
				m.promptDone(pr.SessionID, r.msgID)
				r.inv.End(trace.WithTimestamp(time.UnixMilli(clock + 1)))
				r.ended = true
			}
			delete(open, pr.SessionID)
		}
	}
	return prompts
}

type wantUsage struct {
	status                              string
	input, output, cacheRead, reasoning int64
	afterInput, afterOutput             int64
	calls, jobs, conts                  int64
}

func checkSummary(t *testing.T, p *pipeline, r *replayed, want wantUsage) {
	t.Helper()
	if !r.ended {
		t.Fatalf("prompt %s: root never ended", r.msgID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var s instrument.Summary
	if want.status == contract.StatusFinal {
		var err error
		s, err = p.sp.Ledger().Wait(ctx, r.inv.ID())
		if err != nil {
			t.Fatalf("prompt %s: %v (summary %+v)", r.msgID, err, s)
		}
	} else {
		s, _ = p.sp.Ledger().Summary(r.inv.ID())
	}
	u := s.Usage
	got := wantUsage{string(s.Status), u.InputTokens, u.OutputTokens, u.CacheReadInputTokens, u.ReasoningOutputTokens,
		u.AfterResultInputTokens, u.AfterResultOutputTokens, u.ModelCalls, u.BackgroundJobs, u.Continuations}
	if got != want {
		t.Errorf("prompt %s:\n got %+v\nwant %+v\nsummary %+v", r.msgID, got, want, s)
	}
	// A job whose followup was closed interrupted (an abort) is the one
	// anomaly these replays have (contract v0.7).
	var anomalies []string
	for _, c := range spansNamed(p, contract.SpanNameFollowupClosed) {
		if attr(c, contract.AttrInvocationID).AsString() == r.inv.ID() &&
			attr(c, contract.AttrFollowupReason).AsString() == contract.ReasonInterrupted {
			anomalies = []string{contract.AnomalyFollowupInterrupted + ":background subagent"}
		}
	}
	if fmt.Sprint(s.Anomalies) != fmt.Sprint(anomalies) {
		t.Errorf("prompt %s: anomalies %v, want %v", r.msgID, s.Anomalies, anomalies)
	}
}

func spansNamed(p *pipeline, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range p.rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// Usage of the recorded scripted requests n: prompt 1000+n (cached 10+n),
// completion 100+n (reasoning 5); see testdata/README.md.
func reqs(ns ...int64) (in, out, cache, reasoning int64) {
	for _, n := range ns {
		in += 1000 + n
		out += 100 + n
		cache += 10 + n
		reasoning += 5
	}
	return
}

func TestReplayForegroundBash(t *testing.T) {
	p := newPipeline(t)
	prompts := replay(t, p, "foreground_bash.sse")
	if len(prompts) != 1 {
		t.Fatalf("prompts = %d", len(prompts))
	}
	in, out, cache, reasoning := reqs(2, 3) // request 1 is the invisible title call
	checkSummary(t, p, prompts[0], wantUsage{contract.StatusFinal, in, out, cache, reasoning, 0, 0, 2, 0, 0})
	tools := spansNamed(p, "execute_tool bash")
	if len(tools) != 1 || attr(tools[0], contract.AttrToolCallID).AsString() != "call_2" {
		t.Fatalf("bash tool spans: %v", tools)
	}
	if tools[0].Parent().SpanID() != prompts[0].inv.Span().SpanContext().SpanID() {
		t.Errorf("tool span is not a child of the root")
	}
	chats := spansNamed(p, "chat scripted-model")
	if len(chats) != 2 {
		t.Fatalf("chat spans = %d", len(chats))
	}
	c := chats[1]
	if attr(c, contract.AttrProviderName).AsString() != "scripted" ||
		attr(c, contract.AttrUsageInputTokens).AsInt64() != 1003 ||
		attr(c, contract.AttrUsageOutputTokens).AsInt64() != 103 ||
		attr(c, contract.AttrUsageCacheReadTokens).AsInt64() != 13 ||
		attr(c, contract.AttrUsageReasoningTokens).AsInt64() != 5 {
		t.Errorf("chat span attributes: %v", c.Attributes())
	}
	noUnattributed(t, p)
}

func TestReplayBackgroundTask(t *testing.T) {
	p := newPipeline(t)
	prompts := replay(t, p, "background_task.sse")
	if len(prompts) != 1 {
		t.Fatalf("prompts = %d", len(prompts))
	}
	in, out, cache, reasoning := reqs(4, 5, 6, 7)
	// The child's model call started (its assistant message was created)
	// before the parent's result; only the continuation is after it.
	aIn, aOut, _, _ := reqs(7)
	checkSummary(t, p, prompts[0], wantUsage{contract.StatusFinal, in, out, cache, reasoning, aIn, aOut, 4, 1, 1})
	bg := spansNamed(p, "background subagent")
	conts := spansNamed(p, "continue_agent build")
	if len(bg) != 1 || len(conts) != 1 {
		t.Fatalf("background %d, continuations %d", len(bg), len(conts))
	}
	links := conts[0].Links()
	if len(links) != 1 || links[0].SpanContext.SpanID() != bg[0].SpanContext().SpanID() {
		t.Errorf("continuation links %v", links)
	}
	if conts[0].Parent().IsValid() {
		t.Errorf("continuation has a parent")
	}
	if st := p.sp.Ledger().Session(prompts[0].inv.Span().SpanContext().TraceID().String()); st.OwesWork {
		t.Errorf("unknown session owes work")
	}
	noUnattributed(t, p)
}

func TestReplaySecondPrompt(t *testing.T) {
	for _, name := range []string{"second_prompt.sse", "notification_during_turn.sse"} {
		t.Run(name, func(t *testing.T) {
			p := newPipeline(t)
			prompts := replay(t, p, name)
			if len(prompts) != 2 {
				t.Fatalf("prompts = %d", len(prompts))
			}
			in, out, cache, reasoning := reqs(1, 2, 3, 5)
			aIn, aOut, _, _ := reqs(5)
			checkSummary(t, p, prompts[0], wantUsage{contract.StatusFinal, in, out, cache, reasoning, aIn, aOut, 4, 1, 1})
			in, out, cache, reasoning = reqs(4)
			checkSummary(t, p, prompts[1], wantUsage{contract.StatusFinal, in, out, cache, reasoning, 0, 0, 1, 0, 0})
			noUnattributed(t, p)
		})
	}
}

func TestReplayAbort(t *testing.T) {
	t.Run("before completion", func(t *testing.T) {
		p := newPipeline(t)
		prompts := replay(t, p, "abort_before_completion.sse")
		if len(prompts) != 1 {
			t.Fatalf("prompts = %d", len(prompts))
		}
		in, out, cache, reasoning := reqs(1, 2) // the child's call was cancelled: no usage
		aIn, aOut := int64(0), int64(0)
		checkSummary(t, p, prompts[0], wantUsage{contract.StatusFinal, in, out, cache, reasoning, aIn, aOut, 3, 1, 0})
		closed := spansNamed(p, contract.SpanNameFollowupClosed)
		if len(closed) != 1 || attr(closed[0], contract.AttrFollowupReason).AsString() != contract.ReasonInterrupted {
			t.Fatalf("followup_closed spans %v", closed)
		}
		noUnattributed(t, p)
	})
	t.Run("during continuation", func(t *testing.T) {
		p := newPipeline(t)
		prompts := replay(t, p, "abort_during_continuation.sse")
		if len(prompts) != 1 {
			t.Fatalf("prompts = %d", len(prompts))
		}
		in, out, cache, reasoning := reqs(1, 2, 3)
		aIn, aOut := int64(0), int64(0) // the aborted continuation call reported none
		checkSummary(t, p, prompts[0], wantUsage{contract.StatusFinal, in, out, cache, reasoning, aIn, aOut, 4, 1, 1})
		if n := len(spansNamed(p, contract.SpanNameFollowupClosed)); n != 0 {
			t.Fatalf("%d followup_closed spans", n)
		}
		noUnattributed(t, p)
	})
}

func TestReplayNotificationConsumed(t *testing.T) {
	p := newPipeline(t)
	prompts := replay(t, p, "notification_consumed.sse")
	if len(prompts) != 3 {
		t.Fatalf("prompts = %d", len(prompts))
	}
	in, out, cache, reasoning := reqs(1, 2, 3)
	checkSummary(t, p, prompts[0], wantUsage{contract.StatusFinal, in, out, cache, reasoning, 0, 0, 3, 1, 0})
	in, out, cache, reasoning = reqs(4)
	checkSummary(t, p, prompts[1], wantUsage{contract.StatusFinal, in, out, cache, reasoning, 0, 0, 1, 0, 0})
	in, out, cache, reasoning = reqs(5)
	checkSummary(t, p, prompts[2], wantUsage{contract.StatusFinal, in, out, cache, reasoning, 0, 0, 1, 0, 0})
	closed := spansNamed(p, contract.SpanNameFollowupClosed)
	if len(closed) != 1 || attr(closed[0], contract.AttrFollowupReason).AsString() != contract.ReasonConsumedBy ||
		attr(closed[0], contract.AttrFollowupConsumer).AsString() != prompts[2].inv.ID() {
		t.Fatalf("followup_closed spans %v", closed)
	}
	noUnattributed(t, p)
}
