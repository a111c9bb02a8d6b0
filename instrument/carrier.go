package instrument

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// Carrier holds the W3C trace context and baggage of a background job
// (keys traceparent, tracestate, baggage) so that a completion notification
// can name the job it reports: store it in the notification and pass it to
// Tracker.StartContinuation, Tracker.CloseFollowup or
// Tracker.ConsumeFollowup. It is a propagation.TextMapCarrier.
type Carrier map[string]string

// Carrier keys.
const (
	carrierTraceparent = "traceparent"
	carrierTracestate  = "tracestate"
	carrierBaggage     = "baggage"
)

// Get returns the value of key.
func (c Carrier) Get(key string) string { return c[strings.ToLower(key)] }

// Set stores value under key.
func (c Carrier) Set(key, value string) { c[strings.ToLower(key)] = value }

// Keys returns the keys of c in sorted order.
func (c Carrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// JobRef is what a Carrier names: the span of a background job and the
// invocation it belongs to.
type JobRef struct {
	// SpanContext is the job's background span.
	SpanContext trace.SpanContext
	// InvocationID is the invocation the job belongs to.
	InvocationID string
}

// Errors returned by ParseCarrier, wrapped with details.
var (
	// ErrBadTraceparent reports a missing or malformed traceparent.
	ErrBadTraceparent = errors.New("instrument: bad traceparent")
	// ErrBadBaggage reports malformed baggage or a missing invocation.id
	// member.
	ErrBadBaggage = errors.New("instrument: bad baggage")
)

// maxInvocationIDLen bounds the invocation ids accepted from carriers.
const maxInvocationIDLen = 256

// ParseCarrier reads a job reference from c. It is strict about the
// traceparent (W3C trace context level 1: version 00 exactly, lowercase
// hex, non-zero ids) and requires the baggage member invocation.id. An
// invalid tracestate is dropped, as W3C trace context prescribes.
func ParseCarrier(c Carrier) (JobRef, error) {
	sc, err := parseTraceparent(c[carrierTraceparent])
	if err != nil {
		return JobRef{}, err
	}
	if ts := c[carrierTracestate]; ts != "" {
		if state, err := trace.ParseTraceState(ts); err == nil {
			sc = sc.WithTraceState(state)
		}
	}
	raw, ok := c[carrierBaggage]
	if !ok {
		return JobRef{}, fmt.Errorf("%w: no baggage", ErrBadBaggage)
	}
	bag, err := baggage.Parse(raw)
	if err != nil {
		return JobRef{}, fmt.Errorf("%w: %w", ErrBadBaggage, err)
	}
	id := bag.Member(contract.BaggageInvocationID).Value()
	if err := validInvocationID(id); err != nil {
		return JobRef{}, fmt.Errorf("%w: %w", ErrBadBaggage, err)
	}
	return JobRef{SpanContext: sc, InvocationID: id}, nil
}

func validInvocationID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("no %s member", contract.BaggageInvocationID)
	case len(id) > maxInvocationIDLen:
		return fmt.Errorf("%s longer than %d bytes", contract.BaggageInvocationID, maxInvocationIDLen)
	case !utf8.ValidString(id):
		return fmt.Errorf("%s is not UTF-8", contract.BaggageInvocationID)
	}
	return nil
}

// parseTraceparent parses a version 00 traceparent:
// 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>.
func parseTraceparent(s string) (trace.SpanContext, error) {
	const size = 55
	if s == "" {
		return trace.SpanContext{}, fmt.Errorf("%w: missing", ErrBadTraceparent)
	}
	if len(s) != size {
		return trace.SpanContext{}, fmt.Errorf("%w: %d bytes, want %d", ErrBadTraceparent, len(s), size)
	}
	if s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return trace.SpanContext{}, fmt.Errorf("%w: bad separators", ErrBadTraceparent)
	}
	if s[:2] != "00" {
		return trace.SpanContext{}, fmt.Errorf("%w: version %q not supported", ErrBadTraceparent, s[:2])
	}
	for i := 3; i < size; i++ {
		if i == 35 || i == 52 {
			continue
		}
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return trace.SpanContext{}, fmt.Errorf("%w: byte %d is not lowercase hex", ErrBadTraceparent, i)
		}
	}
	tid, err := trace.TraceIDFromHex(s[3:35])
	if err != nil {
		return trace.SpanContext{}, fmt.Errorf("%w: %w", ErrBadTraceparent, err)
	}
	sid, err := trace.SpanIDFromHex(s[36:52])
	if err != nil {
		return trace.SpanContext{}, fmt.Errorf("%w: %w", ErrBadTraceparent, err)
	}
	var flags byte
	for _, c := range []byte(s[53:55]) {
		flags <<= 4
		if c <= '9' {
			flags |= c - '0'
		} else {
			flags |= c - 'a' + 10
		}
	}
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    tid,
		SpanID:     sid,
		TraceFlags: trace.TraceFlags(flags) & trace.FlagsSampled,
		Remote:     true,
	}), nil
}

// w3c is the propagator the contract requires for carriers and
// subprocess environments.
var w3c = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// envCarrier maps the upper-case environment variable names TRACEPARENT,
// TRACESTATE and BAGGAGE (and any other propagator field, upper-cased) to
// the propagators' lower-case keys.
type envCarrier map[string]string

func (e envCarrier) Get(key string) string { return e[envName(key)] }

func (e envCarrier) Set(key, value string) { e[envName(key)] = value }

func (e envCarrier) Keys() []string {
	keys := make([]string, 0, len(e))
	for k := range e {
		keys = append(keys, strings.ToLower(k))
	}
	sort.Strings(keys)
	return keys
}

func envName(key string) string {
	return strings.ToUpper(strings.ReplaceAll(key, "-", "_"))
}

// ContextFromEnv returns ctx with the trace context and baggage a parent
// process passed in env (as from os.Environ(); variables TRACEPARENT,
// TRACESTATE, BAGGAGE, see Job.Env). Spans started from the returned
// context in a process whose provider has a SpanProcessor are children of
// the job's span and carry its invocation.id. Of its options it reads
// WithPropagators.
func ContextFromEnv(ctx context.Context, env []string, opts ...TrackerOption) context.Context {
	cfg := newTrackerConfig(opts)
	carrier := envCarrier{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			carrier[k] = v
		}
	}
	ctx = cfg.propagators.Extract(ctx, carrier)
	return w3c.Extract(ctx, carrier)
}
