package otelclaudecode

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/propagation"
)

// traceEnv returns environment entries that carry ctx (TRACEPARENT,
// TRACESTATE, BAGGAGE and the configured propagators' fields).
func (c *Client) traceEnv(ctx context.Context) []string {
	carrier := propagation.MapCarrier{}
	c.cfg.propagators.Inject(ctx, carrier)
	propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}).Inject(ctx, carrier)
	env := make([]string, 0, len(carrier))
	for _, k := range carrier.Keys() {
		env = append(env, envName(k)+"="+carrier.Get(k))
	}
	return env
}

func envName(key string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, key)
}

// inherited is the current environment without the trace context a
// parent process may have handed us: the CLI's work is not that parent's.
func inherited() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(name) {
		case "TRACEPARENT", "TRACESTATE", "BAGGAGE":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// newUUID returns a random (version 4) UUID, as the CLI's --session-id and
// prompt uuids require.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
