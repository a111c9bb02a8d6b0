package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"context"
	"fmt"
	"sort"

	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/pdata/pcommon"
)

// loadPartition reads one partition (manifest, snapshot chunks, log) and
// replays it into its shard.
func (p *invocationProcessor) loadPartition(ctx context.Context, s *shard, ps *shardPersist, now int64, unreadable bool) {
	db := p.store
	var (
		ops     []storedOp
		lostIDs []string
		lostAll = unreadable
		man     manifest
		known   = !unreadable
	)
	if known {
		raw, err := db.client.Get(ctx, manifestKey(ps.part))
		switch {
		case err != nil:
			db.fail(ctx, opRead, err, fmt.Sprintf("reading partition %d's manifest failed; its invocations are treated as lost", ps.part))
			known, lostAll = false, true
		case raw != nil:
			if man, err = decodeManifest(raw); err != nil {
				db.fail(ctx, opDecode, err, fmt.Sprintf("partition %d's manifest is unreadable; its invocations are treated as lost", ps.part))
				known, lostAll = false, true
			}
		}
	}
	if !known {
		// Start the partition afresh under keys no earlier layout used;
		// what is left under the old ones is abandoned.
		man = manifest{gen: uint64(now), logStart: uint64(now)}
		if err := db.client.Set(ctx, manifestKey(ps.part), man.encode()); err != nil {
			db.fail(ctx, opWrite, err, fmt.Sprintf("writing partition %d's new manifest failed", ps.part))
		}
	} else {
		decodeInto := func(kind byte, key string, raw []byte) {
			o, ids, err := decodeOps(kind, raw)
			if err != nil {
				db.fail(ctx, opDecode, err, "stored record "+key+" is unreadable; the invocations it concerned are treated as lost")
				if ids == nil {
					lostAll = true
				}
				lostIDs = append(lostIDs, ids...)
				return
			}
			ops = append(ops, o...)
		}
		for c := uint64(0); c < man.chunks; c++ {
			key := chunkKey(ps.part, man.gen, c)
			raw, err := db.client.Get(ctx, key)
			switch {
			case err != nil:
				db.fail(ctx, opRead, err, "reading snapshot chunk "+key+" failed")
				lostAll = true
			case raw == nil:
				db.fail(ctx, opDecode, fmt.Errorf("%w: snapshot chunk %s missing", errCorrupt, key), "snapshot chunk missing")
				lostAll = true
			default:
				decodeInto(kindChunk, key, raw)
			}
		}
		seq, stop := man.logStart, false
		for !stop {
			batch := make([]*storage.Operation, readBatch)
			for i := range batch {
				batch[i] = storage.GetOperation(logKey(ps.part, seq+uint64(i)))
			}
			if err := db.client.Batch(ctx, batch...); err != nil {
				db.fail(ctx, opRead, err, fmt.Sprintf("reading partition %d's log failed", ps.part))
				lostAll = true
				break
			}
			for _, op := range batch {
				if op.Value == nil {
					stop = true
					break
				}
				ps.logBytes += int64(len(op.Value))
				decodeInto(kindLog, op.Key, op.Value)
				seq++
			}
		}
		ps.nextSeq = seq
		p.deleteLeftovers(ctx, ps.part, man)
	}
	if !known {
		ps.nextSeq = man.logStart
	}
	ps.man = man

	sort.SliceStable(ops, func(i, j int) bool { return ops[i].seq < ops[j].seq })
	lostUntil := satAdd(now, satAdd(p.rules.openTimeout, p.rules.retention))
	s.mu.Lock()
	defer s.mu.Unlock()
	restoredOutbox, st2 := p.replay(s, ps, ops, now)
	lostIDs = append(lostIDs, ps.lostAtLoad...)
	ps.lostAtLoad = nil

	// The loss itself is journalled, so that it outlives the next restart.
	s.journal.begin(s)
	if lostAll {
		ps.taintAll = max(ps.taintAll, lostUntil)
		ps.op.events = append(ps.op.events, storedEvent{kind: evTaintAll, until: lostUntil})
		for _, inv := range s.invs {
			taintInvocation(inv)
		}
	}
	for _, id := range lostIDs {
		ps.tainted[id] = max(ps.tainted[id], lostUntil)
		ps.op.events = append(ps.op.events, storedEvent{kind: evTaint, id: id, until: lostUntil})
		if inv, ok := s.invs[id]; ok {
			taintInvocation(inv)
		}
	}
	// An invocation whose obligations are met as loaded is closed now, as
	// the batch that met them would have closed it (v0.6 rule 7); the
	// losses above come first, so a lost one closes incomplete. A remote
	// subtree settles from now on (rearm), like any other arrival.
	var atLoad stats
	p.evaluateLoaded(s, now, &atLoad)
	s.journal.end(s, now)
	// Summaries made before the restart and not delivered go first.
	s.outbox = append(restoredOutbox, s.outbox...)
	p.record(ctx, &stats{opened: st2.opened, closed: st2.closed})
	p.record(ctx, &atLoad)
}

// deleteLeftovers removes what a compaction interrupted by a crash left:
// the previous snapshot and the log it folded. Failures only leave bytes.
func (p *invocationProcessor) deleteLeftovers(ctx context.Context, part int, m manifest) {
	var ops []*storage.Operation
	if m.prevGen != m.gen {
		for c := uint64(0); c < m.prevChunks; c++ {
			ops = append(ops, storage.DeleteOperation(chunkKey(part, m.prevGen, c)))
		}
	}
	if m.prevLogStart < m.logStart && m.logStart-m.prevLogStart <= 1<<20 {
		for seq := m.prevLogStart; seq < m.logStart; seq++ {
			ops = append(ops, storage.DeleteOperation(logKey(part, seq)))
		}
	}
	p.store.deleteKeys(ctx, ops)
}

func (db *store) deleteKeys(ctx context.Context, ops []*storage.Operation) {
	for len(ops) > 0 {
		n := min(len(ops), 4096)
		if err := db.client.Batch(ctx, ops[:n]...); err != nil {
			db.fail(ctx, opDelete, err, "deleting stale records failed")
			return
		}
		ops = ops[n:]
	}
}

// replay applies stored operations to an empty shard, under its lock:
// facts through the ledger's per-span path, recorded decisions as they
// were taken. It returns the summaries that were made and not delivered.
func (p *invocationProcessor) replay(s *shard, ps *shardPersist, ops []storedOp, now int64) ([]summary, stats) {
	var counts stats
	ps.replaying = true
	defer func() { ps.replaying = false }()
	var facts spanFacts
	res := pcommon.NewResource()
	empty := pcommon.NewResource()
	type pendingOut struct {
		sum  summary
		sent bool
	}
	var outbox []pendingOut
	for i := range ops {
		op := &ops[i]
		loadedRes := -1
		// loadRes decodes the operation's resource ri (1-based), once
		// for a run of events naming it.
		loadRes := func(ri int) (pcommon.Resource, error) {
			if loadedRes == ri {
				return res, nil
			}
			res = pcommon.NewResource()
			rd := decoder{b: op.resources[ri-1]}
			rd.attrs(res.Attributes(), 0)
			if rd.err == nil && rd.remaining() != 0 {
				rd.fail("%d trailing bytes", rd.remaining())
			}
			loadedRes = ri
			return res, rd.err
		}
		for j := range op.events {
			ev := &op.events[j]
			switch ev.kind {
			case evClosed:
				var err error
				r := empty
				if ev.res > 0 {
					if r, err = loadRes(ev.res); err != nil {
						loadedRes = -1
					}
				}
				if err == nil {
					var m map[string]any
					if ev.res > 0 {
						m = s.resources.of(r)
					}
					err = p.restoreClosed(s, ev, m, &counts)
				}
				if err != nil {
					p.store.fail(context.Background(), opDecode, err, "the stored state of closed invocation "+ev.id+" is unreadable; it is treated as lost")
					ps.lostAtLoad = append(ps.lostAtLoad, ev.id)
				}
			case evFact:
				d := decoder{b: ev.fact}
				d.facts(&facts, &p.rules)
				if d.err == nil && d.remaining() != 0 {
					d.fail("%d trailing bytes", d.remaining())
				}
				r := empty
				if d.err == nil && ev.res > 0 {
					r, d.err = loadRes(ev.res)
					if d.err != nil {
						loadedRes = -1
					}
				}
				inv := p.restoreInvocation(s, ev.id, op.time, &counts)
				if d.err != nil {
					p.store.fail(context.Background(), opDecode, d.err, "a stored span of invocation "+ev.id+" is unreadable")
					taintInvocation(inv)
					continue
				}
				if ps.taintAll > op.time || ps.tainted[ev.id] > op.time {
					taintInvocation(inv)
				}
				p.limits.capNames(&facts, &p.rules) // as routing cut them live
				inv.add(&facts, r, &s.resources, op.time, &p.rules)
			case evEmit:
				if ev.flags&emitSent == 0 {
					sum, err := decodeSummary(ev)
					if err != nil {
						p.store.fail(context.Background(), opDecode, err, "a stored summary of invocation "+ev.id+" is unreadable")
					} else {
						outbox = append(outbox, pendingOut{sum: sum})
					}
				}
				if ev.flags&emitDetached != 0 {
					continue
				}
				if inv, ok := s.invs[ev.id]; ok {
					p.replayEmission(s, inv, ev, op.time, &counts)
				}
			case evForget:
				if inv, ok := s.invs[ev.id]; ok {
					s.forget(inv)
				}
			case evRemember:
				if ev.until > now {
					s.rememberID(ev.id, ev.until)
				}
			case evSent:
				for k := len(outbox) - 1; k >= 0; k-- {
					o := &outbox[k]
					if !o.sent && o.sum.id == ev.id && o.sum.revision == ev.revision && o.sum.status == ev.status {
						o.sent = true
						break
					}
				}
			case evTaint:
				ps.tainted[ev.id] = max(ps.tainted[ev.id], ev.until)
				if inv, ok := s.invs[ev.id]; ok && ev.until > now {
					taintInvocation(inv)
				}
			case evTaintAll:
				ps.taintAll = max(ps.taintAll, ev.until)
				if ev.until > now {
					for _, inv := range s.invs {
						taintInvocation(inv)
					}
				}
			}
		}
		ps.nextSeq = max(ps.nextSeq, op.seq+1)
	}
	for id, until := range ps.tainted {
		if until <= now {
			delete(ps.tainted, id)
		}
	}
	for _, inv := range s.invs {
		p.rearm(s, inv, now)
	}
	var out []summary
	for _, o := range outbox {
		if !o.sent {
			out = append(out, o.sum)
		}
	}
	return out, counts
}
