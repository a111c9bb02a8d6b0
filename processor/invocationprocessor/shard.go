package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"container/heap"
	"math"
	"sync"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// shard owns the invocations whose id hashes to it. A load-balancing tier
// routing by invocation.id makes a collector own whole invocations in the
// same way. The bounds on open and closed invocations are global
// (bounds.go); a shard only keeps its invocations in age order for them,
// all together and per tenant (quota.go).
type shard struct {
	cfg    *ledgerConfig
	bounds *bounds

	// mu guards every field below: the invocation map, the open and closed
	// age lists, the timer heap, the touched scratch list, the outbox and
	// sendFailed. It is held while a batch's spans are indexed or timers
	// fire, never while a summary is handed to the next consumer.
	mu          sync.Mutex
	invs        map[string]*invocation
	open        invList // open invocations, oldest first
	closed      invList // closed invocations, earliest closed first
	timers      timerHeap
	touched     []*invocation
	gen         uint64
	outbox      []summary.Summary // made, not yet sent, in the order they were made
	outboxLimit int
	// resources shares resource attributes between invocations, names
	// span and agent names between retained ones.
	resources resourceCache
	names     nameCache
	// sendFailed is set when the last send of the outbox failed: batches
	// then leave the retry to the timer goroutine instead of rebuilding
	// the whole outbox for every batch.
	sendFailed bool
	// byTenant lists the shard's invocations of each tenant, open and
	// closed, in age order (quota.go).
	byTenant map[*tenantState]*tenantLists
	// closedIDs remembers the invocations forgotten before their
	// retention ended (closedids.go).
	closedIDs closedIDs
	// status receives the shard's invocation views (status.go); nil when
	// the processor has no status extension. Set in Start.
	status StatusSink

	// journal records the shard's locked sections (journal.go):
	// noJournal without storage. Set before any data; called under mu.
	journal shardJournal

	// sending is a one-slot semaphore held by the goroutine sending this
	// shard's outbox, so summaries reach the next consumer in the order they
	// were made. It is never acquired while mu is held; acquiring it can be
	// abandoned when a context ends.
	sending chan struct{}
}

func newShard(cfg *ledgerConfig, b *bounds, outboxLimit int) *shard {
	return &shard{
		cfg:         cfg,
		bounds:      b,
		invs:        make(map[string]*invocation),
		byTenant:    make(map[*tenantState]*tenantLists),
		outboxLimit: outboxLimit,
		journal:     noJournal{},
		sending:     make(chan struct{}, 1),
	}
}

// index indexes the shard's spans of a batch under its lock and reports
// whether summaries are waiting in its outbox.
func (s *shard) index(refs []indexRef, now int64, stats *stats) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.touched = s.touched[:0]
	s.journal.begin(s)
	// A batch's spans of one invocation usually come together: the last
	// invocation is reused without hashing its id again (nothing is
	// forgotten before the loop ends).
	var inv *invocation
	for i := range refs {
		r := &refs[i]
		if s.closedIDs.n > 0 && s.forgotten(r.id, now) {
			// v0.6 rule 6: passed on, not indexed, not journalled.
			stats.afterForget++
			continue
		}
		s.journal.fact(s, r, now, stats)
		if inv == nil || inv.ID != r.id {
			inv = s.ensure(r.id, now, stats)
		}
		switch inv.add(r.facts, r.res, &s.resources, &s.names, now, s.cfg) {
		case addIndexed:
			stats.indexed++
		case addIndexedUnrecorded:
			stats.indexed++
			stats.unrecorded++
		case addDuplicate:
			stats.duplicates++
		case addSpanLimit:
			stats.spanLimit++
		}
		s.touch(inv)
	}
	for _, inv := range s.touched {
		s.evaluate(inv, now, stats)
		if s.live(inv) {
			s.account(inv)
		}
	}
	s.publishOpen(s.touched, now)
	clear(s.touched)
	s.touched = s.touched[:0]
	s.journal.end(s, now)
	stats.outboxDropped += s.trimOutbox()
	return len(s.outbox) > 0
}

// trimOutbox drops the oldest waiting summaries beyond the bound and
// returns how many it dropped. mu must be held.
func (s *shard) trimOutbox() int64 {
	if len(s.outbox) <= s.outboxLimit {
		return 0
	}
	n := len(s.outbox) - s.outboxLimit
	s.outbox = append(s.outbox[:0], s.outbox[n:]...)
	return int64(n)
}

// stats collects what one locked section did, for telemetry recorded after
// the lock is released.
type stats struct {
	indexed, duplicates           int64
	spanLimit, evicted, forgotten int64
	afterForget, closedIDsDropped int64
	opened, closed                int64
	outboxDropped                 int64
	// owingForgotten counts closed invocations a bound forgot while they
	// still owed work (owes.go).
	owingForgotten int64
	// unrecorded counts spans indexed past status_spans (timeline.go).
	unrecorded int64
	// Evictions and forgettings by the byte budget, the tenant quotas
	// and memory pressure (bounds.go, shed.go).
	evictedBytes, forgottenBytes      int64
	evictedTenant, evictedTenantBytes int64
	shed                              int64
	delays                            []float64
	// delaysBuf holds the first delays, so a batch closing a few
	// invocations does not grow delays.
	delaysBuf [16]float64
}

// invList is an intrusive doubly linked list of invocations.
type invList struct {
	head, tail *invocation
	n          int
}

func (l *invList) pushBack(inv *invocation) {
	inv.index.prev, inv.index.next = l.tail, nil
	if l.tail != nil {
		l.tail.index.next = inv
	} else {
		l.head = inv
	}
	l.tail = inv
	l.n++
}

func (l *invList) remove(inv *invocation) {
	if inv.index.prev != nil {
		inv.index.prev.index.next = inv.index.next
	} else {
		l.head = inv.index.next
	}
	if inv.index.next != nil {
		inv.index.next.index.prev = inv.index.prev
	} else {
		l.tail = inv.index.prev
	}
	inv.index.prev, inv.index.next = nil, nil
	l.n--
}

// timerHeap orders invocations by their next due time (open_timeout,
// remote_settle, pending_delay or retention end).
type timerHeap []*invocation

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].index.due < h[j].index.due }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index.heapIdx = i
	h[j].index.heapIdx = j
}

func (h *timerHeap) Push(x any) {
	inv := x.(*invocation)
	inv.index.heapIdx = len(*h)
	*h = append(*h, inv)
}

func (h *timerHeap) Pop() any {
	old := *h
	n := len(old)
	inv := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	inv.index.heapIdx = -1
	return inv
}

func (s *shard) schedule(inv *invocation) {
	due := inv.nextDue(s.cfg)
	if inv.index.heapIdx >= 0 {
		if inv.index.due != due {
			inv.index.due = due
			heap.Fix(&s.timers, inv.index.heapIdx)
		}
		return
	}
	inv.index.due = due
	heap.Push(&s.timers, inv)
}

// retentionEnd is when a closed invocation is forgotten.
func (inv *invocation) retentionEnd(cfg *ledgerConfig) int64 {
	return satAdd(inv.LastSummary, cfg.retention)
}

// nextDue is when the invocation next needs attention from a timer.
func (inv *invocation) nextDue(cfg *ledgerConfig) int64 {
	if inv.Phase == phaseClosed {
		due := inv.retentionEnd(cfg)
		if inv.keptOwing {
			due = max(due, inv.owingRetentionEnd(cfg))
		}
		if inv.Dirty {
			due = min(due, inv.SettleDue(&cfg.graph))
		}
		return due
	}
	due := satAdd(inv.FirstArrival, cfg.openTimeout)
	if inv.obligationsMet() && inv.HasRemote {
		due = min(due, inv.SettleDue(&cfg.graph))
	}
	if inv.pendingOwed(cfg) {
		due = min(due, inv.pendingDue(cfg))
	}
	return due
}

// pendingOwed reports whether the open invocation is to get a pending
// summary, now or when pendingDue comes: its root arrived and none was
// emitted.
func (inv *invocation) pendingOwed(cfg *ledgerConfig) bool {
	return cfg.emitPending && inv.RootArrived && !inv.PendingSent
}

// pendingDue is when an owed pending summary is emitted: pending_delay
// after the root arrived, or as soon as the root arrived when the
// invocation is known to owe a background job's work (an ended job's
// followups, a turn a wake announced): that is what a pending is for, and
// out-of-order arrival alone never looks like it. The answer follows the
// graph, so a restart that replays the spans finds the same one.
func (inv *invocation) pendingDue(cfg *ledgerConfig) int64 {
	if cfg.pendingDelay > 0 && inv.OwesJobWork() {
		return inv.RootArrival
	}
	return satAdd(inv.RootArrival, cfg.pendingDelay)
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// ensure returns the invocation, opening it if it is not known. It never
// evicts: the global bound is enforced after the shard's lock is released.
func (s *shard) ensure(id string, now int64, stats *stats) *invocation {
	if inv, ok := s.invs[id]; ok {
		return inv
	}
	inv := newInvocation(id, now)
	inv.index.seq = s.bounds.seq.Add(1)
	s.bounds.open.Add(1)
	s.invs[id] = inv
	s.open.pushBack(inv)
	s.openTenant(inv)
	stats.opened++
	s.schedule(inv)
	return inv
}

// live reports whether inv is still the shard's invocation for its id: an
// invocation forgotten within a batch may have been re-created under the
// same id, and the stale object must not be touched again.
func (s *shard) live(inv *invocation) bool {
	return s.invs[inv.ID] == inv
}

// touch remembers that the invocation changed in the current batch.
func (s *shard) touch(inv *invocation) {
	if inv.index.touchedGen != s.gen {
		inv.index.touchedGen = s.gen
		s.touched = append(s.touched, inv)
	}
}

// evaluate decides, after a batch or a timer, whether the invocation's
// state calls for a summary, and reschedules its timer.
func (s *shard) evaluate(inv *invocation, now int64, stats *stats) {
	if !s.live(inv) {
		return // forgotten while the batch was indexed
	}
	switch inv.Phase {
	case phaseOpen:
		switch {
		case inv.SpanLimitHit:
			s.closeInvocation(inv, contract.StatusIncomplete, reasonSpanLimit, now, stats)
			return
		case inv.provable(now, s.cfg):
			// Final, or incomplete at once when tainted: waiting could not
			// make it final.
			s.closeInvocation(inv, inv.status(now, s.cfg), "", now, stats)
			return
		case now >= satAdd(inv.FirstArrival, s.cfg.openTimeout):
			inv.writeOff(now, s.cfg)
			s.closeInvocation(inv, contract.StatusIncomplete, contract.ReasonOpenTimeout, now, stats)
			return
		}
		// With pending_delay the pending waits for the timer (unless job
		// work is known to be owed): an invocation that closes before it
		// is due never gets one.
		if inv.pendingOwed(s.cfg) && now >= inv.pendingDue(s.cfg) {
			inv.PendingSent = true
			s.outbox = append(s.outbox, inv.snapshot(contract.StatusPending, 0, now, s.cfg))
		}
		s.schedule(inv)
	case phaseClosed:
		// A revision obeys the whole rule (v0.2 rule 4): while a remote
		// span settles none is emitted, unless retention ends first.
		if inv.Dirty && (!inv.obligationsMet() || inv.settled(now, s.cfg) || now >= inv.retentionEnd(s.cfg)) {
			s.revise(inv, now)
		}
		// Retention never makes a session owe less while work of it
		// runs: an invocation that owes work again after its close is
		// kept until open_timeout after its latest arrival.
		if !inv.Dirty && now >= inv.retentionEnd(s.cfg) {
			if now < inv.owingRetentionEnd(s.cfg) && inv.owesAfterClose(now, s.cfg) {
				inv.keptOwing = true
			} else {
				s.forget(inv)
				return
			}
		}
		s.schedule(inv)
	}
}

// revise emits the next revision of a closed invocation.
func (s *shard) revise(inv *invocation, now int64) {
	inv.Dirty = false
	inv.Revision++
	inv.LastSummary = now
	s.outbox = append(s.outbox, inv.snapshot(inv.status(now, s.cfg), inv.Revision, now, s.cfg))
	s.publishClosed(inv, now)
}

// closeInvocation emits the first final or incomplete summary (revision
// 1), keeps only what retention needs of the invocation's spans, and moves
// it to the closed list.
func (s *shard) closeInvocation(inv *invocation, status, forced string, now int64, stats *stats) {
	s.unaccount(inv) // from the open bytes; counted again, closed, below
	inv.Forced = forced
	inv.Phase = phaseClosed
	inv.Revision = 1
	inv.Dirty = false
	inv.LastSummary = now
	s.open.remove(inv)
	s.bounds.open.Add(-1)
	s.closeTenant(inv)
	stats.closed++
	if stats.delays == nil {
		stats.delays = stats.delaysBuf[:0]
	}
	stats.delays = append(stats.delays, float64(now-inv.LastDischarge)/1e9)
	s.outbox = append(s.outbox, inv.snapshot(status, 1, now, s.cfg))
	s.publishClosed(inv, now)
	inv.index.seq = s.bounds.seq.Add(1)
	s.closed.pushBack(inv)
	s.bounds.closed.Add(1)
	if s.cfg.retention <= 0 {
		s.forget(inv)
		return
	}
	inv.Shut()
	inv.dropJobTimes()
	s.names.shareNames(inv)
	s.account(inv)
	s.schedule(inv)
}

// forget drops an invocation: its retention ended or the global bound on
// closed invocations was reached.
func (s *shard) forget(inv *invocation) {
	s.journal.forget(s, inv)
	s.unaccount(inv)
	s.forgetTenant(inv)
	if inv.index.heapIdx >= 0 {
		heap.Remove(&s.timers, inv.index.heapIdx)
	}
	if inv.Phase == phaseClosed {
		s.closed.remove(inv)
		s.bounds.closed.Add(-1)
	} else {
		s.open.remove(inv)
		s.bounds.open.Add(-1)
	}
	delete(s.invs, inv.ID)
}

// forgotten reports whether id is of an invocation the shard no longer
// holds but whose fingerprint it remembers. mu must be held.
func (s *shard) forgotten(id string, now int64) bool {
	if _, held := s.invs[id]; held {
		return false
	}
	return s.closedIDs.remembered(fingerprint(id), now)
}

// rememberClosed remembers the id of a closed invocation whose record is
// forgotten before its retention ends (journalled). mu must be held.
func (s *shard) rememberClosed(id string, until, now int64) {
	if until <= now {
		return
	}
	s.rememberID(id, until)
	s.journal.remember(s, id, until)
}

// rememberID adds a fingerprint, counting it toward the global bound.
// mu must be held.
func (s *shard) rememberID(id string, until int64) {
	if s.closedIDs.add(fingerprint(id), until) {
		s.bounds.closedIDs.Add(1)
	}
}

// dropClosedID drops the shard's oldest remembered id (max_closed_invocations
// was exceeded).
func (s *shard) dropClosedID() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closedIDs.n == 0 {
		return false
	}
	s.closedIDs.dropOldest()
	s.bounds.closedIDs.Add(-1)
	return true
}

// tick fires every timer due at now.
func (s *shard) tick(now int64, stats *stats) {
	if n := s.closedIDs.expire(now); n > 0 {
		s.bounds.closedIDs.Add(-int64(n))
	}
	for len(s.timers) > 0 && s.timers[0].index.due <= now {
		inv := heap.Pop(&s.timers).(*invocation)
		s.evaluate(inv, now, stats)
	}
}

// shutdown summarises every open invocation incomplete with reason
// shutdown, and emits the revisions still owed by closed ones (status as
// the rule says at this moment: a settling one is incomplete).
func (s *shard) shutdown(now int64, stats *stats) {
	for s.open.head != nil {
		s.closeInvocation(s.open.head, contract.StatusIncomplete, contract.ReasonShutdown, now, stats)
	}
	for inv := s.closed.head; inv != nil; inv = inv.index.next {
		if inv.Dirty {
			s.revise(inv, now)
		}
	}
}
