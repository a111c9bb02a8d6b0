package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
)

// With a storage extension the ledger's state survives restarts. Each
// shard is a state machine whose inputs and decisions are journalled:
//
//   - every span it indexed (its facts: what the ledger reads from it),
//   - every summary it made (status, revision, forced reason, and the
//     summary span itself until it is delivered),
//   - every invocation it forgot (retention ended, capacity),
//   - every summary the next consumer accepted.
//
// One locked section (a batch's part, a timer tick) becomes one log record
// of the shard's partition, in the order the events happened. Records are
// written before the batch is acknowledged and before its summaries are
// sent. A restart replays the records through the ledger's own per-span
// path (invocation.add) and re-applies the recorded decisions instead of
// deciding again, so a summary that went out is never contradicted by a
// second revision 1. Periodically a partition's records are folded into a
// snapshot (the same records without forgotten invocations and without the
// bodies of delivered summaries) found through the partition's manifest.

// Storage tuning.
const (
	// compactMinBytes is the log size of a partition below which it is
	// not compacted; above it, compaction runs once the log outgrows the
	// snapshot, so the stored bytes stay within about twice the state.
	compactMinBytes = 256 << 10
	// chunkBytes bounds one stored snapshot value.
	chunkBytes = 1 << 20
	// readBatch is how many log keys are read in one storage Batch.
	readBatch = 64
)

// reasonStorageLost is the blocking reason for an invocation some of whose
// stored state could not be read back: its totals cannot be proven.
const reasonStorageLost = "storage_lost"

// Storage operation names in the storage_errors metric.
const (
	opWrite   = "write"
	opRead    = "read"
	opDecode  = "decode"
	opCompact = "compact"
	opDelete  = "delete"
)

// errNotStarted is returned by ConsumeTraces before Start loaded the state.
var errNotStarted = errors.New("invocation processor: storage not loaded yet (Start has not run)")

// pendingRecord is a log record waiting to be written.
type pendingRecord struct {
	shard  int
	key    string
	value  []byte
	held   int // summaries of this record held back until it is written
	ticket uint64
}

// shardPersist is one shard's journal and the state of its partition. It
// is guarded by the shard's mu.
type shardPersist struct {
	part  int
	store *store
	// trust marks the summaries stored as they will be sent (trust.go).
	trust *trust

	// The current locked section.
	active   bool
	observed int // outbox length already journalled
	mark     int // outbox length when the section began
	op       storedOp
	resIndex map[pcommon.Resource]int
	enc      encoder
	// arena holds the section's encoded facts and resources, which its
	// events slice, until journalEnd encodes the record.
	arena []byte

	// sent are delivery marks waiting for the shard's next record.
	sent []storedEvent
	// held are summaries made but not yet durable, in order.
	held []summary
	// unwritten counts queued records.
	unwritten int

	// Partition layout.
	nextSeq   uint64
	invs      int // len(s.invs) when the section began, for the metric
	man       manifest
	logBytes  int64
	replaying bool

	// Lost state: invocations (and, with taintAll, any invocation of the
	// partition) created before the time given cannot be final.
	tainted  map[string]int64
	taintAll int64
	// lostAtLoad are invocations whose closed record could not be read
	// back (replay fills it, loadPartition journals the loss).
	lostAtLoad []string
}

// store is the processor's link to the storage extension.
type store struct {
	id      component.ID // the storage extension
	self    component.ID // this processor, the client's owner
	client  storage.Client
	logger  *zap.Logger
	metrics *storeMetrics

	// qmu guards queue, nextTicket, durable and lastErr. It is taken
	// under a shard's mu (records are queued in the shard's order), never
	// the other way round.
	qmu        sync.Mutex
	queue      []*pendingRecord
	nextTicket uint64
	durable    uint64
	lastErr    error

	// wmu serialises writes, so a partition's records are written in
	// order. It is never taken while a shard's mu or qmu is held.
	wmu sync.Mutex
	// cmu serialises compactions (storage_compact.go), which run beside
	// writes; taken before wmu or a shard's mu, never under them.
	cmu sync.Mutex

	compactNext int   // round robin over partitions; guarded by cmu
	compactMin  int64 // compactMinBytes; tests lower it
	loaded      bool
	shards      []*shard // the processor's, set when loading
}

func newStore(id, self component.ID, logger *zap.Logger) *store {
	return &store{id: id, self: self, logger: logger, compactMin: compactMinBytes}
}

// storeMetrics are the storage instruments, with their attribute sets
// prepared once.
type storeMetrics struct {
	invocations  metric.Int64UpDownCounter
	bytesWritten metric.Int64Counter
	writeLatency metric.Float64Histogram
	loadTime     metric.Float64Histogram
	errors       metric.Int64Counter
	errAttrs     map[string]metric.AddOption
}

func newStoreMetrics(p *invocationProcessor) *storeMetrics {
	m := &storeMetrics{
		invocations:  p.tel.ProcessorInvocationStorageInvocations,
		bytesWritten: p.tel.ProcessorInvocationStorageBytesWritten,
		writeLatency: p.tel.ProcessorInvocationStorageWriteLatency,
		loadTime:     p.tel.ProcessorInvocationStorageLoadTime,
		errors:       p.tel.ProcessorInvocationStorageErrors,
		errAttrs:     map[string]metric.AddOption{},
	}
	for _, op := range []string{opWrite, opRead, opDecode, opCompact, opDelete} {
		m.errAttrs[op] = metric.WithAttributeSet(attribute.NewSet(attribute.String("operation", op)))
	}
	return m
}

// fail counts and logs a storage error.
func (st *store) fail(ctx context.Context, op string, err error, what string) {
	st.metrics.errors.Add(ctx, 1, st.metrics.errAttrs[op])
	st.logger.Error("invocation ledger storage: "+what, zap.String("storage", st.id.String()),
		zap.String("operation", op), zap.Error(err))
}

// startStore connects to the storage extension and loads the state. A
// missing extension, or one that is not a storage extension, fails Start.
func (p *invocationProcessor) startStore(ctx context.Context, host component.Host) error {
	st := p.store
	if st.loaded {
		return nil
	}
	ext, ok := host.GetExtensions()[st.id]
	if !ok {
		return fmt.Errorf("invocation processor: storage extension %q is not configured (list it under extensions and service::extensions)", st.id)
	}
	se, ok := ext.(storage.Extension)
	if !ok {
		return fmt.Errorf("invocation processor: extension %q is not a storage extension", st.id)
	}
	client, err := se.GetClient(ctx, component.KindProcessor, st.self, "")
	if err != nil {
		return fmt.Errorf("invocation processor: storage extension %q: %w", st.id, err)
	}
	st.client = client
	st.metrics = newStoreMetrics(p)
	p.load(ctx)
	st.loaded = true
	return nil
}

// load reads every partition back and replays it. Unreadable state is
// reported and counted, never fatal: the invocations it concerned (all of
// a partition's, when which ones is unknown) can no longer be final.
func (p *invocationProcessor) load(ctx context.Context) {
	st := p.store
	began := time.Now()
	now := p.clock.Now().UnixNano()
	parts := len(p.shards)
	unreadable := false
	raw, err := st.client.Get(ctx, metaKey)
	switch {
	case err != nil:
		st.fail(ctx, opRead, err, "reading the layout failed; every stored invocation is treated as lost")
		unreadable = true
	case raw == nil:
		if err := st.client.Set(ctx, metaKey, encodeMeta(parts)); err != nil {
			st.fail(ctx, opWrite, err, "writing the layout failed")
		}
	default:
		n, err := decodeMeta(raw)
		if err != nil {
			st.fail(ctx, opDecode, err, "the stored layout is unreadable; every stored invocation is treated as lost")
			unreadable = true
		} else if n != parts {
			p.reshard(n)
		}
	}
	st.shards = p.shards
	restored := 0
	for i, s := range p.shards {
		ps := &shardPersist{part: i, store: st, trust: &p.trust, tainted: map[string]int64{}, resIndex: map[pcommon.Resource]int{}}
		s.mu.Lock()
		s.persist = ps
		s.mu.Unlock()
		p.loadPartition(ctx, s, ps, now, unreadable)
		s.accountAll()
		s.mu.Lock()
		restored += len(s.invs)
		s.mu.Unlock()
	}
	if _, err := st.commit(ctx); err != nil {
		st.fail(ctx, opWrite, err, "writing the records made while loading failed; they are retried")
	}
	st.metrics.invocations.Add(ctx, int64(restored))
	st.metrics.loadTime.Record(ctx, time.Since(began).Seconds())
	st.logger.Info("invocation ledger loaded from storage", zap.String("storage", st.id.String()),
		zap.Int("invocations", restored), zap.Int("partitions", len(p.shards)), zap.Duration("took", time.Since(began)))
}

// reshard rebuilds the shards with the stored partition count, so every
// stored partition is one shard again. It runs in Start, before any data.
func (p *invocationProcessor) reshard(n int) {
	fresh, err := newProcessor(p.set, p.config, p.next, p.clock, n)
	if err != nil {
		// The configuration was valid a moment ago in newProcessor.
		panic(fmt.Sprintf("invocation processor: rebuilding %d shards: %v", n, err))
	}
	fresh.tel.Shutdown()
	p.shards, p.bounds, p.outboxLimit = fresh.shards, fresh.bounds, fresh.outboxLimit
}

// loadPartition reads one partition (manifest, snapshot chunks, log) and
// replays it into its shard.
func (p *invocationProcessor) loadPartition(ctx context.Context, s *shard, ps *shardPersist, now int64, unreadable bool) {
	st := p.store
	var (
		ops     []storedOp
		lostIDs []string
		lostAll = unreadable
		man     manifest
		known   = !unreadable
	)
	if known {
		raw, err := st.client.Get(ctx, manifestKey(ps.part))
		switch {
		case err != nil:
			st.fail(ctx, opRead, err, fmt.Sprintf("reading partition %d's manifest failed; its invocations are treated as lost", ps.part))
			known, lostAll = false, true
		case raw != nil:
			if man, err = decodeManifest(raw); err != nil {
				st.fail(ctx, opDecode, err, fmt.Sprintf("partition %d's manifest is unreadable; its invocations are treated as lost", ps.part))
				known, lostAll = false, true
			}
		}
	}
	if !known {
		// Start the partition afresh under keys no earlier layout used;
		// what is left under the old ones is abandoned.
		man = manifest{gen: uint64(now), logStart: uint64(now)}
		if err := st.client.Set(ctx, manifestKey(ps.part), man.encode()); err != nil {
			st.fail(ctx, opWrite, err, fmt.Sprintf("writing partition %d's new manifest failed", ps.part))
		}
	} else {
		decodeInto := func(kind byte, key string, raw []byte) {
			o, ids, err := decodeOps(kind, raw)
			if err != nil {
				st.fail(ctx, opDecode, err, "stored record "+key+" is unreadable; the invocations it concerned are treated as lost")
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
			raw, err := st.client.Get(ctx, key)
			switch {
			case err != nil:
				st.fail(ctx, opRead, err, "reading snapshot chunk "+key+" failed")
				lostAll = true
			case raw == nil:
				st.fail(ctx, opDecode, fmt.Errorf("%w: snapshot chunk %s missing", errCorrupt, key), "snapshot chunk missing")
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
			if err := st.client.Batch(ctx, batch...); err != nil {
				st.fail(ctx, opRead, err, fmt.Sprintf("reading partition %d's log failed", ps.part))
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
	lostUntil := satAdd(now, satAdd(p.cfg.openTimeout, p.cfg.retention))
	s.mu.Lock()
	defer s.mu.Unlock()
	restoredOutbox, st2 := p.replay(s, ps, ops, now)
	lostIDs = append(lostIDs, ps.lostAtLoad...)
	ps.lostAtLoad = nil

	// The loss itself is journalled, so that it outlives the next restart.
	s.journalBegin()
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
	s.journalEnd(now)
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

func (st *store) deleteKeys(ctx context.Context, ops []*storage.Operation) {
	for len(ops) > 0 {
		n := min(len(ops), 4096)
		if err := st.client.Batch(ctx, ops[:n]...); err != nil {
			st.fail(ctx, opDelete, err, "deleting stale records failed")
			return
		}
		ops = ops[n:]
	}
}

// replay applies stored operations to an empty shard, under its lock:
// facts through the ledger's per-span path, recorded decisions as they
// were taken. It returns the summaries that were made and not delivered.
func (p *invocationProcessor) replay(s *shard, ps *shardPersist, ops []storedOp, now int64) ([]summary, stats) {
	var st stats
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
					err = p.restoreClosed(s, ev, m, &st)
				}
				if err != nil {
					p.store.fail(context.Background(), opDecode, err, "the stored state of closed invocation "+ev.id+" is unreadable; it is treated as lost")
					ps.lostAtLoad = append(ps.lostAtLoad, ev.id)
				}
			case evFact:
				d := decoder{b: ev.fact}
				d.facts(&facts, &p.cfg)
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
				inv := p.restoreInvocation(s, ev.id, op.time, &st)
				if d.err != nil {
					p.store.fail(context.Background(), opDecode, d.err, "a stored span of invocation "+ev.id+" is unreadable")
					taintInvocation(inv)
					continue
				}
				if ps.taintAll > op.time || ps.tainted[ev.id] > op.time {
					taintInvocation(inv)
				}
				p.limits.capNames(&facts, &p.cfg) // as routing cut them live
				inv.add(&facts, r, &s.resources, op.time, &p.cfg)
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
					p.replayEmission(s, inv, ev, op.time, &st)
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
	return out, st
}

// journalBegin starts journalling a locked section of s. mu must be held.
func (s *shard) journalBegin() {
	ps := s.persist
	if ps == nil || ps.replaying {
		return
	}
	ps.active = true
	ps.invs = len(s.invs)
	ps.mark = len(s.outbox)
	ps.observed = ps.mark
	clear(ps.op.events)
	ps.op.events = ps.op.events[:0]
	ps.op.resources = ps.op.resources[:0]
	ps.arena = ps.arena[:0]
	clear(ps.resIndex)
}

// keep copies b into the section's arena and returns the copy. A full
// arena is replaced, not grown: earlier copies stay valid in the old one.
func (ps *shardPersist) keep(b []byte) []byte {
	if len(ps.arena)+len(b) > cap(ps.arena) {
		ps.arena = make([]byte, 0, max(64<<10, 2*len(b)))
	}
	start := len(ps.arena)
	ps.arena = append(ps.arena, b...)
	return ps.arena[start:len(ps.arena):len(ps.arena)]
}

// journalFact records one span about to be indexed (before s.get, so a
// lost invocation is marked before anything can close it). mu must be held.
func (s *shard) journalFact(r *indexRef, now int64, stats *stats) {
	ps := s.persist
	if ps == nil || !ps.active {
		return
	}
	observe(s, ps)
	if ps.taintAll > now || ps.tainted[r.id] > now {
		taintInvocation(s.ensure(r.id, now, stats))
	}
	ri, ok := ps.resIndex[r.res]
	if !ok {
		ps.enc.b = ps.enc.b[:0]
		ps.enc.attrs(r.res.Attributes(), nil, 0)
		ps.op.resources = append(ps.op.resources, ps.keep(ps.enc.b))
		ri = len(ps.op.resources)
		ps.resIndex[r.res] = ri
	}
	ps.enc.b = ps.enc.b[:0]
	ps.enc.span(r.span, factAttr, linkAttr)
	ps.op.events = append(ps.op.events, storedEvent{kind: evFact, id: r.id, res: ri, fact: ps.keep(ps.enc.b)})
}

// journalForget records that inv is being forgotten. mu must be held.
func (s *shard) journalForget(inv *invocation) {
	ps := s.persist
	if ps == nil || ps.replaying {
		return
	}
	if ps.active {
		observe(s, ps)
		ps.op.events = append(ps.op.events, storedEvent{kind: evForget, id: inv.ID})
		return
	}
	// Outside a journalled section (no such path today): keep the event
	// for the shard's next record.
	ps.sent = append(ps.sent, storedEvent{kind: evForget, id: inv.ID})
}

// journalRemember records that a forgotten invocation's id is remembered
// until the given time. mu must be held, in a journalled section.
func (s *shard) journalRemember(id string, until int64) {
	ps := s.persist
	if ps == nil || !ps.active {
		return
	}
	observe(s, ps)
	ps.op.events = append(ps.op.events, storedEvent{kind: evRemember, id: id, until: until})
}

// observe journals the summaries added to the outbox since the last look.
func observe(s *shard, ps *shardPersist) {
	for ; ps.observed < len(s.outbox); ps.observed++ {
		sum := &s.outbox[ps.observed]
		ev := storedEvent{kind: evEmit, id: sum.id, status: sum.status, revision: sum.revision, summary: encodeSummary(sum, ps.trust)}
		if inv, ok := s.invs[sum.id]; ok && sum.revision == 1 {
			ev.forced = inv.Forced
		}
		ps.op.events = append(ps.op.events, ev)
	}
}

// journalEnd closes the section: the summaries it made are held back and
// its record is queued for writing. mu must be held.
func (s *shard) journalEnd(now int64) {
	ps := s.persist
	if ps == nil || !ps.active {
		return
	}
	observe(s, ps)
	ps.active = false
	if d := len(s.invs) - ps.invs; d != 0 {
		ps.store.metrics.invocations.Add(context.Background(), int64(d))
	}
	made := len(s.outbox) - ps.mark
	if made > 0 {
		ps.held = append(ps.held, s.outbox[ps.mark:]...)
		clear(s.outbox[ps.mark:])
		s.outbox = s.outbox[:ps.mark]
	}
	if len(ps.sent) > 0 {
		ps.op.events = append(ps.sent, ps.op.events...)
		ps.sent = nil
	}
	if len(ps.op.events) == 0 {
		return
	}
	ps.op.seq = ps.nextSeq
	ps.op.time = now
	ps.nextSeq++
	value := encodeOps(kindLog, []storedOp{ps.op})
	ps.unwritten++
	ps.store.enqueue(&pendingRecord{shard: ps.part, key: logKey(ps.part, ps.op.seq), value: value, held: made})
}

// journalSent records that the next consumer accepted summaries.
func (p *invocationProcessor) journalSent(s *shard, out []summary) {
	ps := s.persist
	if ps == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range out {
		ps.sent = append(ps.sent, storedEvent{kind: evSent, id: out[i].id, revision: out[i].revision, status: out[i].status})
	}
}

func (st *store) enqueue(r *pendingRecord) {
	st.qmu.Lock()
	defer st.qmu.Unlock()
	st.nextTicket++
	r.ticket = st.nextTicket
	st.queue = append(st.queue, r)
}

// lastTicket is the ticket of the latest record queued.
func (st *store) lastTicket() uint64 {
	st.qmu.Lock()
	defer st.qmu.Unlock()
	return st.nextTicket
}

// commit writes every queued record in one storage Batch, in queue order,
// and then releases the summaries they held. On failure the records stay
// queued, in order, for the next commit. It returns the shards whose
// outboxes got summaries.
func (st *store) commit(ctx context.Context) (released []int, err error) {
	st.wmu.Lock()
	defer st.wmu.Unlock()
	return st.commitLocked(ctx)
}

func (st *store) commitLocked(ctx context.Context) ([]int, error) {
	st.qmu.Lock()
	recs := st.queue
	st.queue = nil
	st.qmu.Unlock()
	if len(recs) == 0 {
		return nil, nil
	}
	ops := make([]*storage.Operation, len(recs))
	var n int64
	for i, r := range recs {
		ops[i] = storage.SetOperation(r.key, r.value)
		n += int64(len(r.value))
	}
	began := time.Now()
	err := st.client.Batch(ctx, ops...)
	st.metrics.writeLatency.Record(ctx, time.Since(began).Seconds())
	if err != nil {
		st.qmu.Lock()
		st.queue = append(recs, st.queue...)
		st.lastErr = err
		st.qmu.Unlock()
		st.fail(ctx, opWrite, err, fmt.Sprintf("writing %d ledger records failed; their batches are refused and retried", len(recs)))
		return nil, fmt.Errorf("invocation processor: writing ledger state to %s: %w", st.id, err)
	}
	st.metrics.bytesWritten.Add(ctx, n)
	st.qmu.Lock()
	st.durable = recs[len(recs)-1].ticket
	st.lastErr = nil
	st.qmu.Unlock()
	return st.release(recs), nil
}

// shards is set by the processor after the store is loaded; release needs
// them to hand held summaries to the outboxes.
func (st *store) release(recs []*pendingRecord) []int {
	var out []int
	for _, r := range recs {
		s := st.shards[r.shard]
		s.mu.Lock()
		ps := s.persist
		ps.unwritten--
		ps.logBytes += int64(len(r.value))
		if r.held > 0 {
			s.outbox = append(s.outbox, ps.held[:r.held]...)
			clear(ps.held[:r.held])
			ps.held = ps.held[r.held:]
		}
		s.mu.Unlock()
		if r.held > 0 && (len(out) == 0 || out[len(out)-1] != r.shard) {
			out = append(out, r.shard)
		}
	}
	return out
}

// commitThrough writes the queue and reports an error unless every record
// up to ticket is durable.
func (st *store) commitThrough(ctx context.Context, ticket uint64) ([]int, error) {
	released, err := st.commit(ctx)
	st.qmu.Lock()
	durable, last := st.durable, st.lastErr
	st.qmu.Unlock()
	if durable >= ticket {
		return released, nil
	}
	if err == nil {
		err = fmt.Errorf("invocation processor: ledger state not written to %s: %w", st.id, last)
	}
	return released, err
}

// ready is called before a batch is indexed: records that failed to be
// written are retried first, and while storage keeps failing new batches
// are refused before they change any state.
func (st *store) ready(ctx context.Context) error {
	if !st.loaded {
		return errNotStarted
	}
	st.qmu.Lock()
	backlog := len(st.queue) > 0 && st.lastErr != nil
	st.qmu.Unlock()
	if !backlog {
		return nil
	}
	_, err := st.commit(ctx)
	return err
}

// commitBatch makes a batch's records durable before it is acknowledged,
// and adds the shards whose summaries were released to touched.
func (p *invocationProcessor) commitBatch(ctx context.Context, touched *[]*shard) error {
	released, err := p.store.commitThrough(ctx, p.store.lastTicket())
	for _, i := range released {
		s := p.shards[i]
		if !slicesContainsShard(*touched, s) {
			*touched = append(*touched, s)
		}
	}
	return err
}

func slicesContainsShard(l []*shard, s *shard) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// storeTick runs on every tick with storage: it writes the tick's records
// (and any that failed before), sends the summaries they released, and
// compacts at most one partition.
func (p *invocationProcessor) storeTick(ctx context.Context, now int64) error {
	released, err := p.store.commit(ctx)
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, i := range released {
		errs = append(errs, p.flush(ctx, p.shards[i], flushFromTimer))
	}
	if err == nil {
		p.maybeCompact(ctx, now)
	}
	return errors.Join(errs...)
}

// closeStore journals the last delivery marks, writes everything queued and
// closes the client. Open invocations stay open: the next Start loads them.
func (p *invocationProcessor) closeStore(ctx context.Context) error {
	st := p.store
	if !st.loaded {
		return nil
	}
	now := p.clock.Now().UnixNano()
	for _, s := range p.shards {
		s.mu.Lock()
		s.journalBegin()
		s.journalEnd(now)
		s.mu.Unlock()
	}
	var errs []error
	if _, err := st.commit(ctx); err != nil {
		errs = append(errs, err)
	}
	st.cmu.Lock()
	defer st.cmu.Unlock()
	st.wmu.Lock()
	defer st.wmu.Unlock()
	if err := st.client.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("invocation processor: closing storage client: %w", err))
	}
	st.loaded = false
	return errors.Join(errs...)
}
