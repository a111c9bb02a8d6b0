package otelopencode

import (
	"time"

	"github.com/agentledger/agentledger/instrument/internal/flush"
)

// DefaultFlushTimeout bounds the export that precedes each result (see
// WithFlushTimeout).
const DefaultFlushTimeout = flush.DefaultTimeout

// WithFlushTimeout bounds the export the Client waits for before it passes
// a prompt's result on (Prompt's return; Transport's response to POST
// /session/:id/message): the TracerProvider's ForceFlush, so that a host
// that has the answer finds the invocation, and what it still owes, in
// the collector. Default DefaultFlushTimeout; a negative timeout passes
// results on at once (the spans then go on the exporter's schedule); 0
// is the default. A flush that fails or times out is reported to the
// OpenTelemetry error handler and the result is passed on all the same.
// The same bound applies to a session's idle on the event stream read
// through Transport, which is held until the Client handled it and
// flushed (see Client.Transport), and to the background export of each
// wake span (instrument.WithWakeFlush).
func WithFlushTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.flushTimeout = d })
}

// flushSpans exports what the Client's TracerProvider holds, bounded.
func (c *Client) flushSpans() {
	_ = flush.New(c.cfg.tracerProvider, c.cfg.flushTimeout).Flush()
}
