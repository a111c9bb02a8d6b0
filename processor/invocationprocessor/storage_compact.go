package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/extension/xextension/storage"
)

// sentKey names one summary for matching delivery marks.
type sentKey struct {
	id       string
	revision int64
	status   string
}

// compactOps folds a partition's operations into the smallest list that
// replays to the same state: an invocation's events before its last forget
// are dropped (that incarnation is gone; a summary of it that was never
// delivered is kept, detached), delivery marks are folded into the
// summaries they mark (whose spans are then dropped), and losses whose
// window has passed are dropped. Order is kept.
func compactOps(ops []storedOp, now int64) []storedOp {
	type pos struct{ op, ev int }
	lastForget := map[string]pos{}
	lastSent := map[sentKey]pos{}
	for i := range ops {
		for j := range ops[i].events {
			ev := &ops[i].events[j]
			switch ev.kind {
			case evForget:
				lastForget[ev.id] = pos{i, j}
			case evSent:
				lastSent[sentKey{ev.id, ev.revision, ev.status}] = pos{i, j}
			}
		}
	}
	before := func(a, b pos) bool { return a.op < b.op || (a.op == b.op && a.ev < b.ev) }
	var out []storedOp
	for i := range ops {
		op := &ops[i]
		nop := storedOp{seq: op.seq, time: op.time}
		remap := make([]int, len(op.resources)+1)
		for j := range op.events {
			ev := op.events[j]
			here := pos{i, j}
			f, forgotten := lastForget[ev.id]
			dead := forgotten && !before(f, here)
			switch ev.kind {
			case evForget, evSent:
				continue
			case evFact, evClosed:
				if dead {
					continue
				}
				if ev.res > 0 {
					if remap[ev.res] == 0 {
						nop.resources = append(nop.resources, op.resources[ev.res-1])
						remap[ev.res] = len(nop.resources)
					}
					ev.res = remap[ev.res]
				}
			case evEmit:
				if sp, ok := lastSent[sentKey{ev.id, ev.revision, ev.status}]; ok && before(here, sp) {
					ev.flags |= emitSent
					ev.summary = nil
				}
				if dead {
					if ev.flags&emitSent != 0 {
						continue
					}
					ev.flags |= emitDetached
				}
			case evTaint, evTaintAll, evRemember:
				if ev.until <= now {
					continue
				}
			}
			nop.events = append(nop.events, ev)
		}
		if len(nop.events) > 0 {
			out = append(out, nop)
		}
	}
	return out
}

// chunkOps splits operations into snapshot values of about chunkBytes.
func chunkOps(ops []storedOp) [][]byte {
	var chunks [][]byte
	start, size := 0, 0
	for i := range ops {
		for _, r := range ops[i].resources {
			size += len(r) + 4
		}
		for j := range ops[i].events {
			ev := &ops[i].events[j]
			size += len(ev.fact) + len(ev.summary) + len(ev.id) + len(ev.status) + len(ev.forced) + 24
		}
		if size >= chunkBytes || i == len(ops)-1 {
			chunks = append(chunks, encodeOps(kindChunk, ops[start:i+1]))
			start, size = i+1, 0
		}
	}
	return chunks
}

// maybeCompact compacts the first partition, in round-robin order, whose
// log has outgrown its snapshot (and compactMinBytes), if none of its
// records is waiting to be written. It holds cmu, not wmu: batches keep
// committing their records (which go to log keys after the compacted
// ones) while a partition is read, folded and rewritten.
func (p *invocationProcessor) maybeCompact(ctx context.Context, now int64) {
	db := p.store
	db.cmu.Lock()
	defer db.cmu.Unlock()
	for k := range p.shards {
		i := (db.compactNext + k) % len(p.shards)
		s := p.shards[i]
		s.mu.Lock()
		ps := s.partition()
		due := ps.unwritten == 0 && ps.logBytes >= max(db.compactMin, int64(ps.man.snapBytes))
		s.mu.Unlock()
		if due {
			db.compactNext = i + 1
			if err := p.compactLocked(ctx, s, now); err != nil {
				db.fail(ctx, opCompact, err, fmt.Sprintf("compacting partition %d failed; its log keeps growing until a compaction succeeds", i))
			}
			return
		}
	}
}

// compactLocked rewrites one partition as a snapshot: take the closed
// invocations' records from memory, read the snapshot and the log, fold,
// write the new chunks, switch the manifest, delete the old values. Every
// step leaves a readable state if the process dies after it. cmu must be
// held. The log is compacted up to the records written when the shard's
// state is taken (under its mu, none waiting): the closed records are
// the state those records replay to, and later records, written
// meanwhile under later keys, stay in the log.
func (p *invocationProcessor) compactLocked(ctx context.Context, s *shard, now int64) error {
	db := p.store
	s.mu.Lock()
	ps := s.partition()
	if ps.unwritten > 0 {
		s.mu.Unlock()
		return nil
	}
	part, man, end := ps.part, ps.man, ps.nextSeq
	folded := ps.logBytes
	var closedOp storedOp
	var closed map[string]bool
	if end > 0 {
		closedOp, closed = closedRecords(s, end-1, now)
	}
	s.mu.Unlock()

	var ops []storedOp
	for c := uint64(0); c < man.chunks; c++ {
		raw, err := db.client.Get(ctx, chunkKey(part, man.gen, c))
		if err != nil {
			return fmt.Errorf("reading snapshot chunk: %w", err)
		}
		o, _, err := decodeOps(kindChunk, raw)
		if err != nil {
			// Loaded (and counted) at Start already; this partition's
			// losses are journalled, so the unreadable chunk is dropped.
			continue
		}
		ops = append(ops, o...)
	}
	for seq := man.logStart; seq < end; seq += readBatch {
		batch := make([]*storage.Operation, 0, readBatch)
		for k := seq; k < end && k < seq+readBatch; k++ {
			batch = append(batch, storage.GetOperation(logKey(part, k)))
		}
		if err := db.client.Batch(ctx, batch...); err != nil {
			return fmt.Errorf("reading log: %w", err)
		}
		for _, op := range batch {
			if op.Value == nil {
				continue
			}
			o, _, err := decodeOps(kindLog, op.Value)
			if err != nil {
				continue // as above: counted at Start, its loss journalled
			}
			ops = append(ops, o...)
		}
	}
	ops = withoutClosedFacts(compactOps(ops, now), closed)
	if len(closedOp.events) > 0 {
		// Last: the records are the state after every operation before
		// end, and sorting by seq at load keeps them after those.
		ops = append(ops, closedOp)
	}
	chunks := chunkOps(ops)
	next := manifest{gen: man.gen + 1, chunks: uint64(len(chunks)), logStart: end,
		prevGen: man.gen, prevChunks: man.chunks, prevLogStart: man.logStart}
	writes := make([]*storage.Operation, 0, len(chunks))
	var written int64
	for c, b := range chunks {
		writes = append(writes, storage.SetOperation(chunkKey(part, next.gen, uint64(c)), b))
		written += int64(len(b))
		next.snapBytes += uint64(len(b))
	}
	if len(writes) > 0 {
		if err := db.client.Batch(ctx, writes...); err != nil {
			return fmt.Errorf("writing snapshot: %w", err)
		}
	}
	mb := next.encode()
	if err := db.client.Set(ctx, manifestKey(part), mb); err != nil {
		return fmt.Errorf("writing manifest: %w", err)
	}
	db.metrics.bytesWritten.Add(ctx, written+int64(len(mb)))
	s.mu.Lock()
	ps.man = next
	// Records written meanwhile are in the log after end.
	ps.logBytes -= folded
	s.mu.Unlock()
	p.deleteLeftovers(ctx, part, next)
	return nil
}
