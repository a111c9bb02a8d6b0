package instrument

import (
	"context"

	"go.opentelemetry.io/otel/metric"

	"github.com/agentledger/agentledger/instrument/internal/ledger"
)

// Ledger keeps the running usage of invocations and decides their
// finality by the contract's rule from the spans that end in this
// process. It is fed by its SpanProcessor; get it with
// SpanProcessor.Ledger. Each arriving span costs constant work (plus a
// walk up its in-process ancestors to find a remote one). Memory is
// bounded: closed invocations are forgotten after the retention, at most
// WithMaxOpenInvocations stay open, and each keeps at most
// WithMaxSpansPerInvocation span IDs (beyond it the invocation can never
// be final: reason span_limit).
//
// The ledger never says final while a span of the invocation it saw
// start is still open and no count declares it (a background job, a
// continuation, an unattributed turn, a late child, a span of a new
// trace), and applies the v0.2 rules of CONTRACT.md: late children never
// discharge a count, a span discharges at most one followup per target,
// malformed parentage or links and reused span IDs fail closed, and a
// model call without usage makes the invocation incomplete.
//
// It is a thin handle on the ledger of instrument/internal/ledger, which
// holds the state and applies the rule; its answers are converted into
// the types of this package.
type Ledger struct {
	l *ledger.Ledger
}

func newLedger(cfg config, meter metric.Meter) *Ledger {
	return &Ledger{l: ledger.New(ledger.Config{
		Clock:              cfg.clock,
		RemoteSettle:       cfg.remoteSettle,
		OpenTimeout:        cfg.openTimeout,
		Retention:          cfg.retention,
		MaxOpenInvocations: cfg.maxOpenInvocations,
		MaxSpans:           cfg.maxSpans,
		ClosedRecords:      cfg.closedRecords,
	}, meter)}
}

// Usage returns the running usage of invocation id, and false when the
// ledger does not know it (never seen, or forgotten after retention).
func (l *Ledger) Usage(id string) (Usage, bool) {
	u, ok := l.l.Usage(id)
	return usageOf(u), ok
}

// Summary returns the current summary of invocation id without waiting,
// and false when the ledger does not know it.
func (l *Ledger) Summary(id string) (Summary, bool) {
	s, ok := l.l.Summary(id)
	return summaryOf(s), ok
}

// Wait blocks until invocation id is final or incomplete, or ctx ends; it
// then returns the summary (with ctx's error in the latter case).
//
// Wait never creates state: an id the ledger holds no state for is
// answered at once, from the record of invocations closed and forgotten
// after the retention (bounded by WithClosedRecords), or, when a Tracker
// started the invocation with a root span that was not sampled, as
// incomplete with reason not_sampled (nothing of it is observed, here or
// in the collector); otherwise with ErrUnknownInvocation. Wait on an
// invocation whose root was not sampled answers not_sampled at once even
// when some of its spans were sampled.
func (l *Ledger) Wait(ctx context.Context, id string) (Summary, error) {
	s, err := l.l.Wait(ctx, id)
	return summaryOf(s), err
}

// Session returns what session still owes its invocations.
func (l *Ledger) Session(session string) SessionState {
	st := l.l.Session(session)
	return SessionState{
		OwesWork:             st.OwesWork,
		OpenJobs:             jobsOf(st.OpenJobs),
		ExpectedFollowups:    jobsOf(st.ExpectedFollowups),
		RunningContinuations: st.RunningContinuations,
		UnattributedTurns:    st.UnattributedTurns,
		Owed:                 owedOf(st.Owed),
	}
}

func owedOf(items []ledger.OwedInfo) []Owed {
	if len(items) == 0 {
		return nil
	}
	out := make([]Owed, len(items))
	for i, o := range items {
		out[i] = Owed{InvocationID: o.InvocationID, Reason: o.Reason, Waits: o.Waits}
	}
	return out
}

// ErrUnknownInvocation is returned by Wait for an invocation the ledger
// has no record of: no span of it was seen, or it was forgotten after the
// retention and dropped from the bounded record of closed invocations
// (WithClosedRecords).
var ErrUnknownInvocation = ledger.ErrUnknownInvocation

func usageOf(u ledger.Usage) Usage {
	return Usage{
		InputTokens:              u.Input,
		OutputTokens:             u.Output,
		CacheReadInputTokens:     u.CacheRead,
		CacheCreationInputTokens: u.CacheCreation,
		ReasoningOutputTokens:    u.Reasoning,
		AfterResultInputTokens:   u.AfterInput,
		AfterResultOutputTokens:  u.AfterOutput,
		ModelCalls:               u.ModelCalls,
		BackgroundJobs:           u.BackgroundJobs,
		Continuations:            u.Continuations,
		Spans:                    u.Spans,
	}
}

func summaryOf(s ledger.Summary) Summary {
	return Summary{
		InvocationID: s.InvocationID,
		SessionID:    s.SessionID,
		Agent:        s.Agent,
		Status:       Status(s.Status),
		Reasons:      s.Reasons,
		Anomalies:    s.Anomalies,
		Revision:     s.Revision,
		Usage:        usageOf(s.Usage),
		TimeToFinal:  s.TimeToFinal,
	}
}

// jobsOf converts the ledger's jobs, nil for none.
func jobsOf(js []ledger.JobInfo) []JobInfo {
	if js == nil {
		return nil
	}
	out := make([]JobInfo, len(js))
	for i, j := range js {
		out[i] = JobInfo{InvocationID: j.InvocationID, SpanID: j.SpanID, Name: j.Name, Started: j.Started}
	}
	return out
}
