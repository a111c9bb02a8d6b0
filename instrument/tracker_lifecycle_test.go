package instrument

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/contract"
)

// lifecycleSeen records the lifecycle each span's start context answers.
type lifecycleSeen struct {
	sdktrace.SpanProcessor
	seen map[string]*lifecycle
}

func (p *lifecycleSeen) OnStart(parent context.Context, s sdktrace.ReadWriteSpan) {
	lc, _ := parent.Value(lifecycleKey{}).(*lifecycle)
	p.seen[s.Name()] = lc
}

// TestLifecycleOnlyWhileStarting: OnStart of a lifecycle span reads its
// role and session from the context it starts from, and the contexts the
// Tracker returns (which hold that context) answer none: a span started
// from them is no lifecycle span.
func TestLifecycleOnlyWhileStarting(t *testing.T) {
	seen := &lifecycleSeen{SpanProcessor: tracetest.NewSpanRecorder(), seen: map[string]*lifecycle{}}
	sp := NewSpanProcessor(nil)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp), sdktrace.WithSpanProcessor(seen))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := NewTracker(WithTracerProvider(tp))

	for range 2 { // the first start probes for the SpanProcessor, the second does not
		clear(seen.seen)
		ctx, inv := tr.StartInvocation(context.Background(), "a", "s")
		if lc := seen.seen["invoke_agent a"]; lc == nil || *lc != (lifecycle{contract.RoleRoot, "s"}) {
			t.Fatalf("root started with lifecycle %v", lc)
		}
		if v := ctx.Value(lifecycleKey{}); v != nil {
			t.Fatalf("returned context answers %v", v)
		}
		if v := ctx.Value(probeKey{}); v != nil {
			t.Fatalf("returned context holds the probe %v", v)
		}
		jctx, job := tr.StartBackground(ctx, "build")
		if lc := seen.seen["background build"]; lc == nil || lc.role != contract.RoleBackground {
			t.Fatalf("job started with lifecycle %v", lc)
		}
		_, child := tp.Tracer("t").Start(jctx, "child")
		if lc := seen.seen["child"]; lc != nil {
			t.Fatalf("a plain span started with lifecycle %v", *lc)
		}
		if InvocationIDFromContext(jctx) != inv.ID() {
			t.Fatalf("job context names %q, want %q", InvocationIDFromContext(jctx), inv.ID())
		}
		child.End()
		job.End(nil, false)
		inv.End()
	}
}
