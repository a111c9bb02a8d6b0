package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// tenantLists are one tenant's invocations in a shard: open ones oldest
// first, closed ones earliest closed first. An invocation is in exactly
// one of them, linked through index.tprev and index.tnext.
type tenantLists struct {
	open, closed tenantList
}

// tenantList is an intrusive doubly linked list over index.tprev/tnext.
type tenantList struct {
	head, tail *invocation
}

func (l *tenantList) pushBack(inv *invocation) {
	inv.index.tprev, inv.index.tnext = l.tail, nil
	if l.tail != nil {
		l.tail.index.tnext = inv
	} else {
		l.head = inv
	}
	l.tail = inv
}

func (l *tenantList) remove(inv *invocation) {
	if inv.index.tprev != nil {
		inv.index.tprev.index.tnext = inv.index.tnext
	} else {
		l.head = inv.index.tnext
	}
	if inv.index.tnext != nil {
		inv.index.tnext.index.tprev = inv.index.tprev
	} else {
		l.tail = inv.index.tprev
	}
	inv.index.tprev, inv.index.tnext = nil, nil
}

// lists returns the shard's lists of the tenant, creating them. mu must
// be held.
func (s *shard) lists(ts *tenantState) *tenantLists {
	l, ok := s.byTenant[ts]
	if !ok {
		l = &tenantLists{}
		s.byTenant[ts] = l
	}
	return l
}

// openTenant counts a new open invocation toward its tenant. mu must be
// held.
func (s *shard) openTenant(inv *invocation) {
	tenant, _ := summary.SplitKey(inv.ID)
	ts := s.bounds.tenant(tenant)
	inv.index.tenant = ts
	ts.open.Add(1)
	s.lists(ts).open.pushBack(inv)
}

// closeTenant moves a closing invocation to its tenant's closed list.
// mu must be held.
func (s *shard) closeTenant(inv *invocation) {
	ts := inv.index.tenant
	l := s.lists(ts)
	l.open.remove(inv)
	ts.open.Add(-1)
	l.closed.pushBack(inv)
	ts.closed.Add(1)
}

// forgetTenant removes a forgotten invocation from its tenant's lists.
// mu must be held.
func (s *shard) forgetTenant(inv *invocation) {
	ts := inv.index.tenant
	l := s.lists(ts)
	if inv.Phase == phaseClosed {
		l.closed.remove(inv)
		ts.closed.Add(-1)
	} else {
		l.open.remove(inv)
		ts.open.Add(-1)
	}
	// The emptied lists stay: tenants are few (bounds.tenant), and a
	// tenant's next invocation reuses them.
}

// account brings the bounds' byte counts up to the invocation's current
// estimate. mu must be held.
func (s *shard) account(inv *invocation) {
	n := inv.approxBytes()
	s.addBytes(inv, n-inv.index.bytes)
	inv.index.bytes = n
}

// unaccount removes the invocation's bytes from the counts (it is closing
// or forgotten). mu must be held.
func (s *shard) unaccount(inv *invocation) {
	s.addBytes(inv, -inv.index.bytes)
	inv.index.bytes = 0
}

func (s *shard) addBytes(inv *invocation, d int64) {
	if d == 0 {
		return
	}
	ts := inv.index.tenant
	if inv.Phase == phaseClosed {
		s.bounds.closedBytes.Add(d)
		ts.closedBytes.Add(d)
		return
	}
	s.bounds.openBytes.Add(d)
	ts.openBytes.Add(d)
}

// accountAll estimates every invocation of the shard, after a load from
// storage replayed them.
func (s *shard) accountAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, inv := range s.invs {
		s.account(inv)
	}
}

// oldestOf returns the sequence number of the tenant's oldest open (or
// earliest closed) invocation in the shard.
func (s *shard) oldestOf(ts *tenantState, ph phase) (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	inv := s.headOf(ts, ph)
	if inv == nil {
		return 0, false
	}
	return inv.index.seq, true
}

// headOf returns the tenant's oldest open or earliest closed invocation
// in the shard. mu must be held.
func (s *shard) headOf(ts *tenantState, ph phase) *invocation {
	l, ok := s.byTenant[ts]
	if !ok {
		return nil
	}
	if ph == phaseClosed {
		return l.closed.head
	}
	return l.open.head
}

// evictOpen closes the tenant's oldest open invocation in the shard
// incomplete with reason evicted, if it is still the one numbered seq.
func (s *shard) evictOpen(ts *tenantState, seq uint64, now int64, stats *stats) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	inv := s.headOf(ts, phaseOpen)
	if inv == nil || inv.index.seq != seq {
		return false
	}
	s.journal.begin(s)
	s.closeInvocation(inv, contract.StatusIncomplete, contract.ReasonEvicted, now, stats)
	s.journal.end(s, now)
	stats.outboxDropped += s.trimOutbox()
	return true
}

// forgetClosed forgets the tenant's earliest closed invocation in the
// shard, if it is still the one numbered seq. A revision it still owes is
// emitted first; its fingerprint is remembered until its retention ends.
func (s *shard) forgetClosed(ts *tenantState, seq uint64, now int64, stats *stats) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	inv := s.headOf(ts, phaseClosed)
	if inv == nil || inv.index.seq != seq {
		return false
	}
	s.journal.begin(s)
	if inv.Dirty {
		s.revise(inv, now)
	}
	if inv.owesAfterClose(now, s.cfg) {
		// Its session's view loses what it owed: the status API then
		// says the invocation is unknown, which a host reads as owing.
		stats.owingForgotten++
	}
	s.forget(inv)
	s.rememberClosed(inv.ID, inv.retentionEnd(s.cfg), now)
	s.journal.end(s, now)
	stats.outboxDropped += s.trimOutbox()
	return true
}
