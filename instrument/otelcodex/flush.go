package otelcodex

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/agentledger/agentledger/instrument/internal/flush"
)

// DefaultFlushTimeout bounds the export that precedes each result (see
// WithFlushTimeout).
const DefaultFlushTimeout = flush.DefaultTimeout

// ExecFieldTurnID is the field Exec adds to the turn.completed and
// turn.failed events of `codex exec --json` it passes to the host: the
// id the collector's status API knows the turn's invocation by (Codex's
// turn id, which `codex exec` prints nowhere itself). The Codex SDK's
// runStreamed() yields it on those events (event.turn_id).
const ExecFieldTurnID = "turn_id"

// WithFlushTimeout bounds the export the Client waits for before it passes
// a result on (Run's and a Session's return; the turn.completed,
// turn.failed and turn/completed lines Exec passes to the host): the
// TracerProvider's ForceFlush, so that a host that has a result finds the
// invocation, and what it still owes, in the collector. Default
// DefaultFlushTimeout; a negative timeout passes results on at once (the
// spans then go on the exporter's schedule); 0 is the default. A flush
// that fails or times out is reported to the OpenTelemetry error handler
// and the result is passed on all the same.
//
// The same bound applies to the export of each wake span (a turn the
// runtime started by itself, announced when it starts): the Client's
// Tracker flushes the provider in the background after it
// (instrument.WithWakeFlush), coalescing flushes asked for while one
// runs, and never holds up the runtime's output for it.
func WithFlushTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.flushTimeout = d })
}

// flushSpans exports what the Client's TracerProvider holds, bounded.
func (c *Client) flushSpans() {
	_ = flush.New(c.cfg.tracerProvider, c.cfg.flushTimeout).Flush()
}

// withTurnID returns an edit that adds ExecFieldTurnID to a turn's last
// event (a JSON object line) unless it has the field already.
func withTurnID(id string) func([]byte) []byte {
	return func(line []byte) []byte {
		var keys map[string]json.RawMessage
		if id == "" || json.Unmarshal(line, &keys) != nil || keys == nil {
			return line
		}
		if _, has := keys[ExecFieldTurnID]; has {
			return line
		}
		end := bytes.LastIndexByte(line, '}')
		if end < 0 {
			return line
		}
		v, _ := json.Marshal(id)
		field := append([]byte(`"`+ExecFieldTurnID+`":`), v...)
		out := make([]byte, 0, len(line)+len(field)+1)
		out = append(out, line[:end]...)
		if len(keys) > 0 {
			out = append(out, ',')
		}
		out = append(out, field...)
		return append(out, line[end:]...)
	}
}
