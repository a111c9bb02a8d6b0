package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"context"
	"fmt"
	"sort"

	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// loadPartition reads one partition (manifest, snapshot chunks, log) and
// replays it into its shard.
func (p *invocationProcessor) loadPartition(ctx context.Context, s *shard, ps *shardPersist, now int64, unreadable bool) {
	db := p.store
	var (
		ops     []journal.Op
		lostIDs []string
		lostAll = unreadable
		man     journal.Manifest
		known   = !unreadable
	)
	if known {
		raw, err := db.client.Get(ctx, journal.ManifestKey(ps.part))
		switch {
		case err != nil:
			db.fail(ctx, opRead, err, fmt.Sprintf("reading partition %d's manifest failed; its invocations are treated as lost", ps.part))
			known, lostAll = false, true
		case raw != nil:
			if man, err = journal.DecodeManifest(raw); err != nil {
				db.fail(ctx, opDecode, err, fmt.Sprintf("partition %d's manifest is unreadable; its invocations are treated as lost", ps.part))
				known, lostAll = false, true
			}
		}
	}
	if !known {
		// Start the partition afresh under keys no earlier layout used;
		// what is left under the old ones is abandoned.
		man = journal.Manifest{Gen: uint64(now), LogStart: uint64(now)}
		if err := db.client.Set(ctx, journal.ManifestKey(ps.part), man.Encode()); err != nil {
			db.fail(ctx, opWrite, err, fmt.Sprintf("writing partition %d's new manifest failed", ps.part))
		}
	} else {
		ps.loadKeys = map[uint64]string{}
		defer func() { ps.loadKeys = nil }()
		decodeInto := func(kind byte, key string, raw []byte) {
			o, ids, err := journal.DecodeOps(kind, raw)
			for i := range o {
				ps.loadKeys[o[i].Seq] = key
			}
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
		for c := uint64(0); c < man.Chunks; c++ {
			key := journal.ChunkKey(ps.part, man.Gen, c)
			raw, err := db.client.Get(ctx, key)
			switch {
			case err != nil:
				db.fail(ctx, opRead, err, "reading snapshot chunk "+key+" failed")
				lostAll = true
			case raw == nil:
				db.fail(ctx, opDecode, fmt.Errorf("%w: snapshot chunk %s missing", journal.ErrCorrupt, key), "snapshot chunk missing")
				lostAll = true
			default:
				decodeInto(journal.KindChunk, key, raw)
			}
		}
		seq, stop := man.LogStart, false
		for !stop {
			batch := make([]*storage.Operation, readBatch)
			for i := range batch {
				batch[i] = storage.GetOperation(journal.LogKey(ps.part, seq+uint64(i)))
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
				decodeInto(journal.KindLog, op.Key, op.Value)
				seq++
			}
		}
		ps.nextSeq = seq
		p.deleteLeftovers(ctx, ps.part, man)
	}
	if !known {
		ps.nextSeq = man.LogStart
	}
	ps.man = man

	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Seq < ops[j].Seq })
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
		ps.rec.Op.Events = append(ps.rec.Op.Events, journal.Event{Kind: journal.EvTaintAll, Until: lostUntil})
		for _, inv := range s.invs {
			taintInvocation(inv)
		}
	}
	for _, id := range lostIDs {
		ps.tainted[id] = max(ps.tainted[id], lostUntil)
		ps.rec.Op.Events = append(ps.rec.Op.Events, journal.Event{Kind: journal.EvTaint, ID: id, Until: lostUntil})
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
func (p *invocationProcessor) deleteLeftovers(ctx context.Context, part int, m journal.Manifest) {
	var ops []*storage.Operation
	if m.PrevGen != m.Gen {
		for c := uint64(0); c < m.PrevChunks; c++ {
			ops = append(ops, storage.DeleteOperation(journal.ChunkKey(part, m.PrevGen, c)))
		}
	}
	if m.PrevLogStart < m.LogStart && m.LogStart-m.PrevLogStart <= 1<<20 {
		for seq := m.PrevLogStart; seq < m.LogStart; seq++ {
			ops = append(ops, storage.DeleteOperation(journal.LogKey(part, seq)))
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
func (p *invocationProcessor) replay(s *shard, ps *shardPersist, ops []journal.Op, now int64) ([]summary.Summary, stats) {
	var counts stats
	ps.replaying = true
	defer func() { ps.replaying = false }()
	var facts spanFacts
	res := pcommon.NewResource()
	empty := pcommon.NewResource()
	type pendingOut struct {
		sum  summary.Summary
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
			rd := journal.Decoder{B: op.Resources[ri-1]}
			rd.Attrs(res.Attributes(), 0)
			if rd.Err == nil && rd.Remaining() != 0 {
				rd.Fail("%d trailing bytes", rd.Remaining())
			}
			loadedRes = ri
			return res, rd.Err
		}
		for j := range op.Events {
			ev := &op.Events[j]
			switch ev.Kind {
			case journal.EvClosed:
				var err error
				r := empty
				if ev.Res > 0 {
					if r, err = loadRes(ev.Res); err != nil {
						loadedRes = -1
					}
				}
				if err == nil {
					var m map[string]any
					if ev.Res > 0 {
						m = s.resources.of(r)
					}
					err = p.restoreClosed(s, ev, m, &counts)
				}
				if err != nil {
					p.store.fail(context.Background(), opDecode, err, "the stored state of closed invocation "+ev.ID+" in record "+ps.recordOf(op)+" is unreadable; it is treated as lost")
					ps.lostAtLoad = append(ps.lostAtLoad, ev.ID)
				}
			case journal.EvFact:
				_, id := summary.SplitKey(ev.ID)
				d := journal.Decoder{B: ev.Fact, ID: id}
				decodeFacts(&d, &facts, &p.rules)
				if d.Err == nil && d.Remaining() != 0 {
					d.Fail("%d trailing bytes", d.Remaining())
				}
				r := empty
				if d.Err == nil && ev.Res > 0 {
					r, d.Err = loadRes(ev.Res)
					if d.Err != nil {
						loadedRes = -1
					}
				}
				inv := p.restoreInvocation(s, ev.ID, op.Time, &counts)
				if d.Err != nil {
					p.store.fail(context.Background(), opDecode, d.Err, "a stored span of invocation "+ev.ID+" in record "+ps.recordOf(op)+
						" is unreadable; the invocation is closed incomplete with "+reasonStorageLost)
					taintInvocation(inv)
					continue
				}
				if ps.taintAll > op.Time || ps.tainted[ev.ID] > op.Time {
					taintInvocation(inv)
				}
				p.limits.capNames(&facts, &p.rules) // as routing cut them live
				inv.add(&facts, r, &s.resources, &s.names, op.Time, &p.rules)
			case journal.EvEmit:
				remake := false
				if ev.Flags&journal.EmitSent == 0 {
					sum, err := decodeSummary(ev)
					if err != nil {
						// The decision is re-applied below, so it is never
						// made again: its summary is remade from the state.
						remake = true
						p.store.fail(context.Background(), opDecode, err, "a stored summary of invocation "+ev.ID+" in record "+ps.recordOf(op)+
							" is unreadable; it is made again from the restored state")
					} else {
						outbox = append(outbox, pendingOut{sum: sum})
					}
				}
				inv, ok := s.invs[ev.ID]
				if ev.Flags&journal.EmitDetached != 0 {
					if remake {
						p.remakeDetached(s, ps, inv, ok, ev, op.Time, func(sum summary.Summary) { outbox = append(outbox, pendingOut{sum: sum}) })
					}
					continue
				}
				if ok {
					remade := p.replayEmission(s, inv, ev, op.Time, remake, &counts)
					if remake {
						outbox = append(outbox, pendingOut{sum: remade})
					}
				} else if remake {
					p.remakeDetached(s, ps, inv, ok, ev, op.Time, func(sum summary.Summary) { outbox = append(outbox, pendingOut{sum: sum}) })
				}
			case journal.EvForget:
				if inv, ok := s.invs[ev.ID]; ok {
					s.forget(inv)
				}
			case journal.EvRemember:
				if ev.Until > now {
					s.rememberID(ev.ID, ev.Until)
				}
			case journal.EvSent:
				for k := len(outbox) - 1; k >= 0; k-- {
					o := &outbox[k]
					if !o.sent && o.sum.ID == ev.ID && o.sum.Revision == ev.Revision && o.sum.Status == ev.Status {
						o.sent = true
						break
					}
				}
			case journal.EvTaint:
				ps.tainted[ev.ID] = max(ps.tainted[ev.ID], ev.Until)
				if inv, ok := s.invs[ev.ID]; ok && ev.Until > now {
					taintInvocation(inv)
				}
			case journal.EvTaintAll:
				ps.taintAll = max(ps.taintAll, ev.Until)
				if ev.Until > now {
					for _, inv := range s.invs {
						taintInvocation(inv)
					}
				}
			}
		}
		ps.nextSeq = max(ps.nextSeq, op.Seq+1)
	}
	for id, until := range ps.tainted {
		if until <= now {
			delete(ps.tainted, id)
		}
	}
	for _, inv := range s.invs {
		p.rearm(s, inv, now)
	}
	var out []summary.Summary
	for _, o := range outbox {
		if !o.sent {
			out = append(out, o.sum)
		}
	}
	return out, counts
}

// recordOf names the stored record an operation was read from, for the
// log, while a partition loads.
func (ps *shardPersist) recordOf(op *journal.Op) string {
	if key, ok := ps.loadKeys[op.Seq]; ok {
		return key
	}
	return fmt.Sprintf("of partition %d, operation %d", ps.part, op.Seq)
}

// remakeDetached makes again, from the restored state, a summary whose
// stored form is unreadable and whose decision is not re-applied (its
// invocation was forgotten, or compacted into a closed record, before it
// was delivered): from the closed invocation it was made for, when that
// is still held; else nothing can be sent, and the id is treated as lost
// (a later span of it cannot make it final). mu must be held.
func (p *invocationProcessor) remakeDetached(s *shard, ps *shardPersist, inv *invocation, ok bool, ev *journal.Event, t int64, add func(summary.Summary)) {
	if ok && inv.Phase == phaseClosed && inv.FirstArrival <= t && inv.Revision >= ev.Revision {
		add(inv.snapshot(ev.Status, ev.Revision, t, s.cfg))
		return
	}
	p.store.fail(context.Background(), opDecode, fmt.Errorf("%w: summary of %s revision %d", journal.ErrCorrupt, ev.ID, ev.Revision),
		"a stored summary of invocation "+ev.ID+" cannot be made again: its invocation's state is gone; it is treated as lost")
	ps.lostAtLoad = append(ps.lostAtLoad, ev.ID)
}
