// Package flush exports what a TracerProvider holds before an adapter
// passes a result on, so that a host that sees a result can ask the
// collector about it: the OTLP exporter returns from an export once the
// collector acknowledged it, and ForceFlush returns once the exports it
// started have returned.
package flush

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
)

// DefaultTimeout bounds one flush when the adapter is given none: long
// enough for a collector on loopback or the same network, short enough
// that a collector that is down delays a result by no more than this.
const DefaultTimeout = 2 * time.Second

// keepParkedKey marks the context of a flush before a result.
type keepParkedKey struct{}

// KeepsParked reports whether ctx is a flush before a result, which
// exports what has ended and must not end the model calls a client
// wrapper holds open for a retry (the instrument SpanProcessor's
// ForceFlush does otherwise): the runtime goes on after the result, and
// may still retry.
func KeepsParked(ctx context.Context) bool { return ctx.Value(keepParkedKey{}) != nil }

// forceFlusher is what the SDK's TracerProvider (and a span processor)
// offers.
type forceFlusher interface {
	ForceFlush(context.Context) error
}

// Flusher flushes one TracerProvider, bounded. Its zero value flushes
// nothing.
type Flusher struct {
	tp      forceFlusher
	timeout time.Duration
}

// New returns the Flusher of tp. timeout bounds each flush: 0 is
// DefaultTimeout, and a negative timeout turns flushing off. A provider
// without ForceFlush (the no-op provider) is never flushed.
func New(tp trace.TracerProvider, timeout time.Duration) Flusher {
	f, ok := tp.(forceFlusher)
	if !ok || timeout < 0 {
		return Flusher{}
	}
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	return Flusher{tp: f, timeout: timeout}
}

// Enabled reports whether Flush does anything.
func (f Flusher) Enabled() bool { return f.tp != nil }

// Flush exports every span ended so far and waits, at most the timeout,
// for the exporter to return. It is not bounded by the caller's context
// (a host that gave up still gets its invocation recorded), only by the
// timeout. A failure is passed to the OpenTelemetry error handler and
// returned: the caller passes its result on all the same (the collector
// gets the spans on the exporter's schedule, or never).
func (f Flusher) Flush() error {
	if f.tp == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithValue(context.Background(), keepParkedKey{}, true), f.timeout)
	defer cancel()
	if err := f.tp.ForceFlush(ctx); err != nil {
		err = fmt.Errorf("flushing spans (bounded by %s): %w", f.timeout, err)
		otel.Handle(err)
		return err
	}
	return nil
}
