package instrument

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/contract"
)

func TestStartInvocationWithID(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	sp := NewSpanProcessor(rec)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tr := NewTracker(WithTracerProvider(tp))

	const id = "5a4dcbae-d853-46d2-a1b5-9783320a12d0"
	ctx, inv, err := tr.StartInvocationWithID(context.Background(), id, "claude-code", "session-1")
	if err != nil {
		t.Fatal(err)
	}
	if inv.ID() != id || InvocationIDFromContext(ctx) != id {
		t.Fatalf("id %q, context %q", inv.ID(), InvocationIDFromContext(ctx))
	}
	inv.End()
	sum, ok := sp.Ledger().Summary(id)
	if !ok || sum.Status != "final" || sum.SessionID != "session-1" {
		t.Fatalf("summary %+v, %v", sum, ok)
	}
	ended := rec.Ended()
	if len(ended) != 1 || !hasAttr(ended[0].Attributes(), attribute.String(contract.AttrInvocationID, id)) {
		t.Fatalf("spans %v", ended)
	}

	if _, _, err := tr.StartInvocationWithID(context.Background(), "", "a", "s"); err == nil {
		t.Error("empty id accepted")
	}
	if n := len(rec.Started()); n != 1 {
		t.Errorf("%d spans started, want the one root", n)
	}
}

func hasAttr(attrs []attribute.KeyValue, want attribute.KeyValue) bool {
	for _, kv := range attrs {
		if kv == want {
			return true
		}
	}
	return false
}
