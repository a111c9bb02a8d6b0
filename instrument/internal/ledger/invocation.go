package ledger

import (
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/clock"
	"github.com/agentledger/agentledger/internal/ledgerrule"
)

// Reason kinds of the in-process ledger besides the contract's.
const (
	// reasonInvalidCount: an invocation.children or invocation.followups
	// that cannot be proven (CONTRACT.md, v0.1 clarifications).
	reasonInvalidCount = ledgerrule.ReasonInvalidCount
	// reasonSpanLimit: the invocation reached WithMaxSpansPerInvocation;
	// spans beyond it are not indexed, so its totals cannot be proven.
	reasonSpanLimit = ledgerrule.ReasonSpanLimit
	// reasonOpenSpan: a span the ledger saw start and no count declares
	// (a job, a continuation, a late child, a span of a new trace) has not
	// ended.
	reasonOpenSpan = "open_span"
)

// Invocation is one invocation in the ledger: its Graph, which the
// contract's one rule (internal/ledgerrule) keeps exactly as the
// collector's processor does, and what only the process can see: the
// spans seen to start and not yet ended (contract rule 6), the session,
// timers and the summary emitted. The Ledger's mutex guards it.
type Invocation struct {
	id, session, agent string
	// g is the invocation as the finality rule sees it.
	g ledgerrule.Graph
	// prev and next link it in the ledger's open or closed list;
	// sessionPrev and sessionNext among its session's invocations.
	prev, next               *Invocation
	sessionPrev, sessionNext *Invocation
	// created is when the ledger first saw a span of it (its open
	// timeout counts from there), closedAt when it closed; Unix
	// nanoseconds of the ledger's clock.
	created, closedAt int64

	// openJobs are the background spans started and not yet ended.
	openJobs map[trace.SpanID]JobInfo
	// runningConts and unended are the spans seen to start, not yet
	// ended, that no count declares: continuations, and by name the
	// others (jobs launched with no open span, late children, spans of a
	// new trace, followup_closed). The invocation is not final while any
	// runs (contract rule 6). These maps are made when first needed.
	runningConts map[trace.SpanID]struct{}
	unended      map[trace.SpanID]string

	// done is closed at the first close; made by the first Wait.
	done        chan struct{}
	settleTimer clock.Timer
	// status is that of the latest summary; pending until the first
	// close. emitted is the latest final or incomplete summary, revision
	// its number, forced the reason that closed it early ("" when its
	// conditions held). g.Dirty says whether a span arrived since (a
	// revision is owed).
	status   string
	forced   string
	emitted  Summary
	revision int

	// forgotten: the retention dropped it; a SpanProcessor's record may
	// still point at it.
	forgotten bool
	// unattributedRunning is set while the root of an unattributed turn
	// runs (started, not yet ended).
	unattributedRunning bool
	inSession           bool
	// keptOwing is set while the retention keeps it because it still
	// holds work; writtenOff, while what its open timeout wrote off is in
	// Ledger.writtenOff (owes.go).
	keptOwing, writtenOff bool
}

// newInvocation returns the state of invocation id, first seen at
// now.
func newInvocation(id string, now time.Time) *Invocation {
	inv := &Invocation{id: id, created: now.UnixNano(), status: contract.StatusPending}
	inv.g.Init(now.UnixNano())
	return inv
}

// fail records a reason that forbids final, once; a closed invocation
// owes a revision.
func (inv *Invocation) fail(kind, detail string) { inv.g.Taint(kind + ":" + detail) }

func (inv *Invocation) anomaly(kind, detail string) { inv.g.AddAnomaly(kind + ":" + detail) }

// running reports whether a span no count declares is still open.
func (inv *Invocation) running() bool {
	return len(inv.runningConts) > 0 || len(inv.unended) > 0 || inv.unattributedRunning
}

// obligations reduces inv at now to the terms of the finality rule: its
// Graph's, with the spans seen to start and not yet ended as one more
// open obligation.
func (inv *Invocation) obligations(now time.Time, cfg *ledgerrule.GraphConfig) ledgerrule.Obligations {
	extra := 0
	if inv.running() {
		extra = 1
	}
	return inv.g.Obligations(now.UnixNano(), extra, cfg)
}

// reasons lists what keeps inv from final at now (Graph.Reasons, with the
// spans still running).
func (inv *Invocation) reasons(now time.Time, cfg *ledgerrule.GraphConfig) []string {
	var extra []string
	for _, name := range inv.unended {
		extra = append(extra, reasonOpenSpan+":"+name)
	}
	if len(inv.runningConts) > 0 {
		extra = append(extra, reasonOpenSpan+":"+contract.SpanNameContinuationPrefix)
	}
	return inv.g.Reasons(now.UnixNano(), cfg, extra...)
}

// summary returns inv's summary with the given status, revision and
// reasons.
func (inv *Invocation) summary(status string, revision int, reasons []string) Summary {
	g := &inv.g
	s := Summary{
		InvocationID: inv.id,
		SessionID:    inv.session,
		Agent:        inv.agent,
		Status:       status,
		Reasons:      reasons,
		Revision:     revision,
		Usage:        inv.usage(),
		Anomalies:    g.AnomaliesFor(status == contract.StatusFinal),
	}
	if g.RootArrived && g.LatestEnd > g.RootEnd {
		s.TimeToFinal = time.Duration(g.LatestEnd - g.RootEnd)
	}
	return s
}

// usage is inv's usage so far.
func (inv *Invocation) usage() Usage {
	g := &inv.g
	return Usage{
		Usage: g.Usage, AfterInput: g.AfterInput, AfterOutput: g.AfterOutput,
		ModelCalls: g.ModelCalls, BackgroundJobs: g.BackgroundJobs, Continuations: g.Continuations,
		Spans: g.Indexed,
	}
}

// arrive applies one ended span's facts at now through the Graph, then
// what only the process tracks: the span no longer runs.
func (inv *Invocation) arrive(s sdktrace.ReadOnlySpan, f *Facts, now time.Time, cfg *ledgerrule.GraphConfig) ledgerrule.Outcome {
	res := inv.g.Arrive(&f.Span, now.UnixNano(), cfg)
	if res.Outcome != ledgerrule.Indexed {
		return res.Outcome
	}
	sid := s.SpanContext().SpanID()
	switch f.Role {
	case ledgerrule.RoleRoot:
		if res.Root {
			inv.unattributedRunning = false
		}
	case ledgerrule.RoleContinuation:
		delete(inv.runningConts, sid)
	case ledgerrule.RoleBackground:
		delete(inv.openJobs, sid)
	}
	if len(inv.unended) > 0 {
		delete(inv.unended, sid)
	}
	return res.Outcome
}
