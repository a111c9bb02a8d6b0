package unrecorded

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

func TestNoteReportsOnlyUnrecordedSpans(t *testing.T) {
	var got []string
	Install(func(_ context.Context, _ trace.Span, name string) { got = append(got, name) })
	_, dropped := noop.NewTracerProvider().Tracer("t").Start(context.Background(), "x")
	Note(context.Background(), dropped, "chat dropped")
	if len(got) != 1 || got[0] != "chat dropped" {
		t.Errorf("reported %v", got)
	}
}
