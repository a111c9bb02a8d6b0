package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"container/heap"
	"math"
	"sync"

	"github.com/agentledger/agentledger/internal/contract"
)

// shard owns the invocations whose id hashes to it. A load-balancing tier
// routing by invocation.id makes a collector own whole invocations in the
// same way.
type shard struct {
	// mu guards every field below: the invocation map, the open and closed
	// age lists, the timer heap, the caps' counters and the touched scratch
	// list. It is held while a batch's spans are indexed or timers fire,
	// never while a summary is handed to the next consumer.
	mu      sync.Mutex
	invs    map[string]*invocation
	open    invList // open invocations, oldest first arrival first
	closed  invList // closed invocations, earliest closed first
	timers  timerHeap
	cap     int // open invocations allowed; the same number of closed ones are retained
	touched []*invocation
	gen     uint64
	outbox  []summary // made, not yet sent, in the order they were made

	// sendMu is held by the one goroutine sending this shard's outbox, so
	// summaries reach the next consumer in the order they were made. It is
	// never taken while mu is held.
	sendMu sync.Mutex
}

// outboxSlack is how many summaries beyond the shard's capacity may wait
// for a slow or failing next consumer before the oldest are dropped.
const outboxSlack = 1024

// trimOutbox drops the oldest waiting summaries beyond the bound and
// returns how many it dropped. mu must be held.
func (s *shard) trimOutbox() int64 {
	limit := s.cap + outboxSlack
	if len(s.outbox) <= limit {
		return 0
	}
	n := len(s.outbox) - limit
	s.outbox = append(s.outbox[:0], s.outbox[n:]...)
	return int64(n)
}

func newShard(capacity int) *shard {
	return &shard{invs: make(map[string]*invocation), cap: capacity}
}

// stats collects what one locked section did, for telemetry recorded after
// the lock is released.
type stats struct {
	indexed, duplicates           int64
	spanLimit, evicted, forgotten int64
	opened, closed                int64
	outboxDropped                 int64
	delays                        []float64
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
// remote_settle or retention end).
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

func (s *shard) schedule(inv *invocation, due int64) {
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

// nextDue is when the invocation next needs attention from a timer.
func (inv *invocation) nextDue(cfg *ledgerConfig) int64 {
	if inv.Phase == phaseClosed {
		return satAdd(inv.LastSummary, cfg.retention)
	}
	due := satAdd(inv.FirstArrival, cfg.openTimeout)
	if inv.obligationsMet() && inv.HasRemote {
		due = min(due, satAdd(inv.LastArrival, cfg.settle))
	}
	return due
}

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// get returns the invocation, creating it (and evicting the oldest open one
// when the shard is full) if it is not known.
func (s *shard) get(id string, now int64, cfg *ledgerConfig, st *stats, out *[]summary) *invocation {
	if inv, ok := s.invs[id]; ok {
		return inv
	}
	if s.open.n >= s.cap && s.open.head != nil {
		st.evicted++
		*out = append(*out, s.closeInvocation(s.open.head, contract.StatusIncomplete, contract.ReasonEvicted, now, cfg, st))
	}
	inv := newInvocation(id, now)
	s.invs[id] = inv
	s.open.pushBack(inv)
	st.opened++
	s.schedule(inv, inv.nextDue(cfg))
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
func (s *shard) evaluate(inv *invocation, now int64, cfg *ledgerConfig, st *stats, out *[]summary) {
	if !s.live(inv) {
		return // forgotten (capacity) while the batch was indexed
	}
	switch inv.Phase {
	case phaseOpen:
		switch {
		case inv.SpanLimitHit:
			*out = append(*out, s.closeInvocation(inv, contract.StatusIncomplete, reasonSpanLimit, now, cfg, st))
			return
		case inv.obligationsMet() && inv.settled(now, cfg):
			*out = append(*out, s.closeInvocation(inv, contract.StatusFinal, "", now, cfg, st))
			return
		case now >= satAdd(inv.FirstArrival, cfg.openTimeout):
			*out = append(*out, s.closeInvocation(inv, contract.StatusIncomplete, contract.ReasonOpenTimeout, now, cfg, st))
			return
		}
		if inv.RootArrived && !inv.PendingSent && cfg.emitPending {
			inv.PendingSent = true
			*out = append(*out, inv.snapshot(contract.StatusPending, 0, now, cfg))
		}
		s.schedule(inv, inv.nextDue(cfg))
	case phaseClosed:
		if inv.Dirty {
			inv.Dirty = false
			inv.Revision++
			inv.LastSummary = now
			status := contract.StatusIncomplete
			if inv.obligationsMet() {
				status = contract.StatusFinal
			}
			*out = append(*out, inv.snapshot(status, inv.Revision, now, cfg))
		}
		if now >= inv.nextDue(cfg) {
			s.forget(inv)
			return
		}
		s.schedule(inv, inv.nextDue(cfg))
	}
}

// closeInvocation emits the first final or incomplete summary (revision 1)
// and moves the invocation to the closed list for retention.
func (s *shard) closeInvocation(inv *invocation, status, forced string, now int64, cfg *ledgerConfig, st *stats) summary {
	inv.Forced = forced
	inv.Phase = phaseClosed
	inv.Revision = 1
	inv.Dirty = false
	inv.LastSummary = now
	s.open.remove(inv)
	st.closed++
	st.delays = append(st.delays, float64(now-inv.LastDischarge)/1e9)
	sum := inv.snapshot(status, 1, now, cfg)
	s.closed.pushBack(inv)
	for s.closed.n > s.cap {
		st.forgotten++
		s.forget(s.closed.head)
	}
	if s.live(inv) {
		if cfg.retention <= 0 {
			s.forget(inv)
		} else {
			s.schedule(inv, inv.nextDue(cfg))
		}
	}
	return sum
}

// forget drops a closed invocation: its retention ended or the shard holds
// too many closed invocations.
func (s *shard) forget(inv *invocation) {
	if inv.index.heapIdx >= 0 {
		heap.Remove(&s.timers, inv.index.heapIdx)
	}
	if inv.Phase == phaseClosed {
		s.closed.remove(inv)
	} else {
		s.open.remove(inv)
	}
	delete(s.invs, inv.ID)
}

// tick fires every timer due at now.
func (s *shard) tick(now int64, cfg *ledgerConfig, st *stats, out *[]summary) {
	for len(s.timers) > 0 && s.timers[0].index.due <= now {
		inv := heap.Pop(&s.timers).(*invocation)
		s.evaluate(inv, now, cfg, st, out)
	}
}

// shutdown summarises every open invocation incomplete with reason shutdown.
func (s *shard) shutdown(now int64, cfg *ledgerConfig, st *stats, out *[]summary) {
	for s.open.head != nil {
		*out = append(*out, s.closeInvocation(s.open.head, contract.StatusIncomplete, contract.ReasonShutdown, now, cfg, st))
	}
}
