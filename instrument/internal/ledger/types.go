package ledger

import (
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/internal/ledgerrule"
)

// The ledger answers in the types of this file; package instrument
// converts them into its public Summary, Usage, JobInfo and SessionState,
// where the fields are documented.

// Usage is the running usage of one invocation (instrument.Usage): the
// Graph's sums and counts.
type Usage struct {
	ledgerrule.Usage
	AfterInput, AfterOutput                          int64
	ModelCalls, BackgroundJobs, Continuations, Spans int64
}

// Summary is the ledger's view of one invocation (instrument.Summary);
// Status is a contract status.
type Summary struct {
	InvocationID, SessionID, Agent, Status string
	Reasons, Anomalies                     []string
	Revision                               int
	Usage                                  Usage
	TimeToFinal                            time.Duration
}

// JobInfo describes a background job of a session (instrument.JobInfo).
type JobInfo struct {
	InvocationID, Name string
	SpanID             trace.SpanID
	Started            time.Time
}

// SessionState says whether a session still owes work to its invocations
// (instrument.SessionState).
type SessionState struct {
	OwesWork                                bool
	OpenJobs, ExpectedFollowups             []JobInfo
	RunningContinuations, UnattributedTurns int
	Owed                                    []OwedInfo
}

// OwedInfo is one item a session's invocation is owed (instrument.Owed).
type OwedInfo struct {
	InvocationID, Reason, Waits string
}

// ErrLedgerShutdown is returned by Wait after the ledger shut down before
// the invocation closed (instrument.ErrLedgerShutdown).
var ErrLedgerShutdown = errors.New("instrument: ledger shut down")
