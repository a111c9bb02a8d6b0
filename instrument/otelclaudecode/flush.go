package otelclaudecode

import (
	"bytes"
	"encoding/json"
	"io"
	"time"

	"github.com/agentledger/agentledger/instrument/internal/flush"
)

// DefaultFlushTimeout bounds the export that precedes each result (see
// WithFlushTimeout).
const DefaultFlushTimeout = flush.DefaultTimeout

// WithFlushTimeout bounds the export the Client waits for before it passes
// a result on (Prompt's and Run's return, the result line Exec passes to
// the host): the TracerProvider's ForceFlush, so that a host that has a
// result finds the invocation, and what it still owes, in the collector.
// Default DefaultFlushTimeout; a negative timeout passes results on at
// once (the spans then go on the exporter's schedule); 0 is the default.
// A flush that fails or times out is reported to the OpenTelemetry error
// handler and the result is passed on all the same.
func WithFlushTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.flushTimeout = d })
}

// flushSpans exports what the Client's TracerProvider holds, bounded.
func (c *Client) flushSpans() {
	_ = flush.New(c.cfg.tracerProvider, c.cfg.flushTimeout).Flush()
}

// hostTee passes the CLI's stdout to the host (Exec) byte for byte and in
// order, but holds each line back until the Client has handled it, so
// that a result line reaches the host only after its invocation has been
// exported. It sits between the CLI's stdout and the bufio.Reader that
// read loops over: Write gets what the reader takes from the CLI, release
// passes on what the reader has handed out.
//
// A bufio.Reader takes more from the CLI only when what it holds has no
// newline left, so when Write is called the bytes still held are the
// start of a line not yet complete: those are passed on then, which keeps
// the held bytes bounded by the reader's buffer even for a line too long
// to read.
type hostTee struct {
	w    io.Writer
	held []byte
}

func (t *hostTee) Write(b []byte) (int, error) {
	if err := t.pass(len(t.held)); err != nil {
		return 0, err
	}
	t.held = append(t.held, b...)
	return len(b), nil
}

// release passes on what the reader has handed out: everything held but
// the buffered bytes it has not.
func (t *hostTee) release(buffered int) error {
	return t.pass(len(t.held) - buffered)
}

func (t *hostTee) pass(n int) error {
	if n <= 0 {
		return nil
	}
	_, err := t.w.Write(t.held[:n])
	t.held = append(t.held[:0], t.held[n:]...)
	return err
}

// namePrompt gives a host's prompt line that has no "uuid" key one, so
// that the CLI names the prompt by it in its result (user_message_uuid,
// user_message_uuids) and the host can ask the collector about the
// invocation by it. A line with a uuid key (even an empty one) is
// returned as it is.
func namePrompt(line []byte) ([]byte, string) {
	var keys map[string]json.RawMessage
	if json.Unmarshal(line, &keys) != nil {
		return line, ""
	}
	if _, has := keys["uuid"]; has {
		return line, ""
	}
	i := bytes.IndexByte(line, '{')
	if i < 0 {
		return line, ""
	}
	id := newUUID()
	out := make([]byte, 0, len(line)+len(id)+10)
	out = append(out, line[:i+1]...)
	out = append(out, `"uuid":"`...)
	out = append(out, id...)
	out = append(out, '"')
	if rest := bytes.TrimSpace(line[i+1:]); len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, line[i+1:]...), id
}
