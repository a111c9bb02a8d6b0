package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// This file answers questions about invocations: their usage, their
// summary now, or once they close (Wait).

// summaryLocked returns inv's current summary: its open state while
// pending, else the latest final or incomplete summary. l.mu must be held.
func (l *Ledger) summaryLocked(inv *Invocation) Summary {
	if inv.status == contract.StatusPending {
		return inv.summary(contract.StatusPending, 0, inv.reasons(l.clock.Now(), &l.graph))
	}
	s := inv.emitted
	s.Reasons = slices.Clone(s.Reasons)
	s.Anomalies = slices.Clone(s.Anomalies)
	return s
}

// Usage returns the running usage of invocation id, and false when the
// ledger does not know it (never seen, or forgotten after retention).
func (l *Ledger) Usage(id string) (Usage, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(l.clock.Now())
	inv, ok := l.held.get(id)
	if !ok {
		return Usage{}, false
	}
	return inv.usage(), true
}

// Summary returns the current summary of invocation id without waiting,
// and false when the ledger does not know it.
func (l *Ledger) Summary(id string) (Summary, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(l.clock.Now())
	inv, ok := l.held.get(id)
	if !ok {
		return Summary{}, false
	}
	return l.summaryLocked(inv), true
}

// ErrUnknownInvocation is returned by Wait for an invocation the ledger
// has no record of: no span of it was seen, or it was forgotten after the
// retention and dropped from the bounded record of closed invocations
// (WithClosedRecords).
var ErrUnknownInvocation = errors.New("instrument: unknown invocation")

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
	l.mu.Lock()
	inv, ok := l.held.get(id)
	if !l.down {
		now := l.clock.Now()
		l.sweep(now)
		inv, ok = l.held.get(id)
		if ok && notSampled(id) {
			l.closeLocked(inv, contract.StatusIncomplete, contract.ReasonNotSampled, []string{contract.ReasonNotSampled}, now)
		}
	}
	if !ok {
		rec, recorded := l.record.get(id)
		l.mu.Unlock()
		switch {
		case recorded:
			return rec, nil
		case notSampled(id):
			return Summary{InvocationID: id, Status: contract.StatusIncomplete, Revision: 1,
				Reasons: []string{contract.ReasonNotSampled}}, nil
		case l.down:
			return Summary{}, ErrLedgerShutdown
		}
		return Summary{}, fmt.Errorf("%w %s", ErrUnknownInvocation, id)
	}
	if l.down {
		s := l.summaryLocked(inv)
		l.mu.Unlock()
		if s.Status == contract.StatusPending {
			return s, ErrLedgerShutdown
		}
		return s, nil
	}
	if inv.status != contract.StatusPending {
		defer l.mu.Unlock()
		return l.summaryLocked(inv), nil
	}
	// The channel is made by the first waiter and closed at the close.
	if inv.done == nil {
		inv.done = make(chan struct{})
	}
	done := inv.done
	l.mu.Unlock()
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil && inv.status == contract.StatusPending {
		return l.summaryLocked(inv), fmt.Errorf("instrument: waiting for invocation %s: %w", id, err)
	}
	return l.summaryLocked(inv), nil
}

// Session returns what session still owes its invocations.
func (l *Ledger) Session(session string) SessionState {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(l.clock.Now())
	var st SessionState
	now := l.clock.Now()
	for inv := l.sessions.first[session]; inv != nil; inv = inv.sessionNext {
		for _, j := range inv.openJobs {
			st.OpenJobs = append(st.OpenJobs, j)
		}
		for _, o := range l.owed(inv, now) {
			st.Owed = append(st.Owed, OwedInfo{InvocationID: inv.id, Reason: o.Reason(), Waits: o.Waits()})
			if o.Kind == contract.ReasonOpenFollowup {
				st.ExpectedFollowups = append(st.ExpectedFollowups,
					JobInfo{InvocationID: inv.id, SpanID: trace.SpanID(o.SpanID), Name: o.Span})
			}
		}
		st.RunningContinuations += len(inv.runningConts)
		if inv.unattributedRunning {
			st.UnattributedTurns++
		}
	}
	byID := func(js []JobInfo) {
		sort.Slice(js, func(i, j int) bool {
			if js[i].InvocationID != js[j].InvocationID {
				return js[i].InvocationID < js[j].InvocationID
			}
			return js[i].SpanID.String() < js[j].SpanID.String()
		})
	}
	for _, id := range l.forgotten.bySession[session] {
		st.Owed = append(st.Owed, OwedInfo{InvocationID: id, Reason: ReasonOwingForgotten + ":" + id,
			Waits: "an invocation the ledger forgot while it held work (more than WithMaxOpenInvocations were kept): its jobs' spans"})
	}
	byID(st.OpenJobs)
	byID(st.ExpectedFollowups)
	sort.SliceStable(st.Owed, func(i, j int) bool { return st.Owed[i].InvocationID < st.Owed[j].InvocationID })
	st.OwesWork = len(st.OpenJobs) > 0 || len(st.ExpectedFollowups) > 0 || st.RunningContinuations > 0 ||
		st.UnattributedTurns > 0 || len(st.Owed) > 0
	return st
}
