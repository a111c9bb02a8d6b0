package instrument

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// probe is a next processor that, when a span ends, records whether the
// ledger already counted the invocation as final.
type probe struct {
	*tracetest.SpanRecorder
	ledger      func() *Ledger
	id          func() string
	finalBefore bool
}

func (p *probe) OnEnd(s sdktrace.ReadOnlySpan) {
	if sum, ok := p.ledger().Summary(p.id()); ok && sum.Status == "final" {
		p.finalBefore = true
	}
	p.SpanRecorder.OnEnd(s)
}

// TestNextSeesSpanBeforeLedger pins the order in OnEnd: the exporting
// processor receives a span before the ledger counts it, so a caller woken
// by Ledger.Wait never finds a span of the invocation not yet handed on.
func TestNextSeesSpanBeforeLedger(t *testing.T) {
	var inv *Invocation
	var sp *SpanProcessor
	pr := &probe{SpanRecorder: tracetest.NewSpanRecorder()}
	pr.ledger = func() *Ledger { return sp.Ledger() }
	pr.id = func() string { return inv.ID() }
	sp = NewSpanProcessor(pr)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracker := NewTracker(WithTracerProvider(tp))

	_, inv = tracker.StartInvocation(context.Background(), "agent", "s1")
	inv.End() // the root is the last obligation: final once the ledger sees it

	sum, err := sp.Ledger().Wait(context.Background(), inv.ID())
	if err != nil || sum.Status != "final" {
		t.Fatalf("Wait = %+v, %v", sum, err)
	}
	if pr.finalBefore {
		t.Fatal("the ledger counted the root as final before the next processor received it")
	}
	if n := len(pr.Ended()); n != 1 {
		t.Fatalf("next processor got %d spans when Wait returned, want 1", n)
	}
}
