package instrument

import (
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/ledger"
)

// Usage is the running usage of one invocation: sums over its model-call
// spans (gen_ai.operation.name in contract.DefaultUsageOperations) and
// counts of its lifecycle spans, as far as they have ended in this
// process.
type Usage struct {
	InputTokens              int64
	OutputTokens             int64
	CacheReadInputTokens     int64
	CacheCreationInputTokens int64
	ReasoningOutputTokens    int64
	// AfterResultInputTokens and AfterResultOutputTokens are the part of
	// the sums from model calls that started after the root span ended.
	AfterResultInputTokens  int64
	AfterResultOutputTokens int64
	ModelCalls              int64
	BackgroundJobs          int64
	Continuations           int64
	Spans                   int64
}

// Status is an invocation's status in a Summary: the values of
// contract.AttrStatus.
type Status string

// Values of Summary.Status.
const (
	// StatusPending: the invocation may still change.
	StatusPending Status = contract.StatusPending
	// StatusFinal: every counted span arrived and the totals are exact.
	StatusFinal Status = contract.StatusFinal
	// StatusIncomplete: the invocation closed without meeting the rule;
	// Summary.Reasons says why.
	StatusIncomplete Status = contract.StatusIncomplete
)

// Summary is the ledger's view of one invocation, with the fields of the
// collector's invocation.summary span. While the invocation is pending it
// is its current state; once it closed, it is the latest summary: the
// first final or incomplete one, or the latest revision.
type Summary struct {
	InvocationID string
	SessionID    string
	Agent        string
	// Status is StatusPending, StatusFinal or StatusIncomplete.
	Status Status
	// Reasons says, each as "kind:detail", what keeps a pending
	// invocation open or why it closed incomplete: the contract's kinds,
	// and in process also "open_span:<name>" for a span the ledger saw
	// start, that no count declares, and that has not ended.
	Reasons []string
	// Anomalies lists, each as "kind:detail", what did not block finality
	// but a reader must know (extra_children, invalid_usage, late_span,
	// foreign_followup, duplicate_link, orphan_job,
	// followup_interrupted:<job name> for a job whose followup closed
	// interrupted, usage_mismatch:<span name> for a turn whose runtime
	// reported other usage than the model wire counted; anomalies_cut
	// when more than 64 others were seen, the last two never cut).
	Anomalies []string
	// Revision is 1 for the first final or incomplete summary and grows
	// by one for each revision a span arriving later causes (contract
	// rule 4: final only when every condition holds, the remote settle
	// time included); 0 while pending.
	Revision int
	Usage    Usage
	// TimeToFinal is the latest end of any member span minus the root's
	// end (contract.AttrTimeToFinalMS); 0 when nothing ended after the
	// root or the root has not ended.
	TimeToFinal time.Duration
}

// TimeToFinalMS is TimeToFinal in whole milliseconds.
func (s Summary) TimeToFinalMS() int64 { return s.TimeToFinal.Milliseconds() }

// JobInfo describes a background job of a session.
type JobInfo struct {
	InvocationID string
	SpanID       trace.SpanID
	// Name is the background span's name, e.g. "background shell".
	Name    string
	Started time.Time
}

// SessionState says whether a session still owes work to its invocations.
type SessionState struct {
	// OwesWork is true while a job runs, a continuation or unattributed
	// turn runs, or anything is Owed: a runtime must not unload the
	// session then. Eviction, the open timeout and the retention never
	// make it false while a job of the session runs.
	OwesWork bool
	// OpenJobs are background spans started and not yet ended.
	OpenJobs []JobInfo
	// ExpectedFollowups are ended background spans whose promised
	// followups have not arrived.
	ExpectedFollowups []JobInfo
	// RunningContinuations counts continuation spans started and not yet
	// ended.
	RunningContinuations int
	// UnattributedTurns counts turns started with
	// Tracker.StartUnattributed and not yet ended.
	UnattributedTurns int
	// Owed lists what the session's invocations are owed, as the
	// collector's status API lists it (CONTRACT.md v0.12, "Owed means
	// everything owed"): declared children, followups, detached spans,
	// remote subtrees settling, turns a wake span announced, and
	// owing_forgotten:<invocation id> for an invocation the ledger had to
	// forget while it held work (WithMaxOpenInvocations bounds those it
	// keeps). What its open timeout wrote off is not listed.
	Owed []Owed
}

// Owed is one item of work an invocation is owed.
type Owed struct {
	// InvocationID is the invocation that is owed it.
	InvocationID string
	// Reason is "kind:span name" (or owing_forgotten:<invocation id>).
	Reason string
	// Waits says what it waits for.
	Waits string
}

// ErrLedgerShutdown is returned by Wait after the SpanProcessor shut down
// before the invocation closed.
var ErrLedgerShutdown = ledger.ErrLedgerShutdown
