package instrument

import (
	"context"
	"time"

	"github.com/agentledger/agentledger/contract"
)

// This file is the ledger's retention: which invocations it holds, for
// how long. Open invocations are kept by creation, so that the oldest is
// the one evicted beyond WithMaxOpenInvocations and the first whose open
// timeout passes (one timer serves them all); closed ones by close time,
// and forgotten in that order once the retention passes.

// invocationList is a list of invocations linked through their prev and
// next fields; an invocation is in at most one list at a time.
type invocationList struct {
	head, tail *invocationState
	n          int
}

func (ls *invocationList) front() *invocationState { return ls.head }

func (ls *invocationList) len() int { return ls.n }

func (ls *invocationList) pushBack(inv *invocationState) {
	inv.prev, inv.next = ls.tail, nil
	if ls.tail != nil {
		ls.tail.next = inv
	} else {
		ls.head = inv
	}
	ls.tail = inv
	ls.n++
}

func (ls *invocationList) remove(inv *invocationState) {
	if inv.prev != nil {
		inv.prev.next = inv.next
	} else {
		ls.head = inv.next
	}
	if inv.next != nil {
		inv.next.prev = inv.prev
	} else {
		ls.tail = inv.prev
	}
	inv.prev, inv.next = nil, nil
	ls.n--
}

// lookup returns the state of id, creating it at now (and evicting the
// oldest open invocation beyond the limit) when needed. l.mu must be
// held.
func (l *Ledger) lookup(id string, now time.Time) *invocationState {
	if inv, ok := l.invs[id]; ok {
		return inv
	}
	for l.open.len() >= l.maxOpen {
		l.evictedCount.Add(context.Background(), 1)
		l.closeLocked(l.open.front(), contract.StatusIncomplete, contract.ReasonEvicted, []string{contract.ReasonEvicted}, now)
	}
	inv := newInvocationState(id, now)
	l.open.pushBack(inv)
	l.invs[id] = inv
	l.armTimeout(now)
	return inv
}

// armTimeout sets the open-timeout timer for the oldest open invocation
// unless it is set. The timer of an invocation that closed before its
// timeout fires all the same and moves on to the next. l.mu must be held.
func (l *Ledger) armTimeout(now time.Time) {
	oldest := l.open.front()
	if l.timeout != nil || oldest == nil || l.down {
		return
	}
	l.timeout = l.clock.AfterFunc(oldest.created.Add(l.openTimeout).Sub(now), l.timedOut)
}

// timedOut closes, incomplete with open_timeout, every open invocation
// whose open timeout has passed, oldest first.
func (l *Ledger) timedOut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.timeout = nil
	if l.down {
		return
	}
	now := l.clock.Now()
	for inv := l.open.front(); inv != nil && !inv.created.Add(l.openTimeout).After(now); inv = l.open.front() {
		l.closeForced(inv, contract.ReasonOpenTimeout, now)
	}
	l.armTimeout(now)
}

// sweep forgets closed invocations older than the retention. l.mu must be
// held.
func (l *Ledger) sweep(now time.Time) {
	for inv := l.closed.front(); inv != nil; inv = l.closed.front() {
		if now.Sub(inv.closedAt) < l.retention {
			return
		}
		l.closed.remove(inv)
		l.forget(inv)
	}
}

// forget drops every trace of inv but its summary, which goes to the
// bounded record a late Wait answers from. l.mu must be held.
func (l *Ledger) forget(inv *invocationState) {
	inv.forgotten = true
	delete(l.invs, inv.id)
	if l.record.add(l.summaryLocked(inv)) {
		l.recordDropped.Add(context.Background(), 1)
	}
	l.sessions.remove(inv)
	for i := range inv.nodes.list {
		if n := &inv.nodes.list[i]; n.background {
			delete(l.background, n.sid)
		}
	}
	for sid := range inv.openJobs {
		delete(l.background, sid)
	}
}
