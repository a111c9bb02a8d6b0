package instrument

import (
	"context"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

func TestStampAndCountThirdPartySpans(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")

	other := p.tp.Tracer("example.com/thirdparty")
	cctx, child := other.Start(ctx, "http get")
	_, grand := other.Start(cctx, "dns")
	grand.End()
	child.End()
	_, second := other.Start(ctx, "db query")
	second.End()
	inv.End()

	if got := len(p.exp.GetSpans()); got != 4 {
		t.Fatalf("exported %d spans, want 4", got)
	}
	for _, s := range p.exp.GetSpans() {
		if got := strAttr(s, contract.AttrInvocationID); got != inv.ID() {
			t.Errorf("span %q invocation.id = %q, want %q", s.Name, got, inv.ID())
		}
	}
	for name, want := range map[string]int64{"invoke_agent coder": 2, "http get": 1, "dns": 0, "db query": 0} {
		if got := intAttr(t, p.span(t, name), contract.AttrChildren); got != want {
			t.Errorf("%s: invocation.children = %d, want %d", name, got, want)
		}
	}
	if n := p.sp.openSpans(); n != 0 {
		t.Errorf("processor still tracks %d spans after all ended", n)
	}
	if s, _ := p.sp.Ledger().Summary(inv.ID()); s.Status != contract.StatusFinal || s.Usage.Spans != 4 {
		t.Errorf("summary = %+v, want final with 4 spans", s)
	}
}

// dropSampler drops spans whose name starts with "drop", records without
// sampling those starting with "record", and samples the rest.
type dropSampler struct{}

func (dropSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	ts := trace.SpanContextFromContext(p.ParentContext).TraceState()
	switch {
	case strings.HasPrefix(p.Name, "drop"):
		return sdktrace.SamplingResult{Decision: sdktrace.Drop, Tracestate: ts}
	case strings.HasPrefix(p.Name, "record"):
		return sdktrace.SamplingResult{Decision: sdktrace.RecordOnly, Tracestate: ts}
	}
	return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample, Tracestate: ts}
}

func (dropSampler) Description() string { return "dropSampler" }

// TestUnsampledChildrenAreNotCounted: unsampled children are not in
// invocation.children; the one recorded without being sampled is the
// root's invocation.unrecorded (contract v0.6 rule 3), so the invocation
// is incomplete, not final. (The dropped ones the SDK never shows the
// SpanProcessor: without Sampler, nothing declares them.)
func TestUnsampledChildrenAreNotCounted(t *testing.T) {
	p := newPipeline(t, sdktrace.WithSampler(dropSampler{}))
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	tr := p.tp.Tracer("other")
	for _, name := range []string{"kept 1", "drop 1", "record 1", "kept 2", "drop 2"} {
		_, s := tr.Start(ctx, name)
		s.End()
	}
	inv.End()
	if got := intAttr(t, p.span(t, "invoke_agent coder"), contract.AttrChildren); got != 2 {
		t.Errorf("root invocation.children = %d, want 2 (sampled children only)", got)
	}
	if got := len(p.exp.GetSpans()); got != 3 {
		t.Errorf("exported %d spans, want 3", got)
	}
	if got := intAttr(t, p.span(t, "invoke_agent coder"), contract.AttrUnrecorded); got != 1 {
		t.Errorf("root invocation.unrecorded = %d, want 1 (the span recorded without being sampled)", got)
	}
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusIncomplete, "not_sampled:invoke_agent coder")
	if n := p.sp.openSpans(); n != 0 {
		t.Errorf("processor still tracks %d spans", n)
	}
}

func TestChildrenStartedInGoroutines(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	const n = 64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, s := p.tp.Tracer("worker").Start(ctx, "work")
			_, g := p.tp.Tracer("worker").Start(cctx, "step")
			g.End()
			s.End()
		}()
	}
	wg.Wait()
	inv.End()
	if got := intAttr(t, p.span(t, "invoke_agent coder"), contract.AttrChildren); got != n {
		t.Errorf("root invocation.children = %d, want %d", got, n)
	}
	s, _ := p.sp.Ledger().Summary(inv.ID())
	if s.Status != contract.StatusFinal || s.Usage.Spans != 2*n+1 {
		t.Errorf("summary = %+v, want final with %d spans", s, 2*n+1)
	}
}

func TestLateChildIsExportedAndMarked(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	tctx, tool := p.tp.Tracer("tools").Start(ctx, "execute_tool shell")
	tool.End()
	_, late := p.tp.Tracer("tools").Start(tctx, "late work")
	late.End()
	inv.End()

	ls := p.span(t, "late work")
	if got := strAttr(ls, contract.AttrInvocationID); got != inv.ID() {
		t.Errorf("late child invocation.id = %q, want %q", got, inv.ID())
	}
	if v, ok := attrOf(ls, AttrLateChild); !ok || !v.AsBool() {
		t.Errorf("late child lacks %s=true", AttrLateChild)
	}
	if got := intAttr(t, p.span(t, "execute_tool shell"), contract.AttrChildren); got != 0 {
		t.Errorf("parent invocation.children = %d, want 0", got)
	}
	s, _ := p.sp.Ledger().Summary(inv.ID())
	if s.Status != contract.StatusFinal {
		t.Errorf("status = %s, want final", s.Status)
	}
	if !contains(s.Anomalies, "extra_children:execute_tool shell") {
		t.Errorf("anomalies = %v, want extra_children:execute_tool shell", s.Anomalies)
	}
}

func TestInheritsInvocationFromParentWithoutBaggage(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	bare := baggage.ContextWithoutBaggage(ctx)
	_, s := p.tp.Tracer("other").Start(bare, "no baggage")
	s.End()
	inv.End()
	if got := strAttr(p.span(t, "no baggage"), contract.AttrInvocationID); got != inv.ID() {
		t.Errorf("invocation.id = %q, want inherited %q", got, inv.ID())
	}
	if got := intAttr(t, p.span(t, "invoke_agent coder"), contract.AttrChildren); got != 1 {
		t.Errorf("root invocation.children = %d, want 1", got)
	}
}

func TestChildOfAnotherInvocationIsNotCounted(t *testing.T) {
	p := newPipeline(t)
	ctx, outer := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	_, inner := p.tracker.StartInvocation(ctx, "helper", "s2")
	inner.End()
	outer.End()
	if got := intAttr(t, p.span(t, "invoke_agent coder"), contract.AttrChildren); got != 0 {
		t.Errorf("outer invocation.children = %d, want 0", got)
	}
	for _, id := range []string{outer.ID(), inner.ID()} {
		if s, _ := p.sp.Ledger().Summary(id); s.Status != contract.StatusFinal {
			t.Errorf("invocation %s status %s, want final", id, s.Status)
		}
	}
}

func TestOpenSpanLimit(t *testing.T) {
	p := newPipelineWith(t, []SpanProcessorOption{WithMaxOpenSpans(1)})
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	_, s := p.tp.Tracer("other").Start(ctx, "untracked")
	s.End()
	inv.End()
	if _, ok := attrOf(p.span(t, "untracked"), contract.AttrChildren); ok {
		t.Error("span beyond the open-span limit has invocation.children")
	}
	if got := strAttr(p.span(t, "untracked"), contract.AttrInvocationID); got != inv.ID() {
		t.Errorf("untracked span invocation.id = %q, want %q", got, inv.ID())
	}
	if v, ok := attrOf(p.span(t, "untracked"), contract.AttrRemote); !ok || !v.AsBool() {
		t.Error("span beyond the open-span limit is not marked invocation.remote, so its uncounted children would not be waited for")
	}
	if got := intAttr(t, p.span(t, "invoke_agent coder"), contract.AttrChildren); got != 1 {
		t.Errorf("root invocation.children = %d, want 1", got)
	}
}

func TestSpansWithoutInvocation(t *testing.T) {
	p := newPipeline(t)
	ctx, s := p.tp.Tracer("other").Start(context.Background(), "plain")
	_, c := p.tp.Tracer("other").Start(ctx, "plain child")
	c.End()
	s.End()
	if _, ok := attrOf(p.span(t, "plain"), contract.AttrInvocationID); ok {
		t.Error("span outside an invocation got invocation.id")
	}
	if got := intAttr(t, p.span(t, "plain"), contract.AttrChildren); got != 1 {
		t.Errorf("invocation.children = %d, want 1", got)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TestSpansSharingASpanID: two open spans of different traces with the
// same span ID (an IDGenerator may hand out one twice) are tracked apart:
// each counts its own child and is released at its own end, in either
// order.
func TestSpansSharingASpanID(t *testing.T) {
	ids := &presetIDs{}
	p := newPipeline(t, sdktrace.WithIDGenerator(ids))
	shared := trace.SpanID{0xaa, 1}
	t1, t2 := trace.TraceID{1}, trace.TraceID{2}
	ids.set(t1, shared)
	ctx1, inv1 := p.tracker.StartInvocation(context.Background(), "a", "s1")
	ids.set(t2, shared)
	ctx2, inv2 := p.tracker.StartInvocation(context.Background(), "b", "s2")
	tr := p.tp.Tracer("example.com/tools")
	ids.set(t1, trace.SpanID{0xbb, 1})
	_, c1 := tr.Start(ctx1, "tool one")
	ids.set(t2, trace.SpanID{0xbb, 2})
	_, c2 := tr.Start(ctx2, "tool two")
	c2.End()
	c1.End()
	if n := p.sp.openSpans(); n != 2 {
		t.Fatalf("processor tracks %d spans with both roots open, want 2", n)
	}
	inv1.End()
	if n := p.sp.openSpans(); n != 1 {
		t.Fatalf("processor tracks %d spans after the first root ended, want 1", n)
	}
	inv2.End()
	if n := p.sp.openSpans(); n != 0 {
		t.Fatalf("processor tracks %d spans after both roots ended, want 0", n)
	}
	for _, tc := range []struct {
		name, id string
		children int64
	}{
		{"invoke_agent a", inv1.ID(), 1}, {"invoke_agent b", inv2.ID(), 1},
		{"tool one", inv1.ID(), 0}, {"tool two", inv2.ID(), 0},
	} {
		s := p.span(t, tc.name)
		if got := strAttr(s, contract.AttrInvocationID); got != tc.id {
			t.Errorf("%s: invocation.id = %q, want %q", tc.name, got, tc.id)
		}
		if got := intAttr(t, s, contract.AttrChildren); got != tc.children {
			t.Errorf("%s: invocation.children = %d, want %d", tc.name, got, tc.children)
		}
	}
	for _, id := range []string{inv1.ID(), inv2.ID()} {
		if s, _ := p.sp.Ledger().Summary(id); s.Status != contract.StatusFinal || s.Usage.Spans != 2 {
			t.Errorf("summary of %s = %+v, want final with 2 spans", id, s)
		}
	}
}

// TestChildrenOfOneParentFromTwoContexts: the baggage of each context a
// child starts from names its invocation, even when the parent's record
// kept the answer for another context.
func TestChildrenOfOneParentFromTwoContexts(t *testing.T) {
	p := newPipeline(t)
	ctxA, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	ctxB, err := ContextWithInvocation(ctxA, "other-invocation")
	if err != nil {
		t.Fatal(err)
	}
	tr := p.tp.Tracer("example.com/tools")
	for _, c := range []struct {
		ctx  context.Context
		name string
	}{{ctxA, "a1"}, {ctxB, "b1"}, {ctxA, "a2"}, {ctxB, "b2"}, {ctxB, "b3"}, {ctxA, "a3"}} {
		_, s := tr.Start(c.ctx, c.name)
		s.End()
	}
	inv.End()
	for name, want := range map[string]string{"a1": inv.ID(), "a2": inv.ID(), "a3": inv.ID(),
		"b1": "other-invocation", "b2": "other-invocation", "b3": "other-invocation"} {
		if got := strAttr(p.span(t, name), contract.AttrInvocationID); got != want {
			t.Errorf("%s: invocation.id = %q, want %q", name, got, want)
		}
	}
	if got := intAttr(t, p.span(t, "invoke_agent coder"), contract.AttrChildren); got != 3 {
		t.Errorf("root invocation.children = %d, want 3 (its own invocation's children only)", got)
	}
}
