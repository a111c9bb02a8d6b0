package ledgerrule

// Reason and anomaly kinds the Graph reports besides the contract's
// constants (CONTRACT.md, v0.1 clarifications).
const (
	// ReasonInvalidCount: a declared count that cannot be proven
	// (invocation.children, followups, unrecorded or detached).
	ReasonInvalidCount = "invalid_count"
	// ReasonSpanLimit: the invocation reached its span bound; spans
	// beyond it are not indexed, so its totals cannot be proven.
	ReasonSpanLimit = "span_limit"
	// AnomalyExtraRoot: a second root span (another span ID) of one
	// invocation; a member like any other.
	AnomalyExtraRoot = "extra_root"
)

// MaxAnomalies bounds the distinct anomalies, invalid counts and taints a
// Graph keeps, so that a stream of oddly named spans cannot grow one
// invocation without limit. Beyond it an invocation that cannot be final
// stays so: one entry suffices.
const MaxAnomalies = 64

// Link is one span link the rule reads: its target, named by trace and
// span ID (CONTRACT.md v0.6 rule 2), and its kind. A half keeps the links
// of kinds LinkFollowup, LinkConsumed and LinkDetachedFrom, in order.
type Link struct {
	Trace TraceID
	Span  SpanID
	Kind  LinkKind
}

// Span is one ended span as the rule reads it: its identity, times and
// status, the links the rule reads, and the facts SpanReader read of its
// attributes. It is the only input of a Graph; both halves build it with
// their one reader.
type Span struct {
	Facts

	Name       string
	Trace      TraceID
	ID, Parent SpanID
	// Start and End are Unix nanoseconds.
	Start, End uint64
	// Failed: the span's status is Error (a failed model call owes no
	// usage, rule 5).
	Failed bool
	// LinkMalformed: some link's invocation.link is malformed (v0.6 rule
	// 1); that link discharges nothing and is not in Links.
	LinkMalformed bool
	Links         Links
	// Dropped is what the exporting SDK's limits took from the span
	// (sdklimit.go): a span that lost any is never final.
	Dropped Dropped
}

// Links are a span's links the rule reads (kinds LinkFollowup,
// LinkConsumed and LinkDetachedFrom), in order: the first few in place,
// so that reading a span allocates nothing, and a Span holds no pointer
// into itself (it can live on its reader's stack).
type Links struct {
	n    int
	buf  [2]Link
	more []Link
}

// Add appends a link.
func (l *Links) Add(x Link) {
	switch {
	case l.more != nil:
		l.more = append(l.more, x)
	case l.n < len(l.buf):
		l.buf[l.n] = x
		l.n++
	default:
		l.more = make([]Link, l.n, 2*l.n+2)
		copy(l.more, l.buf[:l.n])
		l.more = append(l.more, x)
	}
}

// All returns the links, in order.
func (l *Links) All() []Link {
	if l.more != nil {
		return l.more
	}
	return l.buf[:l.n]
}

// GraphConfig is what a Graph's rule depends on beyond its spans.
type GraphConfig struct {
	// MaxSpans bounds the span IDs one invocation holds: arrived spans,
	// parents and link targets named before they arrive, detached counts
	// (v0.6 rule 5).
	MaxSpans int
	// Settle is remote_settle, in nanoseconds (condition 4).
	Settle int64
}

// Usage holds the five summed gen_ai.usage values.
type Usage struct {
	Input, Output, CacheRead, CacheCreation, Reasoning int64
}

// EarlyCall is a model call that arrived before the root, kept until the
// root's end time can classify it as before or after the result.
type EarlyCall struct {
	Start         uint64
	Input, Output int64
}

// arrival is one span being indexed, as the steps of Arrive after its own
// state share it.
type arrival struct {
	s *Span
	// self is the span's index in Spans; fresh says its ID was new to the
	// graph (with no children it cannot close a cycle).
	self  int
	fresh bool
	// trace and name index the span's trace and name.
	trace, name int32
	now         int64
	cfg         *GraphConfig
}

// Outcome is what Arrive did with a span.
type Outcome uint8

// The outcomes.
const (
	// Indexed: the span is a member; its facts were applied.
	Indexed Outcome = iota
	// Duplicate: the same span (span ID and trace) again; nothing changed.
	Duplicate
	// Reused: another trace's span already holds the span ID (rule 3):
	// the span is not indexed and the invocation is never final.
	Reused
	// SpanLimit: the invocation holds MaxSpans span IDs; the span was not
	// indexed and the invocation can never be final.
	SpanLimit
)

// Result tells the caller what one Arrive did.
type Result struct {
	Outcome Outcome
	// Root: the span is the invocation's first root.
	Root bool
	// Call is the usage of a model call as summed (counts that could not
	// be summed are 0), for pricing.
	Call Usage
	// NameIndex is the span name's index in Graph.Names (Graph.Name
	// reads it), for a half that records indexed spans by their interned
	// names.
	NameIndex int32
}
