package instrument

import (
	"context"
	"errors"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// chat records one model call of in/out tokens under ctx.
func (p *pipeline) chat(ctx context.Context, in, out int64, extra ...attribute.KeyValue) {
	_, s := p.tp.Tracer("example.com/llm").Start(ctx, "chat m", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append([]attribute.KeyValue{
			attribute.String(contract.AttrOperationName, contract.OpChat),
			attribute.Int64(contract.AttrUsageInputTokens, in),
			attribute.Int64(contract.AttrUsageOutputTokens, out),
		}, extra...)...))
	s.End()
}

// tool starts an execute_tool span; the caller ends it.
func (p *pipeline) tool(ctx context.Context) (context.Context, trace.Span) {
	return p.tp.Tracer("example.com/agent").Start(ctx, "execute_tool shell",
		trace.WithAttributes(attribute.String(contract.AttrOperationName, contract.OpExecuteTool)))
}

func (p *pipeline) summary(t *testing.T, id string) Summary {
	t.Helper()
	s, ok := p.sp.Ledger().Summary(id)
	if !ok {
		t.Fatalf("ledger does not know invocation %s", id)
	}
	return s
}

func wantStatus(t *testing.T, s Summary, status Status, reasons ...string) {
	t.Helper()
	if s.Status != status {
		t.Fatalf("status = %s (reasons %v), want %s", s.Status, s.Reasons, status)
	}
	if len(reasons) > 0 && !reflect.DeepEqual(s.Reasons, reasons) {
		t.Fatalf("reasons = %v, want %v", s.Reasons, reasons)
	}
}

func TestLedgerForeground(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	p.chat(ctx, 10, 2, attribute.Int64(contract.AttrUsageCacheReadTokens, 4),
		attribute.Int64(contract.AttrUsageCacheCreateTokens, 1),
		attribute.Int64(contract.AttrUsageReasoningTokens, 3))
	tctx, tool := p.tool(ctx)
	_, cmd := p.tp.Tracer("x").Start(tctx, "exec")
	cmd.End()
	tool.End()
	p.chat(ctx, 10, 2)
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusPending, contract.ReasonRootMissing)
	inv.End()
	s := p.summary(t, inv.ID())
	wantStatus(t, s, contract.StatusFinal)
	want := Usage{InputTokens: 20, OutputTokens: 4, CacheReadInputTokens: 4, CacheCreationInputTokens: 1,
		ReasoningOutputTokens: 3, ModelCalls: 2, Spans: 5}
	if s.Usage != want {
		t.Errorf("usage = %+v, want %+v", s.Usage, want)
	}
	if s.TimeToFinal != 0 || s.Revision != 1 || s.SessionID != "s1" || s.Agent != "coder" {
		t.Errorf("summary = %+v", s)
	}
}

func TestLedgerBackgroundContinuation(t *testing.T) {
	p := newPipeline(t)
	l := p.sp.Ledger()
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	p.chat(ctx, 10, 2)
	tctx, tool := p.tool(ctx)
	_, job := p.tracker.StartBackground(tctx, "shell")
	tool.End()
	p.chat(ctx, 10, 2)
	inv.End()

	s := p.summary(t, inv.ID())
	wantStatus(t, s, contract.StatusPending, "missing_children:execute_tool shell")
	if s.Usage.InputTokens != 20 || s.Usage.AfterResultInputTokens != 0 {
		t.Errorf("usage at result = %+v", s.Usage)
	}
	st := l.Session("s1")
	if !st.OwesWork || len(st.OpenJobs) != 1 || st.OpenJobs[0].Name != "background shell" {
		t.Errorf("session while job runs = %+v", st)
	}

	job.EndWithFollowup(nil)
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusPending, "open_followup:background shell")
	st = l.Session("s1")
	if !st.OwesWork || len(st.OpenJobs) != 0 || len(st.ExpectedFollowups) != 1 {
		t.Errorf("session after job = %+v", st)
	}

	cctx, cont, err := p.tracker.StartContinuation(context.Background(), "coder", "s1", job.Carrier())
	if err != nil {
		t.Fatal(err)
	}
	if cont.InvocationID() != inv.ID() {
		t.Fatalf("continuation invocation = %s, want %s", cont.InvocationID(), inv.ID())
	}
	if st := l.Session("s1"); st.RunningContinuations != 1 || !st.OwesWork {
		t.Errorf("session during continuation = %+v", st)
	}
	p.chat(cctx, 10, 2)
	cont.End()

	s = p.summary(t, inv.ID())
	wantStatus(t, s, contract.StatusFinal)
	if s.Usage.InputTokens != 30 || s.Usage.OutputTokens != 6 || s.Usage.AfterResultInputTokens != 10 ||
		s.Usage.AfterResultOutputTokens != 2 || s.Usage.ModelCalls != 3 || s.Usage.BackgroundJobs != 1 ||
		s.Usage.Continuations != 1 {
		t.Errorf("usage = %+v", s.Usage)
	}
	if s.TimeToFinal <= 0 {
		t.Errorf("time to final = %v, want > 0", s.TimeToFinal)
	}
	if st := l.Session("s1"); st.OwesWork {
		t.Errorf("session owes work after final: %+v", st)
	}
	cs := p.span(t, "continue_agent coder")
	if cs.Parent.IsValid() || len(cs.Links) != 1 || cs.Links[0].SpanContext.SpanID() != job.Span().SpanContext().SpanID() {
		t.Errorf("continuation parent %v links %v", cs.Parent, cs.Links)
	}
}

func TestLedgerNoNotification(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	_, job := p.tracker.StartBackground(ctx, "shell")
	inv.End()
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusPending, "missing_children:invoke_agent coder")
	job.EndWithoutFollowup(errors.New("killed"))
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusFinal)
}

func TestLedgerFollowupClosed(t *testing.T) {
	for _, reason := range []FollowupReason{FollowupInterrupted, FollowupSessionClosed, FollowupCancelled} {
		t.Run(string(reason), func(t *testing.T) {
			p := newPipeline(t)
			ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
			_, job := p.tracker.StartBackground(ctx, "shell")
			inv.End()
			job.EndWithFollowup(nil)
			if err := p.tracker.CloseFollowup(context.Background(), job.Carrier(), reason, ""); err != nil {
				t.Fatal(err)
			}
			s := p.summary(t, inv.ID())
			wantStatus(t, s, contract.StatusFinal)
			// CONTRACT.md v0.7: only an interrupted followup names its job.
			var want []string
			if reason == contract.ReasonInterrupted {
				want = []string{contract.AnomalyFollowupInterrupted + ":background shell"}
			}
			if !slices.Equal(s.Anomalies, want) {
				t.Errorf("anomalies = %q, want %q", s.Anomalies, want)
			}
			fc := p.span(t, contract.SpanNameFollowupClosed)
			if fc.Parent.IsValid() || !fc.StartTime.Equal(fc.EndTime) || strAttr(fc, contract.AttrFollowupReason) != string(reason) ||
				strAttr(fc, contract.AttrInvocationID) != inv.ID() || strAttr(fc, contract.AttrRole) != contract.RoleFollowupClosed {
				t.Errorf("followup_closed span = %+v", fc)
			}
		})
	}
}

// TestLedgerFollowupInterruptedWhileJobRuns: the agent is killed while
// its shell runs, so the followup is closed interrupted before the job's
// span ends (issue 20). The invocation is final once the job ends, and
// names it (v0.7).
func TestLedgerFollowupInterruptedWhileJobRuns(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	p.chat(ctx, 10, 2)
	_, job := p.tracker.StartBackground(ctx, "shell")
	inv.End()
	if err := p.tracker.CloseFollowup(context.Background(), job.Carrier(), contract.ReasonInterrupted, ""); err != nil {
		t.Fatal(err)
	}
	s := p.summary(t, inv.ID())
	wantStatus(t, s, contract.StatusPending, "missing_children:invoke_agent coder")
	if len(s.Anomalies) != 0 {
		t.Errorf("anomalies before the job's span ended = %q", s.Anomalies)
	}
	job.EndWithFollowup(errors.New("killed"))
	s = p.summary(t, inv.ID())
	wantStatus(t, s, contract.StatusFinal)
	if want := []string{contract.AnomalyFollowupInterrupted + ":background shell"}; !slices.Equal(s.Anomalies, want) {
		t.Errorf("anomalies = %q, want %q", s.Anomalies, want)
	}
	if s.Usage.InputTokens != 10 || s.Usage.BackgroundJobs != 1 {
		t.Errorf("usage = %+v", s.Usage)
	}
}

func TestLedgerConsumedByAnotherInvocation(t *testing.T) {
	p := newPipeline(t)
	ctxA, a := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	p.chat(ctxA, 10, 2)
	_, job := p.tracker.StartBackground(ctxA, "shell")
	a.End()

	ctxB, b := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	job.EndWithFollowup(nil)
	if err := p.tracker.ConsumeFollowup(ctxB, job.Carrier()); err != nil {
		t.Fatal(err)
	}
	p.chat(ctxB, 7, 1)
	b.End()

	sa, sb := p.summary(t, a.ID()), p.summary(t, b.ID())
	wantStatus(t, sa, contract.StatusFinal)
	wantStatus(t, sb, contract.StatusFinal)
	if sa.Usage.InputTokens != 10 || sb.Usage.InputTokens != 7 {
		t.Errorf("usage a=%+v b=%+v", sa.Usage, sb.Usage)
	}
	fc := p.span(t, contract.SpanNameFollowupClosed)
	if strAttr(fc, contract.AttrFollowupReason) != contract.ReasonConsumedBy || strAttr(fc, contract.AttrFollowupConsumer) != b.ID() ||
		strAttr(fc, contract.AttrInvocationID) != a.ID() {
		t.Errorf("followup_closed = %v", fc.Attributes)
	}
	var root tracetest.SpanStub
	for _, s := range p.exp.GetSpans() {
		if s.SpanContext.SpanID() == b.Span().SpanContext().SpanID() {
			root = s
		}
	}
	if len(root.Links) != 1 || strAttr2(root.Links[0].Attributes, contract.AttrLink) != contract.LinkConsumed {
		t.Errorf("consuming turn links = %+v", root.Links)
	}
}

func TestLedgerConsumedByOwnTurn(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	_, job := p.tracker.StartBackground(ctx, "shell")
	job.EndWithFollowup(nil)
	if err := p.tracker.ConsumeFollowup(ctx, job.Carrier()); err != nil {
		t.Fatal(err)
	}
	inv.End()
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusFinal)
	// The root, the job and the turn's wake span: no followup_closed.
	if n := len(p.exp.GetSpans()); n != 3 {
		t.Errorf("exported %d spans, want 3 (no followup_closed)", n)
	}
}

func TestLedgerRemoteSettle(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	_, job := p.tracker.StartBackground(ctx, "shell")
	if env := job.Env(); len(env) < 2 {
		t.Fatalf("env = %v", env)
	}
	job.EndWithoutFollowup(nil)
	inv.End()
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusPending, "remote_settling:background shell")

	done := make(chan Summary)
	go func() {
		s, _ := p.sp.Ledger().Wait(context.Background(), inv.ID())
		done <- s
	}()
	p.clock.Advance(DefaultRemoteSettle - time.Millisecond)
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusPending)
	p.clock.Advance(time.Millisecond)
	wantStatus(t, <-done, contract.StatusFinal)
}

func TestLedgerRemoteSettleRestartsOnSubtreeArrival(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	jctx, job := p.tracker.StartBackground(ctx, "shell")
	job.Env()
	_, helper := p.tp.Tracer("x").Start(jctx, "helper")
	job.EndWithoutFollowup(nil)
	inv.End()
	p.clock.Advance(time.Second)
	helper.End() // a child ends after its remote parent: quiet time restarts
	p.clock.Advance(time.Second + time.Millisecond)
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusPending)
	p.clock.Advance(time.Second)
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusFinal)
}

func TestLedgerOpenTimeout(t *testing.T) {
	p := newPipelineWith(t, []SpanProcessorOption{WithOpenTimeout(time.Hour)})
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	_, job := p.tracker.StartBackground(ctx, "shell")
	inv.End()
	p.clock.Advance(time.Hour)
	s := p.summary(t, inv.ID())
	wantStatus(t, s, contract.StatusIncomplete, contract.ReasonOpenTimeout, "missing_children:invoke_agent coder")

	// Rule 4: a late span that leaves an obligation open revises the
	// invocation at once, incomplete; one that meets the last obligation
	// revises it final.
	job.EndWithFollowup(nil)
	s = p.summary(t, inv.ID())
	wantStatus(t, s, contract.StatusIncomplete, contract.ReasonOpenTimeout, "open_followup:background shell")
	if s.Revision != 2 || !contains(s.Anomalies, "late_span:background shell") {
		t.Errorf("after the late job: %+v", s)
	}
	if err := p.tracker.CloseFollowup(context.Background(), job.Carrier(), contract.ReasonCancelled, ""); err != nil {
		t.Fatal(err)
	}
	s = p.summary(t, inv.ID())
	wantStatus(t, s, contract.StatusFinal)
	if s.Revision != 3 || !contains(s.Anomalies, "late_span:followup_closed") {
		t.Errorf("after the followup closed: %+v", s)
	}
}

func TestLedgerRetention(t *testing.T) {
	p := newPipeline(t)
	_, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	inv.End()
	p.clock.Advance(DefaultRetention - time.Second)
	if _, ok := p.sp.Ledger().Summary(inv.ID()); !ok {
		t.Fatal("forgotten before retention")
	}
	p.clock.Advance(time.Second)
	if _, ok := p.sp.Ledger().Summary(inv.ID()); ok {
		t.Fatal("remembered after retention")
	}
	if _, ok := p.sp.Ledger().Usage(inv.ID()); ok {
		t.Fatal("usage remembered after retention")
	}
}

func TestLedgerEviction(t *testing.T) {
	p := newPipelineWith(t, []SpanProcessorOption{WithMaxOpenInvocations(2)})
	var ids []string
	for i := 0; i < 3; i++ {
		_, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
		_, job := p.tracker.StartBackground(context.Background(), "shell")
		_ = job
		ids = append(ids, inv.ID())
	}
	wantStatus(t, p.summary(t, ids[0]), contract.StatusIncomplete, contract.ReasonEvicted)
	wantStatus(t, p.summary(t, ids[2]), contract.StatusPending)
}

func TestLedgerShutdownWakesWaiters(t *testing.T) {
	p := newPipeline(t)
	_, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	done := make(chan Summary)
	go func() {
		s, _ := p.sp.Ledger().Wait(context.Background(), inv.ID())
		done <- s
	}()
	if err := p.tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, <-done, contract.StatusIncomplete, contract.ReasonShutdown, contract.ReasonRootMissing)
	if _, err := p.sp.Ledger().Wait(context.Background(), "unknown"); !errors.Is(err, ErrLedgerShutdown) {
		t.Errorf("Wait after shutdown: %v", err)
	}
}

func TestLedgerWaitContext(t *testing.T) {
	p := newPipeline(t)
	_, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s, err := p.sp.Ledger().Wait(ctx, inv.ID())
	if !errors.Is(err, context.Canceled) || s.Status != contract.StatusPending {
		t.Errorf("Wait = %+v, %v", s, err)
	}
}

func TestLedgerForeignFollowup(t *testing.T) {
	p := newPipeline(t)
	ctxA, a := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	_, job := p.tracker.StartBackground(ctxA, "shell")
	a.End()
	job.EndWithFollowup(nil)
	_, b := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	b.End()
	forged := job.Carrier()
	forged["baggage"] = contract.BaggageInvocationID + "=" + b.ID()
	_, cont, err := p.tracker.StartContinuation(context.Background(), "coder", "s1", forged)
	if err != nil {
		t.Fatal(err)
	}
	cont.End()
	sb := p.summary(t, b.ID())
	if !contains(sb.Anomalies, "foreign_followup:continue_agent coder") {
		t.Errorf("b anomalies = %v", sb.Anomalies)
	}
	wantStatus(t, p.summary(t, a.ID()), contract.StatusPending, "open_followup:background shell")
}

func TestLedgerInvalidUsage(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	p.chat(ctx, -1, 2)
	inv.End()
	s := p.summary(t, inv.ID())
	// v0.2 rule 5: an unsummable count leaves the totals unproven.
	if s.Status != contract.StatusIncomplete || s.Usage.InputTokens != 0 || s.Usage.OutputTokens != 2 || !contains(s.Reasons, "invalid_usage:"+contract.AttrUsageInputTokens+" on chat m") {
		t.Errorf("summary = %+v", s)
	}
}

// TestLedgerUsageOverflowNotSummed: a count that would overflow its sum is
// not summed and leaves the totals unproven, as in the collector.
func TestLedgerUsageOverflowNotSummed(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	p.chat(ctx, math.MaxInt64, 1)
	p.chat(ctx, 1, 1)
	inv.End()
	s := p.summary(t, inv.ID())
	if s.Status != contract.StatusIncomplete || s.Usage.InputTokens != math.MaxInt64 || s.Usage.OutputTokens != 2 ||
		!contains(s.Reasons, "invalid_usage:"+contract.AttrUsageInputTokens+" on chat m") {
		t.Errorf("summary = %+v", s)
	}
}

func TestStartContinuationErrors(t *testing.T) {
	p := newPipeline(t)
	ctxA, _ := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	ctxB, _ := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	_, ja := p.tracker.StartBackground(ctxA, "shell")
	_, jb := p.tracker.StartBackground(ctxB, "shell")
	if _, _, err := p.tracker.StartContinuation(context.Background(), "coder", "s1", ja.Carrier(), jb.Carrier()); !errors.Is(err, ErrMixedInvocations) {
		t.Errorf("mixed carriers: %v", err)
	}
	if _, _, err := p.tracker.StartContinuation(context.Background(), "coder", "s1"); !errors.Is(err, ErrNoCarriers) {
		t.Errorf("no carriers: %v", err)
	}
	if _, _, err := p.tracker.StartContinuation(context.Background(), "coder", "s1", Carrier{"traceparent": "garbage"}); !errors.Is(err, ErrBadTraceparent) {
		t.Errorf("bad carrier: %v", err)
	}
	if err := p.tracker.CloseFollowup(context.Background(), ja.Carrier(), "bogus", ""); err == nil {
		t.Error("CloseFollowup accepted an unknown reason")
	}
	if err := p.tracker.CloseFollowup(context.Background(), ja.Carrier(), contract.ReasonConsumedBy, ""); err == nil {
		t.Error("CloseFollowup accepted consumed_by without consumer")
	}
}

func strAttr2(attrs []attribute.KeyValue, key string) string {
	for _, kv := range attrs {
		if string(kv.Key) == key {
			return kv.Value.AsString()
		}
	}
	return ""
}
