package ledger

import (
	"time"
)

// This file is the ledger's retention: which invocations it holds, for
// how long. Open invocations are kept by creation, so that the oldest is
// the one evicted beyond WithMaxOpenInvocations and the first whose open
// timeout passes (one timer serves them all); closed ones by close time,
// and forgotten in that order once the retention passes.

// retention indexes the invocations a Ledger holds by id and keeps them
// in two lists: the open ones by creation, the closed ones by close time.
// It decides which to evict, time out and forget; the Ledger closes and
// forgets them. The Ledger's mutex guards it.
type retention struct {
	openTimeout time.Duration
	keep        time.Duration
	maxOpen     int

	byID         map[string]*Invocation
	open, closed invocationList
}

func newRetention(cfg Config) retention {
	return retention{
		openTimeout: cfg.OpenTimeout,
		keep:        cfg.Retention,
		maxOpen:     cfg.MaxOpenInvocations,
		byID:        make(map[string]*Invocation),
	}
}

// get returns the state of id, and false when it is not held.
func (r *retention) get(id string) (*Invocation, bool) {
	inv, ok := r.byID[id]
	return inv, ok
}

// full reports whether a new invocation must first evict the oldest open
// one.
func (r *retention) full() bool { return r.open.len() >= r.maxOpen }

// oldestOpen returns the open invocation created first, or nil.
func (r *retention) oldestOpen() *Invocation { return r.open.front() }

// add holds a new open invocation.
func (r *retention) add(inv *Invocation) {
	r.open.pushBack(inv)
	r.byID[inv.id] = inv
}

// markClosed moves inv, which closed at now, from the open to the closed
// list.
func (r *retention) markClosed(inv *Invocation, now time.Time) {
	r.open.remove(inv)
	inv.closedAt = now.UnixNano()
	r.closed.pushBack(inv)
}

// timedOut returns the oldest open invocation if its open timeout has
// passed at now, else nil.
func (r *retention) timedOut(now time.Time) *Invocation {
	if inv := r.open.front(); inv != nil && !r.deadline(inv).After(now) {
		return inv
	}
	return nil
}

// deadline is when inv's open timeout passes.
func (r *retention) deadline(inv *Invocation) time.Time {
	return time.Unix(0, inv.created).Add(r.openTimeout)
}

// expiredFront returns the oldest closed invocation if the retention has
// passed for it at now; else nil. The Ledger then forgets or requeues it.
func (r *retention) expiredFront(now time.Time) *Invocation {
	inv := r.closed.front()
	if inv == nil || now.Sub(time.Unix(0, inv.closedAt)) < r.keep {
		return nil
	}
	return inv
}

// forget unlists and unindexes a closed invocation.
func (r *retention) forget(inv *Invocation) {
	r.closed.remove(inv)
	delete(r.byID, inv.id)
	inv.forgotten = true
}

// requeue keeps a closed invocation for another retention period from
// now: it still holds work.
func (r *retention) requeue(inv *Invocation, now time.Time) {
	r.closed.remove(inv)
	inv.closedAt = now.UnixNano()
	r.closed.pushBack(inv)
}

// invocationList is a list of invocations linked through their prev and
// next fields; an invocation is in at most one list at a time.
type invocationList struct {
	head, tail *Invocation
	n          int
}

func (ls *invocationList) front() *Invocation { return ls.head }

func (ls *invocationList) len() int { return ls.n }

func (ls *invocationList) pushBack(inv *Invocation) {
	inv.prev, inv.next = ls.tail, nil
	if ls.tail != nil {
		ls.tail.next = inv
	} else {
		ls.head = inv
	}
	ls.tail = inv
	ls.n++
}

func (ls *invocationList) remove(inv *Invocation) {
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
