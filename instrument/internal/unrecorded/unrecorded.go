// Package unrecorded lets the client wrappers that do not import
// instrument (they share instrument/internal/genaicall) report a
// model-call span the sampler dropped to instrument.NoteUnrecorded
// (contract v0.6 rule 3). instrument installs the report when it is
// linked in; without it there is no SpanProcessor to report to.
package unrecorded

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
)

// Func reports that span, started from parent under name, is not
// recording.
type Func func(parent context.Context, span trace.Span, name string)

var report atomic.Pointer[Func]

// Install sets the report Note calls.
func Install(f Func) { report.Store(&f) }

// Note reports span, started from parent under name, when it is not
// recording; a recording span costs nothing more.
func Note(parent context.Context, span trace.Span, name string) {
	if span.IsRecording() {
		return
	}
	if f := report.Load(); f != nil {
		(*f)(parent, span, name)
	}
}
