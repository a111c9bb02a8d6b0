package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"context"
	"fmt"

	"go.opentelemetry.io/collector/extension/xextension/storage"

	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
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
func compactOps(ops []journal.Op, now int64) []journal.Op {
	type pos struct{ op, ev int }
	lastForget := map[string]pos{}
	lastSent := map[sentKey]pos{}
	for i := range ops {
		for j := range ops[i].Events {
			ev := &ops[i].Events[j]
			switch ev.Kind {
			case journal.EvForget:
				lastForget[ev.ID] = pos{i, j}
			case journal.EvSent:
				lastSent[sentKey{ev.ID, ev.Revision, ev.Status}] = pos{i, j}
			}
		}
	}
	before := func(a, b pos) bool { return a.op < b.op || (a.op == b.op && a.ev < b.ev) }
	var out []journal.Op
	for i := range ops {
		op := &ops[i]
		nop := journal.Op{Seq: op.Seq, Time: op.Time}
		remap := make([]int, len(op.Resources)+1)
		for j := range op.Events {
			ev := op.Events[j]
			here := pos{i, j}
			f, forgotten := lastForget[ev.ID]
			dead := forgotten && !before(f, here)
			switch ev.Kind {
			case journal.EvForget, journal.EvSent:
				continue
			case journal.EvFact, journal.EvClosed:
				if dead {
					continue
				}
				if ev.Res > 0 {
					if remap[ev.Res] == 0 {
						nop.Resources = append(nop.Resources, op.Resources[ev.Res-1])
						remap[ev.Res] = len(nop.Resources)
					}
					ev.Res = remap[ev.Res]
				}
			case journal.EvEmit:
				if sp, ok := lastSent[sentKey{ev.ID, ev.Revision, ev.Status}]; ok && before(here, sp) {
					ev.Flags |= journal.EmitSent
					ev.Summary = nil
				}
				if dead {
					if ev.Flags&journal.EmitSent != 0 {
						continue
					}
					ev.Flags |= journal.EmitDetached
				}
			case journal.EvTaint, journal.EvTaintAll, journal.EvRemember:
				if ev.Until <= now {
					continue
				}
			}
			nop.Events = append(nop.Events, ev)
		}
		if len(nop.Events) > 0 {
			out = append(out, nop)
		}
	}
	return out
}

// chunkOps splits operations into snapshot values of about chunkBytes.
func chunkOps(ops []journal.Op) [][]byte {
	var chunks [][]byte
	start, size := 0, 0
	for i := range ops {
		for _, r := range ops[i].Resources {
			size += len(r) + 4
		}
		for j := range ops[i].Events {
			ev := &ops[i].Events[j]
			size += len(ev.Fact) + len(ev.Summary) + len(ev.ID) + len(ev.Status) + len(ev.Forced) + 24
		}
		if size >= chunkBytes || i == len(ops)-1 {
			chunks = append(chunks, journal.EncodeOps(journal.KindChunk, ops[start:i+1]))
			start, size = i+1, 0
		}
	}
	return chunks
}

// maybeCompact compacts the first partition, in round-robin order, whose
// log has outgrown its snapshot (and compactMinBytes), if none of its
// records is waiting to be written. It holds cmu, not the log's write
// lock: batches keep committing their records (which go to log keys after
// the compacted ones) while a partition is read, folded and rewritten.
func (p *invocationProcessor) maybeCompact(ctx context.Context, now int64) {
	db := p.store
	db.cmu.Lock()
	defer db.cmu.Unlock()
	for k := range p.shards {
		i := (db.compactNext + k) % len(p.shards)
		s := p.shards[i]
		s.mu.Lock()
		ps := s.partition()
		due := ps.unwritten == 0 && ps.logBytes >= max(db.compactMin, int64(ps.man.SnapBytes))
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
	var closedOp journal.Op
	var closed map[string]bool
	if end > 0 {
		closedOp, closed = closedRecords(s, end-1, now)
	}
	s.mu.Unlock()

	var ops []journal.Op
	for c := uint64(0); c < man.Chunks; c++ {
		raw, err := db.client.Get(ctx, journal.ChunkKey(part, man.Gen, c))
		if err != nil {
			return fmt.Errorf("reading snapshot chunk: %w", err)
		}
		o, _, err := journal.DecodeOps(journal.KindChunk, raw)
		if err != nil {
			// Loaded (and counted) at Start already; this partition's
			// losses are journalled, so the unreadable chunk is dropped.
			continue
		}
		ops = append(ops, o...)
	}
	for seq := man.LogStart; seq < end; seq += readBatch {
		batch := make([]*storage.Operation, 0, readBatch)
		for k := seq; k < end && k < seq+readBatch; k++ {
			batch = append(batch, storage.GetOperation(journal.LogKey(part, k)))
		}
		if err := db.client.Batch(ctx, batch...); err != nil {
			return fmt.Errorf("reading log: %w", err)
		}
		for _, op := range batch {
			if op.Value == nil {
				continue
			}
			o, _, err := journal.DecodeOps(journal.KindLog, op.Value)
			if err != nil {
				continue // as above: counted at Start, its loss journalled
			}
			ops = append(ops, o...)
		}
	}
	ops = withoutClosedFacts(compactOps(ops, now), closed)
	if len(closedOp.Events) > 0 {
		// Last: the records are the state after every operation before
		// end, and sorting by seq at load keeps them after those.
		ops = append(ops, closedOp)
	}
	chunks := chunkOps(ops)
	next := journal.Manifest{Gen: man.Gen + 1, Chunks: uint64(len(chunks)), LogStart: end,
		PrevGen: man.Gen, PrevChunks: man.Chunks, PrevLogStart: man.LogStart}
	writes := make([]*storage.Operation, 0, len(chunks))
	var written int64
	for c, b := range chunks {
		writes = append(writes, storage.SetOperation(journal.ChunkKey(part, next.Gen, uint64(c)), b))
		written += int64(len(b))
		next.SnapBytes += uint64(len(b))
	}
	if len(writes) > 0 {
		if err := db.client.Batch(ctx, writes...); err != nil {
			return fmt.Errorf("writing snapshot: %w", err)
		}
	}
	mb := next.Encode()
	if err := db.client.Set(ctx, journal.ManifestKey(part), mb); err != nil {
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
