// Package statusapi holds the JSON types of the invocation_status
// extension's HTTP API and a small client for it. It imports nothing but
// the standard library, so an orchestrator that asks "does this session
// still owe work?" compiles no collector code.
//
// The API (see the extension's README for examples):
//
//	GET /v1/invocations/{id}         one Invocation; 404 when unknown
//	GET /v1/invocations/{id}?spans=1 the same with its Timeline
//	GET /v1/invocations?status=...   an InvocationList, oldest first, paginated
//	GET /v1/sessions/{session}       a Session; 404 when no invocation of it is known
//	GET /v1/sessions/{session}?wait=30s&after=<version>
//	                                 a session watch: the Session once its version is
//	                                 not after (at once if it is not), or after wait
package statusapi // import "github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"

import (
	"strings"
	"time"
)

// Status is an invocation's status, with the contract's values.
type Status string

// Values of Status. An open invocation is StatusPending whether or not its
// root span has arrived (Waiting.RootMissing says which).
const (
	StatusPending    Status = "pending"
	StatusFinal      Status = "final"
	StatusIncomplete Status = "incomplete"
)

// Valid reports whether s is one of the three statuses.
func (s Status) Valid() bool {
	return s == StatusPending || s == StatusFinal || s == StatusIncomplete
}

// Invocation is what the collector knows about one invocation: the running
// figures while it is open, the latest summary's once it is closed.
type Invocation struct {
	// ID is the invocation.id.
	ID string `json:"id"`
	// Tenant is the invocation's tenant (invocation.tenant), empty when
	// the collector's processor has no tenant setting. Invocations of
	// different tenants may share an ID; they never share a view.
	Tenant string `json:"tenant,omitempty"`
	// Session is the gen_ai.conversation.id of its root span; empty until
	// the root arrives.
	Session string `json:"session,omitempty"`
	// Agent is the gen_ai.agent.name of its root span.
	Agent string `json:"agent,omitempty"`
	// Service is the service.name of the root span's resource (of the first
	// span's while the root is missing).
	Service string `json:"service,omitempty"`
	// Status is pending while open, else the latest summary's status.
	Status Status `json:"status"`
	// Revision is 0 while open, else the latest summary's revision.
	Revision int64 `json:"revision"`
	// Started is the root span's start, or the earliest span start while
	// the root is missing (the agent's clock).
	Started time.Time `json:"started"`
	// ResultAt is the root span's end, when the caller got its result;
	// absent while the root is missing.
	ResultAt *time.Time `json:"result_at,omitempty"`
	// LastSeen is when the collector last indexed a span of it (open
	// invocations only; the collector's clock).
	LastSeen *time.Time `json:"last_seen,omitempty"`
	// ClosedAt is when the latest final or incomplete summary was made
	// (closed invocations only; the collector's clock).
	ClosedAt *time.Time `json:"closed_at,omitempty"`
	// Usage sums the model calls seen so far.
	Usage Usage `json:"usage"`
	// AfterResult is the part of Usage from model calls that started after
	// the root ended.
	AfterResult AfterResult `json:"after_result"`
	// Counts as in the summary span.
	ModelCalls     int64 `json:"model_calls"`
	BackgroundJobs int64 `json:"background_jobs"`
	Continuations  int64 `json:"continuations"`
	Spans          int64 `json:"spans"`
	// TraceIDs are the invocation's traces the collector can name: the
	// root's (or the first span's) first, then each continuation's.
	TraceIDs []string `json:"trace_ids"`
	// Reasons are the processor's incomplete reasons ("kind:detail"): what
	// blocks final while open, why it closed incomplete once closed. Empty
	// for a final invocation.
	Reasons []string `json:"reasons,omitempty"`
	// Anomalies are the summary's anomalies so far.
	Anomalies []string `json:"anomalies,omitempty"`
	// Waiting says what an open invocation waits on; nil once closed.
	Waiting *Waiting `json:"waiting,omitempty"`
	// Timeline holds its recorded spans; only GET
	// /v1/invocations/{id}?spans=1 answers with it (Client.Timeline).
	Timeline *Timeline `json:"timeline,omitempty"`
}

// Open reports whether the invocation has no final or incomplete summary
// yet.
func (inv Invocation) Open() bool { return inv.Status == StatusPending }

// Usage holds the five summed gen_ai.usage values.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	ReasoningOutputTokens    int64 `json:"reasoning_output_tokens"`
}

// AfterResult is usage from model calls that started after the root ended.
type AfterResult struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// Waiting is what an open invocation waits on before it can be final.
type Waiting struct {
	// RootMissing is true until the root span arrives.
	RootMissing bool `json:"root_missing,omitempty"`
	// MissingChildren lists, per parent span name, the child spans declared
	// (invocation.children) and not yet arrived. A background job still
	// running is one of these: its span is exported when it ends.
	MissingChildren []MissingChildren `json:"missing_children,omitempty"`
	// ExpectedFollowups lists the ended background jobs whose completion
	// notification has not been followed up yet (no continuation or
	// followup_closed span linking to them has arrived).
	ExpectedFollowups []ExpectedFollowup `json:"expected_followups,omitempty"`
	// RemoteSettling is set while spans handed to other processes may still
	// send children: nothing may arrive until Until for final.
	RemoteSettling *RemoteSettling `json:"remote_settling,omitempty"`
	// Unprovable lists counts that can never be proven met
	// (invalid_count:..., span_limit): the invocation will close incomplete.
	Unprovable []string `json:"unprovable,omitempty"`
	// OpenTimeoutAt is when the invocation closes incomplete with
	// open_timeout if it is still open (the collector's clock).
	OpenTimeoutAt time.Time `json:"open_timeout_at"`
	// Truncated counts entries left out of MissingChildren and
	// ExpectedFollowups to keep a view bounded (Owed keeps at most 32 and
	// a closed view's Waiting counts those it left out here).
	Truncated int `json:"truncated,omitempty"`
	// Owed lists everything the invocation is still owed, each with what
	// it waits for (CONTRACT.md v0.12, "Owed means everything owed"):
	// declared children, followups (also those a job arriving after the
	// invocation closed re-opened), detached spans, remote subtrees not
	// yet settled, and turns a wake span announced that have not ended.
	// A closed invocation's view carries a Waiting with only Owed when
	// something arrived after its close that it now owes.
	Owed []Owed `json:"owed,omitempty"`
}

// OwesWork reports whether the invocation waits on work its session still
// owes: anything in Owed (a child span not yet arrived, a job's followup,
// a detached span, a remote subtree settling, a running turn), or entries
// left out to keep the view bounded.
func (w *Waiting) OwesWork() bool {
	return w != nil && (len(w.Owed) > 0 || len(w.MissingChildren) > 0 || len(w.ExpectedFollowups) > 0 || w.Truncated > 0)
}

// Owed is one piece of work an invocation is owed.
type Owed struct {
	// Reason is "kind:span name": missing_children, open_followup,
	// missing_detached, remote_settling or running_turn, and the span
	// that waits.
	Reason string `json:"reason"`
	// Waits says what it waits for.
	Waits string `json:"waits"`
	// SpanID is the waiting span's ID (hex).
	SpanID string `json:"span_id"`
	// Missing is how many spans it still waits for (0 for a remote
	// subtree).
	Missing int `json:"missing,omitempty"`
	// Until is, for a remote subtree, when it settles if nothing else
	// arrives (the collector's clock).
	Until *time.Time `json:"until,omitempty"`
}

// RunningTurn reports whether the item is a turn a wake span announced
// that has not ended (running_turn:...).
func (o Owed) RunningTurn() bool { return strings.HasPrefix(o.Reason, "running_turn:") }

// MissingChildren is the child spans declared and not arrived under the
// spans of one name.
type MissingChildren struct {
	// Parent is the parent spans' name, e.g. "execute_tool shell".
	Parent string `json:"parent"`
	// Missing is how many children have not arrived, over all such
	// parents.
	Missing int `json:"missing"`
	// Parents is how many spans of that name wait for children.
	Parents int `json:"parents"`
}

// ExpectedFollowup is an ended background job whose followup has not
// arrived.
type ExpectedFollowup struct {
	// Job is the background span's name, e.g. "background shell".
	Job string `json:"job"`
	// SpanID is the background span's ID (hex).
	SpanID string `json:"span_id"`
	// Started and Ended are the job span's start and end (the agent's
	// clock).
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
	// AgeSeconds is how long ago the job started, when the answer was made.
	AgeSeconds float64 `json:"age_seconds"`
	// Missing is how many followups are still expected from it.
	Missing int `json:"missing"`
}

// RemoteSettling says how long remote subtrees still settle.
type RemoteSettling struct {
	// Spans are the names of the remote spans (at most a few).
	Spans []string `json:"spans"`
	// Until is the earliest time the invocation can be final if nothing
	// else arrives (the collector's clock).
	Until time.Time `json:"until"`
}

// InvocationList is one page of GET /v1/invocations.
type InvocationList struct {
	// Invocations are ordered by Started, oldest first, then by ID.
	Invocations []Invocation `json:"invocations"`
	// Total is how many invocations match the filter, over all pages.
	Total int `json:"total"`
	// NextPageToken, when not empty, fetches the next page
	// (page_token=...).
	NextPageToken string `json:"next_page_token,omitempty"`
}

// Session is GET /v1/sessions/{session}: whether a session still owes work
// to one of its invocations.
type Session struct {
	// Session is the gen_ai.conversation.id asked about.
	Session string `json:"session"`
	// Version is the session's watch version on the collector that
	// answered: it changes when the session appears or vanishes, when
	// OwesWork changes, when a turn the runtime started by itself begins
	// (a wake span arrived: an Owed running_turn appears) or an
	// unattributed turn joins it, and when one of its invocations turns
	// final or incomplete. 0 for a session the collector does not know. Pass it as
	// after to the next watch; Client.Watch keeps one per collector.
	Version uint64 `json:"version"`
	// OwesWork is true while one of the session's invocations, open or
	// closed, owes anything (Waiting.OwesWork): a host must not release
	// the session then. A session the collector does not know (404) is
	// unknown, not "owes nothing": Client.OwesWork reads it as owing.
	OwesWork bool `json:"owes_work"`
	// OpenInvocations are the session's open invocations, oldest first.
	OpenInvocations []Invocation `json:"open_invocations"`
	// Jobs are the ended background jobs whose followup the session still
	// owes, over all its open invocations, oldest first.
	Jobs []SessionJob `json:"jobs"`
	// ClosedInvocations are the IDs of the session's recently closed
	// invocations the collector still shows.
	ClosedInvocations []string `json:"closed_invocations"`
}

// SessionJob is an expected followup with the invocation it belongs to.
type SessionJob struct {
	InvocationID string `json:"invocation_id"`
	ExpectedFollowup
}

// Error is the body of every answer that is not 200.
type Error struct {
	Error string `json:"error"`
}
