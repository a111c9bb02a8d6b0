package statusapi // import "github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"

import (
	"encoding/hex"
	"fmt"
	"time"
)

// Timeline is what the collector recorded of an invocation's spans, from
// all of its traces, for its page (/invocations/{id}) and for
// GET /v1/invocations/{id}?spans=1. It is a view: the summary's figures
// (Invocation.Usage, AfterResult, the counts) are the ledger's and count
// every span, recorded or not.
type Timeline struct {
	// Spans are the recorded spans in the order the collector indexed
	// them; duplicates are not repeated.
	Spans []Span `json:"spans"`
	// Limit is the processor's status_spans: at most this many spans of
	// one invocation are recorded (its root always is, as one more).
	Limit int `json:"limit"`
	// Omitted counts the invocation's spans indexed past Limit: not
	// recorded, so not drawn. Zero when the timeline is whole.
	Omitted int64 `json:"omitted,omitempty"`
}

// Span is one recorded span of an invocation.
type Span struct {
	TraceID TraceID `json:"trace_id"`
	SpanID  SpanID  `json:"span_id"`
	// ParentSpanID is zero (omitted) for the root of a trace.
	ParentSpanID SpanID `json:"parent_span_id,omitzero"`
	// Name is the span name as the ledger keeps it (cut at the
	// processor's max_name_bytes).
	Name string `json:"name"`
	// Role is the span's invocation.role, empty for spans that have none
	// (tools, model calls).
	Role Role `json:"role,omitempty"`
	// Start and End are the span's times (the agent's clock).
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// ModelCall is set for a model call (its gen_ai.operation.name is one
	// of usage_operations); InputTokens and OutputTokens are its usage as
	// the ledger summed it (a count it could not sum is 0).
	ModelCall bool `json:"model_call,omitempty"`
	// Failed is set when the span's status is Error.
	Failed bool `json:"failed,omitempty"`
	// Remote is invocation.remote: children may come from elsewhere.
	Remote       bool  `json:"remote,omitempty"`
	InputTokens  int64 `json:"input_tokens,omitempty"`
	OutputTokens int64 `json:"output_tokens,omitempty"`
	// Link is the kind of the span's first link the ledger reads
	// (followup, consumed, detached_from), and LinkedSpanID its target;
	// Links counts all such links of the span.
	Link         LinkKind `json:"link,omitempty"`
	LinkedSpanID SpanID   `json:"linked_span_id,omitzero"`
	Links        int      `json:"links,omitempty"`
}

// Role is a span's invocation.role, with the contract's values.
type Role string

// Values of Role.
const (
	RoleRoot           Role = "root"
	RoleBackground     Role = "background"
	RoleContinuation   Role = "continuation"
	RoleFollowupClosed Role = "followup_closed"
)

// LinkKind is a span link's invocation.link, with the contract's values.
type LinkKind string

// Values of LinkKind.
const (
	LinkFollowup     LinkKind = "followup"
	LinkConsumed     LinkKind = "consumed"
	LinkDetachedFrom LinkKind = "detached_from"
)

// SpanID is a span ID; it reads and writes as 16 hex digits.
type SpanID [8]byte

// TraceID is a trace ID; it reads and writes as 32 hex digits.
type TraceID [16]byte

// IsZero reports whether the ID is all zeros (no span).
func (id SpanID) IsZero() bool { return id == SpanID{} }

// String returns the ID in hex.
func (id SpanID) String() string { return hex.EncodeToString(id[:]) }

// MarshalText writes the ID in hex.
func (id SpanID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText reads an ID in hex.
func (id *SpanID) UnmarshalText(b []byte) error { return unhex(id[:], b) }

// IsZero reports whether the ID is all zeros.
func (id TraceID) IsZero() bool { return id == TraceID{} }

// String returns the ID in hex.
func (id TraceID) String() string { return hex.EncodeToString(id[:]) }

// MarshalText writes the ID in hex.
func (id TraceID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText reads an ID in hex.
func (id *TraceID) UnmarshalText(b []byte) error { return unhex(id[:], b) }

func unhex(dst, src []byte) error {
	if hex.DecodedLen(len(src)) != len(dst) {
		return fmt.Errorf("statusapi: id %q: want %d hex digits", src, 2*len(dst))
	}
	if _, err := hex.Decode(dst, src); err != nil {
		return fmt.Errorf("statusapi: id %q: %w", src, err)
	}
	return nil
}
