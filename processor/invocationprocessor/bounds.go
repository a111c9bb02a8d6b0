package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"sync"
	"sync/atomic"
)

// bounds holds max_open_invocations for the whole processor, whatever the
// number of shards: the count of open and of closed (retained)
// invocations, and the sequence that orders invocations across shards (an
// open invocation is numbered when it opens, a closed one when it closes).
// The counts are updated under each shard's lock; the bound is enforced
// after the batch's shard locks are released (enforceBounds), so between
// the two the count may exceed the limit by the invocations one batch
// opens.
//
// closedIDLimit is max_closed_invocations: the ids of invocations
// forgotten before their retention ended, remembered by the shards
// (closedIDs) and counted in closedIDs, enforced the same way.
type bounds struct {
	limit         int64
	open, closed  atomic.Int64
	seq           atomic.Uint64
	closedIDLimit int64
	closedIDs     atomic.Int64
	// mu serialises enforcement, so that concurrent batches evict exactly
	// the excess between them. Shard locks are taken one at a time under
	// it, never the other way round.
	mu sync.Mutex
}

// enforceBounds evicts the globally oldest open invocations (incomplete,
// evicted) while more than the limit are open, then forgets the globally
// earliest closed ones while more than the limit are retained (each
// leaving its fingerprint), then drops the oldest fingerprints while more
// than max_closed_invocations are remembered. It returns the shards that
// have summaries to send.
func (p *invocationProcessor) enforceBounds(now int64, stats *stats) []*shard {
	b := p.bounds
	if b.open.Load() <= b.limit && b.closed.Load() <= b.limit && b.closedIDs.Load() <= b.closedIDLimit {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var touched []*shard
	for b.open.Load() > b.limit {
		s, seq := p.oldest((*shard).oldestOpen)
		if s == nil {
			break
		}
		if s.evictOpen(seq, now, stats) {
			touched = appendShard(touched, s)
		}
	}
	for b.closed.Load() > b.limit {
		s, seq := p.oldest((*shard).oldestClosed)
		if s == nil {
			break
		}
		if s.forgetClosed(seq, now, stats) {
			touched = appendShard(touched, s)
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

// oldest returns the shard holding the lowest sequence number that head
// reports, and that number.
func (p *invocationProcessor) oldest(head func(*shard) (uint64, bool)) (*shard, uint64) {
	var best *shard
	var bestSeq uint64
	for _, s := range p.shards {
		if seq, ok := head(s); ok && (best == nil || seq < bestSeq) {
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
