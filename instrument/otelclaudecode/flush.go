package otelclaudecode

import (
	"bytes"
	"encoding/json"
	"sync"
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

// givenIDs are the uuids Exec gave prompts that had none. The CLI reports
// the lifecycle of a prompt that has a uuid (command_lifecycle lines),
// which it does not for one without: those lines are the drop-in's doing,
// and are not passed to the host, whose messages stay as without the
// drop-in.
type givenIDs struct {
	// mu guards ids and order.
	mu    sync.Mutex
	ids   map[string]struct{}
	order []string
}

func (g *givenIDs) add(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ids == nil {
		g.ids = make(map[string]struct{})
	}
	g.ids[id] = struct{}{}
	g.order = append(g.order, id)
	if len(g.order) > maxUsedIDs {
		delete(g.ids, g.order[0])
		g.order = g.order[1:]
	}
}

// has reports whether id was given by Exec; the lifecycle's last state
// (completed) forgets it.
func (g *givenIDs) has(id, state string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, ok := g.ids[id]
	if ok && state == "completed" {
		delete(g.ids, id)
	}
	return ok
}

// dropLine is the Gate edit that passes nothing on.
func dropLine([]byte) []byte { return nil }
