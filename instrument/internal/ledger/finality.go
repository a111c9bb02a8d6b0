package ledger

import (
	"math"
	"slices"
	"time"

	"github.com/agentledger/agentledger/contract"
)

// This file decides an invocation's status: its first close (final when
// the contract's conditions hold, incomplete on a timer or when a rule
// forbids final) and the revisions that spans arriving later cause. The
// conditions are the Graph's (internal/ledgerrule), as in the collector.

// evaluate closes inv when the contract's conditions hold (final, or
// incomplete when a rule forbids final), or schedules the settle timer.
// l.mu must be held.
func (l *Ledger) evaluate(inv *Invocation, now time.Time) {
	if inv.status != contract.StatusPending || !inv.obligations(now, &l.graph).Met() {
		return
	}
	if l.settleLater(inv, now, (*Ledger).evaluate) {
		return
	}
	if inv.obligations(now, &l.graph).Status() != contract.StatusFinal {
		l.closeLocked(inv, contract.StatusIncomplete, "", inv.reasons(now, &l.graph), now)
		return
	}
	l.closeLocked(inv, contract.StatusFinal, "", nil, now)
}

// settleLater reports whether inv's remote subtrees are still settling at
// now; it then schedules then for when they are quiet. l.mu must be held.
func (l *Ledger) settleLater(inv *Invocation, now time.Time, then func(*Ledger, *Invocation, time.Time)) bool {
	if inv.g.Settled(now.UnixNano(), &l.graph) {
		return false
	}
	wait := time.Unix(0, inv.g.SettleDue(&l.graph)).Sub(now)
	if wait <= 0 {
		return false
	}
	if inv.settleTimer != nil {
		inv.settleTimer.Stop()
	}
	inv.settleTimer = l.clock.AfterFunc(wait, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		then(l, inv, l.clock.Now())
	})
	return true
}

// revise emits the revision a span arriving after the close owes (rule
// 4): final only when every condition holds, remote settle included; while
// the obligations are met but a remote subtree settles, the latest
// summary stands; otherwise incomplete at once. l.mu must be held.
func (l *Ledger) revise(inv *Invocation, now time.Time) {
	if !inv.g.Dirty || l.down {
		return
	}
	if inv.obligations(now, &l.graph).Met() && l.settleLater(inv, now, (*Ledger).revise) {
		return
	}
	inv.g.Dirty = false
	inv.revision++
	if inv.obligations(now, &l.graph).Status() == contract.StatusFinal {
		inv.status = contract.StatusFinal
		inv.emitted = inv.summary(inv.status, inv.revision, nil)
		return
	}
	inv.status = contract.StatusIncomplete
	reasons := inv.reasons(now, &l.graph)
	if inv.forced != "" && !slices.Contains(reasons, inv.forced) {
		reasons = append([]string{inv.forced}, reasons...)
	}
	inv.emitted = inv.summary(inv.status, inv.revision, reasons)
}

// closeForced closes inv incomplete before its conditions hold, for
// reason (open_timeout, evicted, shutdown, span_limit), listing what is
// still open at now. l.mu must be held.
func (l *Ledger) closeForced(inv *Invocation, reason string, now time.Time) {
	reasons := inv.reasons(now, &l.graph)
	if !slices.Contains(reasons, reason) {
		reasons = append([]string{reason}, reasons...)
	}
	l.closeLocked(inv, contract.StatusIncomplete, reason, reasons, now)
}

// closeLocked gives inv its first final or incomplete summary (revision
// 1) at now; forced is the reason that closed it early, or "". l.mu must
// be held.
func (l *Ledger) closeLocked(inv *Invocation, status, forced string, reasons []string, now time.Time) {
	if inv.status != contract.StatusPending {
		return
	}
	inv.status = status
	inv.forced = forced
	inv.revision = 1
	inv.emitted = inv.summary(status, 1, reasons)
	l.usual = usualSize{spans: int(min(inv.g.Indexed, math.MaxInt32)), calls: int(min(inv.g.ModelCalls, maxUsualCalls))}
	inv.g.Shut()
	if inv.settleTimer != nil {
		inv.settleTimer.Stop()
	}
	l.held.markClosed(inv, now)
	if inv.done != nil {
		close(inv.done)
	}
}
