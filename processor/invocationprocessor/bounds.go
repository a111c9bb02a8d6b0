package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"math"
	"sync"
	"sync/atomic"
)

// bounds holds the processor's bounds for the whole processor, whatever
// the number of shards: max_open_invocations and max_open_bytes over the
// open and over the closed (retained) invocations, the tenant quotas, and
// the sequence that orders invocations across shards (an open invocation
// is numbered when it opens, a closed one when it closes). The counts are
// updated under each shard's lock; the bounds are enforced after the
// batch's shard locks are released (enforceBounds), so between the two
// the state may exceed a bound by what one batch adds.
//
// closedIDLimit is max_closed_invocations: the ids of invocations
// forgotten before their retention ended, remembered by the shards
// (closedIDs) and counted in closedIDs, enforced the same way.
type bounds struct {
	limit                  int64
	byteLimit              int64
	open, closed           atomic.Int64
	openBytes, closedBytes atomic.Int64
	seq                    atomic.Uint64
	closedIDLimit          int64
	closedIDs              atomic.Int64

	// tenantLimit and tenantByteLimit are one tenant's quota of open
	// invocations and bytes (math.MaxInt64 without the tenant setting).
	tenantLimit, tenantByteLimit int64
	// tenantMu guards tenants and tenantsByName. It is taken under a
	// shard's lock (ensure) and never held while taking one.
	tenantMu      sync.RWMutex
	tenants       []*tenantState
	tenantsByName map[string]*tenantState

	// reportedOpenBytes and reportedClosedBytes are what the ledger_bytes
	// metric was last told (record).
	reportedOpenBytes, reportedClosedBytes atomic.Int64

	// mu serialises enforcement, so that concurrent batches evict exactly
	// the excess between them. Shard locks are taken one at a time under
	// it, never the other way round.
	mu sync.Mutex
}

func newBounds(cfg *Config) *bounds {
	b := &bounds{
		limit:           int64(cfg.MaxOpenInvocations),
		byteLimit:       cfg.MaxOpenBytes,
		closedIDLimit:   int64(cfg.MaxClosedInvocations),
		tenantLimit:     math.MaxInt64,
		tenantByteLimit: math.MaxInt64,
		tenantsByName:   map[string]*tenantState{},
	}
	if t := cfg.Tenant; t != nil {
		b.tenantLimit = int64(t.MaxOpenInvocations)
		if b.tenantLimit == 0 {
			b.tenantLimit = max(1, b.limit/4)
		}
		b.tenantByteLimit = t.MaxOpenBytes
		if b.tenantByteLimit == 0 {
			b.tenantByteLimit = max(1, b.byteLimit/4)
		}
	}
	return b
}

// tenantState counts one tenant's invocations and bytes across shards,
// under the shards' locks, for the quotas and for choosing whom the global
// bounds and shedding evict.
type tenantState struct {
	name                   string
	open, closed           atomic.Int64
	openBytes, closedBytes atomic.Int64
}

// tenant returns the state of the named tenant, creating it. Tenants are
// never removed: they are authenticated (or stamped by a trusted tier),
// so there are as many as the operator admits.
func (b *bounds) tenant(name string) *tenantState {
	b.tenantMu.RLock()
	ts, ok := b.tenantsByName[name]
	b.tenantMu.RUnlock()
	if ok {
		return ts
	}
	b.tenantMu.Lock()
	defer b.tenantMu.Unlock()
	if ts, ok := b.tenantsByName[name]; ok {
		return ts
	}
	ts = &tenantState{name: name}
	b.tenantsByName[name] = ts
	b.tenants = append(b.tenants, ts)
	return ts
}

func (b *bounds) tenantList() []*tenantState {
	b.tenantMu.RLock()
	defer b.tenantMu.RUnlock()
	return b.tenants
}

// overQuota reports whether the tenant holds more open invocations or
// bytes than one tenant may.
func (b *bounds) overQuota(ts *tenantState) bool {
	return ts.open.Load() > b.tenantLimit || ts.openBytes.Load() > b.tenantByteLimit
}

// exceeded reports whether any bound needs enforcing.
func (b *bounds) exceeded() bool {
	if b.open.Load() > b.limit || b.closed.Load() > b.limit ||
		b.openBytes.Load() > b.byteLimit || b.closedBytes.Load() > b.byteLimit ||
		b.closedIDs.Load() > b.closedIDLimit {
		return true
	}
	if b.tenantLimit == math.MaxInt64 && b.tenantByteLimit == math.MaxInt64 {
		return false
	}
	for _, ts := range b.tenantList() {
		if b.overQuota(ts) {
			return true
		}
	}
	return false
}

// largest returns the tenant for which of is largest and positive.
func (b *bounds) largest(of func(*tenantState) int64) *tenantState {
	var best *tenantState
	var most int64
	for _, ts := range b.tenantList() {
		if n := of(ts); n > most {
			best, most = ts, n
		}
	}
	return best
}

func openCount(ts *tenantState) int64   { return ts.open.Load() }
func openBytes(ts *tenantState) int64   { return ts.openBytes.Load() }
func closedCount(ts *tenantState) int64 { return ts.closed.Load() }
func closedBytes(ts *tenantState) int64 { return ts.closedBytes.Load() }
func heldBytes(ts *tenantState) int64   { return ts.openBytes.Load() + ts.closedBytes.Load() }

// enforceBounds makes the state fit the bounds, in this order:
//
//  1. a tenant over its quota (tenant::max_open_invocations,
//     tenant::max_open_bytes) has its oldest open invocations evicted
//     (incomplete, evicted) until it is within it; no other tenant's;
//  2. while more than max_open_invocations are open, or more than
//     max_open_bytes held open, the oldest open invocation of the tenant
//     holding the most (invocations, or bytes) is evicted: a tenant
//     never holds the most while another holds more, so a tenant within
//     its quota is evicted only once the quotas of the tenants present
//     add up to more than the global bound and it holds the most;
//  3. the same two bounds over the closed invocations kept for retention
//     forget the earliest closed of the tenant retaining the most (each
//     leaving its fingerprint);
//  4. the oldest fingerprints are dropped while more than
//     max_closed_invocations are remembered.
//
// Without the tenant setting there is one tenant, and each step takes the
// globally oldest. It returns the shards that have summaries to send.
func (p *invocationProcessor) enforceBounds(now int64, stats *stats) []*shard {
	b := p.bounds
	if !b.exceeded() {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var touched []*shard
	evict := func(ts *tenantState, counter *int64) bool {
		s, seq := p.oldestOf(ts, phaseOpen)
		if s == nil {
			return false
		}
		if s.evictOpen(ts, seq, now, stats) {
			*counter++
			touched = appendShard(touched, s)
		}
		return true
	}
	forget := func(ts *tenantState, counter *int64) bool {
		s, seq := p.oldestOf(ts, phaseClosed)
		if s == nil {
			return false
		}
		if s.forgetClosed(ts, seq, now, stats) {
			*counter++
			touched = appendShard(touched, s)
		}
		return true
	}
	for _, ts := range b.tenantList() {
		for ts.open.Load() > b.tenantLimit && evict(ts, &stats.evictedTenant) {
		}
		for ts.openBytes.Load() > b.tenantByteLimit && evict(ts, &stats.evictedTenantBytes) {
		}
	}
	for b.open.Load() > b.limit {
		if ts := b.largest(openCount); ts == nil || !evict(ts, &stats.evicted) {
			break
		}
	}
	for b.openBytes.Load() > b.byteLimit {
		if ts := b.largest(openBytes); ts == nil || !evict(ts, &stats.evictedBytes) {
			break
		}
	}
	for b.closed.Load() > b.limit {
		if ts := b.largest(closedCount); ts == nil || !forget(ts, &stats.forgotten) {
			break
		}
	}
	for b.closedBytes.Load() > b.byteLimit {
		if ts := b.largest(closedBytes); ts == nil || !forget(ts, &stats.forgottenBytes) {
			break
		}
	}
	dropped := int64(0)
	for b.closedIDs.Load() > b.closedIDLimit {
		s := p.oldestClosedID()
		if s == nil || !s.dropClosedID() {
			break
		}
		dropped++
	}
	if dropped > 0 {
		stats.closedIDsDropped += dropped
		p.warnClosedIDs.note(p.logger, now, dropped)
	}
	return touched
}

// oldestClosedID returns the shard whose oldest remembered id's retention
// ends first.
func (p *invocationProcessor) oldestClosedID() *shard {
	var best *shard
	var bestUntil int64
	for _, s := range p.shards {
		s.mu.Lock()
		until, ok := s.closedIDs.oldest()
		s.mu.Unlock()
		if ok && (best == nil || until < bestUntil) {
			best, bestUntil = s, until
		}
	}
	return best
}

// oldestOf returns the shard holding the tenant's lowest sequence number
// among its open (or closed) invocations, and that number.
func (p *invocationProcessor) oldestOf(ts *tenantState, ph phase) (*shard, uint64) {
	var best *shard
	var bestSeq uint64
	for _, s := range p.shards {
		if seq, ok := s.oldestOf(ts, ph); ok && (best == nil || seq < bestSeq) {
			best, bestSeq = s, seq
		}
	}
	return best, bestSeq
}

func appendShard(list []*shard, s *shard) []*shard {
	for _, t := range list {
		if t == s {
			return list
		}
	}
	return append(list, s)
}
