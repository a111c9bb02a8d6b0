package instrument

import (
	"context"
	"errors"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/refmodel"
)

// gatedExporter blocks every export until release is closed, then exports
// to an in-memory exporter (or fails with err).
type gatedExporter struct {
	release chan struct{}
	mem     *tracetest.InMemoryExporter
	err     error
}

func (g *gatedExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	<-g.release
	if g.err != nil {
		return g.err
	}
	return g.mem.ExportSpans(ctx, spans)
}

func (g *gatedExporter) Shutdown(context.Context) error { return nil }

// reportedPipeline is a pipeline whose SpanProcessor hands spans to a
// batching processor with a small queue, exporting through an
// ExportReporter.
func reportedPipeline(t *testing.T, exp sdktrace.SpanExporter, queue int) *pipeline {
	t.Helper()
	p := &pipeline{clock: newManualClock()}
	r := NewExportReporter(exp)
	bsp := sdktrace.NewBatchSpanProcessor(r, sdktrace.WithMaxQueueSize(queue), sdktrace.WithMaxExportBatchSize(1))
	p.sp = NewSpanProcessor(bsp, withClock(p.clock), WithExportReporter(r))
	p.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p.sp))
	p.tracker = NewTracker(WithTracerProvider(p.tp))
	t.Cleanup(func() { _ = p.tp.Shutdown(context.Background()) })
	return p
}

// TestExportLostQueue: the batching queue overflows while the exporter is
// busy; the ledger, final as soon as the spans ended, is revised
// incomplete with export_lost:queue at the flush.
func TestExportLostQueue(t *testing.T) {
	g := &gatedExporter{release: make(chan struct{}), mem: tracetest.NewInMemoryExporter()}
	p := reportedPipeline(t, g, 2)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	for range 20 {
		p.chat(ctx, 10, 1)
	}
	inv.End()
	close(g.release)
	if err := p.tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := len(g.mem.GetSpans()); n >= 21 {
		t.Fatalf("the queue dropped nothing (%d spans exported)", n)
	}
	s := p.summary(t, inv.ID())
	if s.Status == StatusFinal || !hasReason(s.Reasons, "export_lost:queue") {
		t.Fatalf("%s %v after losing %d spans", s.Status, s.Reasons, 21-len(g.mem.GetSpans()))
	}
}

// TestExportLostFailed: a failed export revises the invocation.
func TestExportLostFailed(t *testing.T) {
	g := &gatedExporter{release: make(chan struct{}), mem: tracetest.NewInMemoryExporter(), err: errors.New("unavailable")}
	close(g.release)
	p := reportedPipeline(t, g, 64)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	p.chat(ctx, 10, 1)
	inv.End()
	_ = p.tp.ForceFlush(context.Background())
	s := p.summary(t, inv.ID())
	if s.Status == StatusFinal || !hasReason(s.Reasons, "export_lost:failed") {
		t.Fatalf("%s %v", s.Status, s.Reasons)
	}
}

// TestExportReporterKeepsFinal: an export that loses nothing leaves the
// invocation final, and nothing stays pending.
func TestExportReporterKeepsFinal(t *testing.T) {
	g := &gatedExporter{release: make(chan struct{}), mem: tracetest.NewInMemoryExporter()}
	close(g.release)
	p := reportedPipeline(t, g, 2048)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	for range 50 {
		p.chat(ctx, 10, 1)
	}
	inv.End()
	if err := p.tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, p.summary(t, inv.ID()), StatusFinal)
	if n := len(g.mem.GetSpans()); n != 51 {
		t.Fatalf("exported %d spans", n)
	}
	if n := len(p.sp.reporter.pending); n != 0 {
		t.Fatalf("%d spans still pending", n)
	}
}

// TestExportLostDeclared: the spans the queue dropped are declared to the
// collector too: the exporter receives, after the flush, an unrecorded
// declaration named "export_lost queue" of the invocation, and the
// collector's rule (refmodel) over what was exported is not final,
// whichever spans were dropped (a worker's call no count declares among
// them). An export that loses nothing exports no declaration.
func TestExportLostDeclared(t *testing.T) {
	g := &gatedExporter{release: make(chan struct{}), mem: tracetest.NewInMemoryExporter()}
	p := reportedPipeline(t, g, 2)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	wctx, err := ContextWithInvocation(context.Background(), inv.ID())
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		p.chat(ctx, 10, 1)
		p.chat(wctx, 10, 1)
	}
	inv.End()
	close(g.release)
	if err := p.tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var decl bool
	var arrivals []refmodel.Arrival
	now := time.Now()
	for _, s := range g.mem.GetSpans() {
		arrivals = append(arrivals, refmodel.Arrival{Span: refSpan(s), At: now})
		for _, kv := range s.Attributes {
			if kv.Key == contract.AttrRole && kv.Value.AsString() == contract.RoleUnrecorded && s.Name == "export_lost queue" {
				decl = true
			}
		}
	}
	if !decl {
		t.Fatalf("no export_lost declaration among the %d spans exported", len(arrivals))
	}
	cfg := refmodel.Config{MaxSpans: DefaultMaxSpansPerInvocation, UsageOperations: contract.DefaultUsageOperations}
	if v := refmodel.Evaluate(cfg, arrivals, inv.ID(), now.Add(time.Hour)); v.Final {
		t.Fatalf("the collector's rule is final with %+v after the queue dropped spans", v.Totals)
	}

	// Nothing lost, nothing declared.
	g2 := &gatedExporter{release: make(chan struct{}), mem: tracetest.NewInMemoryExporter()}
	close(g2.release)
	p2 := reportedPipeline(t, g2, 2048)
	ctx2, inv2 := p2.tracker.StartInvocation(context.Background(), "coder", "s2")
	p2.chat(ctx2, 10, 1)
	inv2.End()
	if err := p2.tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, s := range g2.mem.GetSpans() {
		if s.Name == "export_lost queue" {
			t.Fatal("a declaration was exported though nothing was lost")
		}
	}
}
