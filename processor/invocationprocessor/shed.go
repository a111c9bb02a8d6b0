package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"runtime/metrics"
)

// heapObjectsMetric is the Go heap's live and not yet swept objects: the
// memory the memory_limiter compares with its limits (MemStats.Alloc),
// read without stopping the world.
const heapObjectsMetric = "/memory/classes/heap/objects:bytes"

// heapObjectBytes reads heapObjectsMetric.
func heapObjectBytes() uint64 {
	sample := []metrics.Sample{{Name: heapObjectsMetric}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}

// shedFraction bounds what one tick sheds: at most this fraction of the
// ledger's bytes (at least one invocation), so that memory held elsewhere
// (batches in flight, an exporter's queue) empties the ledger over
// several ticks, not at once.
const shedFraction = 4

// shedUnderPressure gives memory back while the heap is above
// shed_heap_bytes: it runs on the timer goroutine, so it works while the
// memory_limiter refuses every batch and no data reaches the processor.
// It forgets closed invocations and evicts open ones (incomplete,
// evicted), always from the tenant holding the most bytes, its earliest
// closed first and then its oldest open, until the ledger has let go of
// what the heap is over the threshold, or of a quarter of its bytes,
// whichever is less; then it runs the garbage collector so that the
// memory_limiter sees the memory back at its next check. It returns the
// shards that have summaries to send.
func (p *invocationProcessor) shedUnderPressure(now int64, stats *stats) []*shard {
	if p.shedHeap == 0 {
		return nil
	}
	heap := p.heapBytes()
	if heap <= p.shedHeap {
		return nil
	}
	b := p.bounds
	b.mu.Lock()
	defer b.mu.Unlock()
	held := b.openBytes.Load() + b.closedBytes.Load()
	if held <= 0 {
		return nil
	}
	target := min(int64(heap-p.shedHeap), held/shedFraction)
	var touched []*shard
	// Each step forgets or evicts one invocation; there are no more than
	// are held.
	steps := b.open.Load() + b.closed.Load() + 1
	for released := int64(0); (released < target || released <= 0) && steps > 0; steps-- {
		ts := b.largest(heldBytes)
		if ts == nil {
			break
		}
		before := b.openBytes.Load() + b.closedBytes.Load()
		if s, seq := p.oldestOf(ts, phaseClosed); s != nil {
			if s.forgetClosed(ts, seq, now, stats) {
				stats.shed++
				touched = appendShard(touched, s)
			}
		} else if s, seq := p.oldestOf(ts, phaseOpen); s != nil {
			if s.evictOpen(ts, seq, now, stats) {
				stats.shed++
				touched = appendShard(touched, s)
			}
		} else {
			break
		}
		released += before - (b.openBytes.Load() + b.closedBytes.Load())
	}
	if len(touched) > 0 {
		p.gc()
	}
	return touched
}
