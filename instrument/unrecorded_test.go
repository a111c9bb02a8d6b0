package instrument

import (
	"context"
	"slices"
	"testing"
	"unsafe"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// Tests of contract v0.6 rules 3 (unrecorded spans are declared) and 4
// (spans that start a new trace are counted) on the in-process half.

// dropNamed is a sampler that decides per span, not by its parent
// (ParentBased): it drops the spans named one of its names and samples
// the others. It is the misconfiguration rule 3 is about.
type dropNamed []string

func (d dropNamed) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	res := sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample,
		Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
	if slices.Contains(d, p.Name) {
		res.Decision = sdktrace.Drop
	}
	return res
}

func (d dropNamed) Description() string { return "dropNamed" }

// chatNamed starts and ends a model call named name with 10 input and 1
// output tokens; it returns the span (not recording when dropped).
func (p *pipeline) chatNamed(ctx context.Context, name string) trace.Span {
	_, s := p.tp.Tracer("example.com/llm").Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String(contract.AttrOperationName, contract.OpChat),
			attribute.Int64(contract.AttrUsageInputTokens, 10),
			attribute.Int64(contract.AttrUsageOutputTokens, 1)))
	s.End()
	return s
}

// TestUnrecordedModelCallWithSampler (rule 3, the finding): with a
// per-span sampler wrapped in Sampler, the second of two model calls is
// dropped. The ledger must not say final with 10/1 tokens: the root
// declares invocation.unrecorded = 1 and the invocation closes incomplete
// with not_sampled for the root and for the call.
func TestUnrecordedModelCallWithSampler(t *testing.T) {
	p := newPipeline(t, sdktrace.WithSampler(Sampler(dropNamed{"chat second"})))
	ctx, inv := p.tracker.StartInvocation(context.Background(), "a", "s1")
	p.chatNamed(ctx, "chat first")
	p.chatNamed(ctx, "chat second")
	inv.End()
	s, err := p.sp.Ledger().Wait(cancelled(), inv.ID())
	if err != nil {
		t.Fatalf("Wait: %v (summary %+v)", err, s)
	}
	wantStatus(t, s, contract.StatusIncomplete, "not_sampled:chat second", "not_sampled:invoke_agent a")
	if s.Usage.InputTokens != 10 || s.Usage.OutputTokens != 1 {
		t.Errorf("usage %+v, want the recorded call's 10/1", s.Usage)
	}
	root := p.span(t, "invoke_agent a")
	if n := intAttr(t, root, contract.AttrUnrecorded); n != 1 {
		t.Errorf("root invocation.unrecorded = %d, want 1", n)
	}
	if n := intAttr(t, root, contract.AttrChildren); n != 1 {
		t.Errorf("root invocation.children = %d, want 1 (the recorded call)", n)
	}
	for _, sp := range p.exp.GetSpans() {
		if sp.Name == "chat second" {
			t.Errorf("the dropped call was exported")
		}
	}
}

// TestUnrecordedDeepSpanWithSampler: a dropped span that is not a model
// call is declared by its recording parent, not by the root; a span under
// a dropped one is not declared again.
func TestUnrecordedDeepSpanWithSampler(t *testing.T) {
	p := newPipeline(t, sdktrace.WithSampler(Sampler(dropNamed{"step", "inner"})))
	ctx, inv := p.tracker.StartInvocation(context.Background(), "a", "s1")
	tctx, tool := p.tool(ctx)
	sctx, step := p.tp.Tracer("x").Start(tctx, "step")
	_, inner := p.tp.Tracer("x").Start(sctx, "inner")
	inner.End()
	step.End()
	tool.End()
	inv.End()
	s := p.summary(t, inv.ID())
	wantStatus(t, s, contract.StatusIncomplete, "not_sampled:execute_tool shell")
	if _, ok := attrOf(p.span(t, "invoke_agent a"), contract.AttrUnrecorded); ok {
		t.Errorf("the root declares unrecorded spans it did not start")
	}
	if n := intAttr(t, p.span(t, "execute_tool shell"), contract.AttrUnrecorded); n != 1 {
		t.Errorf("tool invocation.unrecorded = %d, want 1", n)
	}
}

// TestSamplerKeepsOtherDecisions: outside an invocation, and for spans
// the inner sampler samples, Sampler changes nothing.
func TestSamplerKeepsOtherDecisions(t *testing.T) {
	p := newPipeline(t, sdktrace.WithSampler(Sampler(dropNamed{"dropped"})))
	ctx, plain := p.tp.Tracer("x").Start(context.Background(), "plain")
	_, d := p.tp.Tracer("x").Start(ctx, "dropped")
	if d.IsRecording() {
		t.Errorf("a span dropped outside any invocation is recorded")
	}
	d.End()
	plain.End()
	if _, ok := attrOf(p.span(t, "plain"), contract.AttrUnrecorded); ok {
		t.Errorf("a span outside any invocation declares unrecorded spans")
	}
	if got := Sampler(dropNamed{}).Description(); got != "agentledger.Sampler{dropNamed}" {
		t.Errorf("Description() = %q", got)
	}
}

// TestNoteUnrecordedWithoutSampler (rule 3): without Sampler the SDK
// never shows a dropped span to the SpanProcessor; a client wrapper that
// sees its model-call span is not recording reports it with
// NoteUnrecorded, and the invocation is incomplete, never final.
func TestNoteUnrecordedWithoutSampler(t *testing.T) {
	p := newPipeline(t, sdktrace.WithSampler(dropNamed{"chat second"}))
	ctx, inv := p.tracker.StartInvocation(context.Background(), "a", "s1")
	p.chatNamed(ctx, "chat first")
	if s := p.chatNamed(ctx, "chat second"); s.IsRecording() {
		t.Fatal("the dropped call is recording")
	} else {
		NoteUnrecorded(ctx, s, "chat second")
	}
	inv.End()
	s, err := p.sp.Ledger().Wait(cancelled(), inv.ID())
	if err != nil {
		t.Fatalf("Wait: %v (summary %+v)", err, s)
	}
	wantStatus(t, s, contract.StatusIncomplete, "not_sampled:chat second", "not_sampled:invoke_agent a")
	if n := intAttr(t, p.span(t, "invoke_agent a"), contract.AttrUnrecorded); n != 1 {
		t.Errorf("root invocation.unrecorded = %d, want 1", n)
	}
}

// TestNoteUnrecordedIgnoresRecordedSpans: a recording span, or a context
// without an invocation, is not reported.
func TestNoteUnrecordedIgnoresRecordedSpans(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "a", "s1")
	_, s := p.tp.Tracer("x").Start(ctx, "chat m")
	NoteUnrecorded(ctx, s, "chat m")
	s.End()
	NoteUnrecorded(context.Background(), trace.SpanFromContext(context.Background()), "chat x")
	inv.End()
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusFinal)
}

// TestDetachedSpanIsCounted (rule 4): a span started with WithNewRoot
// from the root's context is counted in the root's invocation.detached and
// links to it with detached_from; the ledger waits for it.
func TestDetachedSpanIsCounted(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "a", "s1")
	dctx, side := p.tp.Tracer("x").Start(ctx, "side work", trace.WithNewRoot())
	inv.End()
	p.chat(dctx, 5, 1)
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusPending)
	side.End()
	s := p.summary(t, inv.ID())
	wantStatus(t, s, contract.StatusFinal)
	if s.Usage.InputTokens != 5 {
		t.Errorf("usage %+v", s.Usage)
	}
	root := p.span(t, "invoke_agent a")
	if n := intAttr(t, root, contract.AttrDetached); n != 1 {
		t.Errorf("root invocation.detached = %d, want 1", n)
	}
	got := p.span(t, "side work")
	if len(got.Links) != 1 || got.Links[0].SpanContext.SpanID() != root.SpanContext.SpanID() ||
		got.Links[0].SpanContext.TraceID() != root.SpanContext.TraceID() ||
		attrString(got.Links[0].Attributes, contract.AttrLink) != contract.LinkDetachedFrom {
		t.Errorf("side work links %+v, want one detached_from link to the root", got.Links)
	}
	if _, ok := attrOf(got, contract.AttrLateChild); ok {
		t.Errorf("a detached span of an open context span is marked late")
	}
}

// TestDetachedFromEndedSpanIsLate (rule 4): a span started with
// WithNewRoot from the context of a span that ended is marked late_child
// and declares nothing; the ledger still waits for it, having seen it
// start.
func TestDetachedFromEndedSpanIsLate(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "a", "s1")
	tctx, tool := p.tool(ctx)
	tool.End()
	_, side := p.tp.Tracer("x").Start(tctx, "side work", trace.WithNewRoot())
	inv.End()
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusPending, "open_span:side work")
	side.End()
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusFinal)
	got := p.span(t, "side work")
	if v, ok := attrOf(got, contract.AttrLateChild); !ok || !v.AsBool() {
		t.Errorf("side work is not marked late_child")
	}
	if len(got.Links) != 0 {
		t.Errorf("a late detached span links %+v", got.Links)
	}
	if _, ok := attrOf(p.span(t, "execute_tool shell"), contract.AttrDetached); ok {
		t.Errorf("an ended span declares a detached span")
	}
}

// TestDetachedLifecycleSpansAreNotCounted: the Tracker's own new-trace
// spans (continuations, followup_closed) are declared otherwise and are
// not counted as detached.
func TestDetachedLifecycleSpansAreNotCounted(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "a", "s1")
	_, job := p.tracker.StartBackground(ctx, "shell")
	job.EndWithFollowup(nil)
	if err := p.tracker.CloseFollowup(ctx, job.Carrier(), contract.ReasonInterrupted, ""); err != nil {
		t.Fatal(err)
	}
	inv.End()
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusFinal)
	if _, ok := attrOf(p.span(t, "invoke_agent a"), contract.AttrDetached); ok {
		t.Errorf("the root counts a followup_closed span as detached")
	}
}

// detachedRoot is a root that declares m detached spans.
func detachedRoot(self trace.SpanContext, children, m int) tracetest.SpanStub {
	s := rootStub(self, children)
	s.Attributes = append(s.Attributes, attribute.Int(contract.AttrDetached, m))
	return s
}

// TestRuleDetachedNeedsLinkingSpans (rule 4, ledger): a span with
// invocation.detached = 1 is final only once a span of the invocation
// linking to it with detached_from arrived, in any order; a link naming
// its span ID in another trace, a late linking span, or a second link on
// the same span discharge nothing.
func TestRuleDetachedNeedsLinkingSpans(t *testing.T) {
	root, side, wrong, late := spanCtx(1, 1), spanCtx(2, 2), spanCtx(3, 3), spanCtx(4, 4)
	linking := func(self trace.SpanContext, target trace.SpanContext, attrs ...attribute.KeyValue) tracetest.SpanStub {
		s := stub("side work", self, trace.SpanContext{}, 120, append([]attribute.KeyValue{attribute.Int(contract.AttrChildren, 0)}, attrs...)...)
		s.Links = []sdktrace.Link{linkTo(target, contract.LinkDetachedFrom)}
		return s
	}
	otherTrace := spanCtx(9, 1) // the root's span ID in another trace
	blockers := []tracetest.SpanStub{
		linking(wrong, otherTrace),
		linking(late, root, attribute.Bool(contract.AttrLateChild, true)),
	}
	spans := append([]tracetest.SpanStub{detachedRoot(root, 0, 1)}, blockers...)
	permutations(len(spans), func(order []int) {
		sl := newStubLedger(t)
		for _, i := range order {
			sl.feed(spans[i])
		}
		s := sl.summary("inv")
		if s.Status == contract.StatusFinal {
			t.Fatalf("order %v: final without a span linking to the root (reasons %v)", order, s.Reasons)
		}
		if !slices.Contains(s.Reasons, "missing_detached:invoke_agent a") {
			t.Errorf("order %v: reasons %v", order, s.Reasons)
		}
	})
	for _, first := range []bool{true, false} {
		sl := newStubLedger(t)
		good := linking(side, root)
		if first {
			sl.feed(good, detachedRoot(root, 0, 1))
		} else {
			sl.feed(detachedRoot(root, 0, 1), good)
		}
		wantStatus(t, sl.summary("inv"), contract.StatusFinal)
	}
	// Two links on one span discharge one detached span, not two.
	sl := newStubLedger(t)
	twice := linking(side, root)
	twice.Links = append(twice.Links, linkTo(root, contract.LinkDetachedFrom))
	sl.feed(detachedRoot(root, 0, 2), twice)
	wantStatus(t, sl.summary("inv"), contract.StatusPending)
}

// TestRuleDetachedLinkOtherTraceUndeclared (v0.6 rule 2, found by
// FuzzLedgerDifferential): a detached_from link naming the root's span ID
// in another trace is malformed_link in any order, though the root
// declares no invocation.detached and no count waits for the link; a late
// linking span too.
func TestRuleDetachedLinkOtherTraceUndeclared(t *testing.T) {
	root := spanCtx(1, 1)
	for _, late := range []bool{false, true} {
		linking := stub("side work", spanCtx(3, 3), trace.SpanContext{}, 120, attribute.Int(contract.AttrChildren, 0))
		if late {
			linking.Attributes = append(linking.Attributes, attribute.Bool(contract.AttrLateChild, true))
		}
		linking.Links = []sdktrace.Link{linkTo(spanCtx(9, 1), contract.LinkDetachedFrom)}
		spans := []tracetest.SpanStub{rootStub(root, 0), linking}
		permutations(len(spans), func(order []int) {
			sl := newStubLedger(t)
			for _, i := range order {
				sl.feed(spans[i])
			}
			s := sl.summary("inv")
			if s.Status == contract.StatusFinal || !slices.Contains(s.Reasons, "malformed_link:side work") {
				t.Errorf("late %v, order %v: %s %v", late, order, s.Status, s.Reasons)
			}
		})
	}
}

// TestRuleUnrecordedNeverFinal (rule 3, ledger): a span that declares
// invocation.unrecorded > 0 makes the invocation incomplete with
// not_sampled naming it, once its other obligations are met.
func TestRuleUnrecordedNeverFinal(t *testing.T) {
	root, chat := spanCtx(1, 1), spanCtx(1, 2)
	r := rootStub(root, 1)
	r.Attributes = append(r.Attributes, attribute.Int(contract.AttrUnrecorded, 1))
	sl := newStubLedger(t)
	sl.feed(r, chatStub(chat, root, 10, 1))
	wantStatus(t, sl.summary("inv"), contract.StatusIncomplete, "not_sampled:invoke_agent a")
}

// TestRuleFollowupLinkNamesTraceAndSpan (v0.6 rule 2): a followup link
// with the job's span ID in another trace neither discharges the job's
// followup nor lets the invocation be final, in any order.
func TestRuleFollowupLinkNamesTraceAndSpan(t *testing.T) {
	root, job := spanCtx(1, 1), spanCtx(1, 2)
	spans := []tracetest.SpanStub{
		rootStub(root, 1),
		jobStub(job, root, 1),
		contStub(spanCtx(2, 3), 0, linkTo(spanCtx(7, 2), contract.LinkFollowup)),
	}
	permutations(len(spans), func(order []int) {
		sl := newStubLedger(t)
		for _, i := range order {
			sl.feed(spans[i])
		}
		s := sl.summary("inv")
		if s.Status == contract.StatusFinal {
			t.Fatalf("order %v: final with a followup link to another trace's span", order)
		}
		if !slices.Contains(s.Reasons, "open_followup:background shell") {
			t.Errorf("order %v: reasons %v", order, s.Reasons)
		}
	})
}

// TestDroppedDetachedSpanWithSampler (rules 3 and 4): a new-trace span
// the sampler drops is declared unrecorded by its context span, not
// detached.
func TestDroppedDetachedSpanWithSampler(t *testing.T) {
	p := newPipeline(t, sdktrace.WithSampler(Sampler(dropNamed{"side work"})))
	ctx, inv := p.tracker.StartInvocation(context.Background(), "a", "s1")
	_, side := p.tp.Tracer("x").Start(ctx, "side work", trace.WithNewRoot())
	side.End()
	inv.End()
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusIncomplete, "not_sampled:invoke_agent a")
	root := p.span(t, "invoke_agent a")
	if n := intAttr(t, root, contract.AttrUnrecorded); n != 1 {
		t.Errorf("root invocation.unrecorded = %d, want 1", n)
	}
	if _, ok := attrOf(root, contract.AttrDetached); ok {
		t.Errorf("root counts a dropped span as detached")
	}
}

// TestSamplerDroppedRootIsNotSampled: a root Sampler records without
// sampling answers not_sampled at once, as a dropped root does.
func TestSamplerDroppedRootIsNotSampled(t *testing.T) {
	p := newPipeline(t, sdktrace.WithSampler(Sampler(sdktrace.NeverSample())))
	ctx, inv := p.tracker.StartInvocation(context.Background(), "a", "s1")
	p.chat(ctx, 10, 1)
	inv.End()
	s, err := p.sp.Ledger().Wait(context.Background(), inv.ID())
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, s, contract.StatusIncomplete, contract.ReasonNotSampled)
	if n := len(p.exp.GetSpans()); n != 0 {
		t.Errorf("exported %d spans", n)
	}
}

// TestStateSizeClasses guards the common path's memory: a span's record
// is at most 256 bytes (the ledger's state has its own test in
// internal/ledger).
func TestStateSizeClasses(t *testing.T) {
	if n := unsafe.Sizeof(spanRecord{}); n > 256 {
		t.Errorf("spanRecord is %d bytes, above 256", n)
	}
}
