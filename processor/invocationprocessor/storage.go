package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/durable"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
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

// store is the processor's link to the storage extension.
type store struct {
	id      component.ID // the storage extension
	self    component.ID // this processor, the client's owner
	client  storage.Client
	logger  *zap.Logger
	metrics *storeMetrics

	// log queues and writes the shards' records (internal/durable); set
	// when the client is.
	log *durable.Log
	// cmu serialises compactions (storage_compact.go), which run beside
	// writes; taken before the log's write lock or a shard's mu, never
	// under them.
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
func (db *store) fail(ctx context.Context, op string, err error, what string) {
	db.metrics.errors.Add(ctx, 1, db.metrics.errAttrs[op])
	db.logger.Error("invocation ledger storage: "+what, zap.String("storage", db.id.String()),
		zap.String("operation", op), zap.Error(err))
}

// startStore connects to the storage extension and loads the state. A
// missing extension, or one that is not a storage extension, fails Start.
func (p *invocationProcessor) startStore(ctx context.Context, host component.Host) error {
	db := p.store
	if db.loaded {
		return nil
	}
	ext, ok := host.GetExtensions()[db.id]
	if !ok {
		return fmt.Errorf("invocation processor: storage extension %q is not configured (list it under extensions and service::extensions)", db.id)
	}
	se, ok := ext.(storage.Extension)
	if !ok {
		return fmt.Errorf("invocation processor: extension %q is not a storage extension", db.id)
	}
	client, err := se.GetClient(ctx, component.KindProcessor, db.self, "")
	if err != nil {
		return fmt.Errorf("invocation processor: storage extension %q: %w", db.id, err)
	}
	db.client = client
	db.metrics = newStoreMetrics(p)
	db.log = durable.New(durable.Config{
		Name:          db.id.String(),
		EncodeSummary: encodeSummary,
		Client:        client,
		Release:       db.release,
		Written: func(ctx context.Context, n int64, took time.Duration) {
			db.metrics.writeLatency.Record(ctx, took.Seconds())
			db.metrics.bytesWritten.Add(ctx, n)
		},
		Failed: func(ctx context.Context, records int, err error, took time.Duration) {
			db.metrics.writeLatency.Record(ctx, took.Seconds())
			db.fail(ctx, opWrite, err, fmt.Sprintf("writing %d ledger records failed; their batches are refused and retried", records))
		},
	})
	p.load(ctx)
	db.loaded = true
	return nil
}

// load reads every partition back and replays it. Unreadable state is
// reported and counted, never fatal: the invocations it concerned (all of
// a partition's, when which ones is unknown) can no longer be final.
func (p *invocationProcessor) load(ctx context.Context) {
	db := p.store
	began := time.Now()
	now := p.clock.Now().UnixNano()
	parts := len(p.shards)
	unreadable := false
	raw, err := db.client.Get(ctx, journal.MetaKey)
	switch {
	case err != nil:
		db.fail(ctx, opRead, err, "reading the layout failed; every stored invocation is treated as lost")
		unreadable = true
	case raw == nil:
		if err := db.client.Set(ctx, journal.MetaKey, journal.EncodeMeta(parts)); err != nil {
			db.fail(ctx, opWrite, err, "writing the layout failed")
		}
	default:
		n, err := journal.DecodeMeta(raw)
		if err != nil {
			db.fail(ctx, opDecode, err, "the stored layout is unreadable; every stored invocation is treated as lost")
			unreadable = true
		} else if n != parts {
			p.reshard(n)
		}
	}
	db.shards = p.shards
	restored := 0
	for i, s := range p.shards {
		ps := &shardPersist{part: i, store: db, tainted: map[string]int64{}, resIndex: map[pcommon.Resource]int{}}
		s.mu.Lock()
		s.journal = ps
		s.mu.Unlock()
		p.loadPartition(ctx, s, ps, now, unreadable)
		s.accountAll()
		s.mu.Lock()
		restored += len(s.invs)
		s.mu.Unlock()
	}
	if _, err := db.log.Commit(ctx); err != nil {
		db.fail(ctx, opWrite, err, "writing the records made while loading failed; they are retried")
	}
	db.metrics.invocations.Add(ctx, int64(restored))
	db.metrics.loadTime.Record(ctx, time.Since(began).Seconds())
	db.logger.Info("invocation ledger loaded from storage", zap.String("storage", db.id.String()),
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

// shards is set by the processor after the store is loaded; release needs
// them to hand held summaries to the outboxes.
func (db *store) release(recs []*durable.Record) []int {
	var out []int
	for _, r := range recs {
		s := db.shards[r.Part]
		s.mu.Lock()
		ps := s.partition()
		ps.unwritten--
		ps.logBytes += int64(len(r.Value))
		if r.Held > 0 {
			s.outbox = append(s.outbox, ps.held[:r.Held]...)
			clear(ps.held[:r.Held])
			ps.held = ps.held[r.Held:]
		}
		s.mu.Unlock()
		if r.Held > 0 && (len(out) == 0 || out[len(out)-1] != r.Part) {
			out = append(out, r.Part)
		}
	}
	return out
}

// ready is called before a batch is indexed: records that failed to be
// written are retried first, and while storage keeps failing new batches
// are refused before they change any state.
func (db *store) ready(ctx context.Context) error {
	if !db.loaded {
		return errNotStarted
	}
	if !db.log.Backlog() {
		return nil
	}
	_, err := db.log.Commit(ctx)
	return err
}

// commitBatch makes a batch's records durable before it is acknowledged,
// and adds the shards whose summaries were released to touched.
func (p *invocationProcessor) commitBatch(ctx context.Context, touched *[]*shard) error {
	released, err := p.store.log.CommitThrough(ctx, p.store.log.LastTicket())
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
	released, err := p.store.log.Commit(ctx)
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
	db := p.store
	if !db.loaded {
		return nil
	}
	now := p.clock.Now().UnixNano()
	for _, s := range p.shards {
		s.mu.Lock()
		s.journal.begin(s)
		s.journal.end(s, now)
		s.mu.Unlock()
	}
	var errs []error
	if _, err := db.log.Commit(ctx); err != nil {
		errs = append(errs, err)
	}
	db.cmu.Lock()
	defer db.cmu.Unlock()
	db.log.Exclusive(func() {
		if err := db.client.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("invocation processor: closing storage client: %w", err))
		}
	})
	db.loaded = false
	return errors.Join(errs...)
}

// maxPooledStoredBytes bounds the encoded facts a pooled batch scratch
// keeps between calls; a larger buffer is dropped with the call.
const maxPooledStoredBytes = 1 << 20

// storedFact is what the journal stores of one member span: its facts
// (journal.Encoder.Fact) and its resource's attributes, or the error that
// kept them from being encoded.
type storedFact struct {
	fact, res []byte
	err       error
}

// encodeFacts encodes what the journal stores of each member span of the
// batch (b.refs), before any shard's lock is taken: the spans are read
// while the request is the processor's (ConsumeTraces has not passed it
// on), and the shard's locked section only copies the bytes into its
// record (shardPersist.fact), so a record never points into the request,
// whatever becomes of the request after ConsumeTraces returns (a failed
// write keeps the record queued). A resource is encoded once for a run of
// spans that share it.
func (db *store) encodeFacts(b *batchScratch) {
	if cap(b.stored) < len(b.refs) {
		b.stored = make([]storedFact, 0, len(b.refs))
	}
	b.stored = b.stored[:len(b.refs)] // sized first: refs point into it
	e := journal.Encoder{B: b.storedBytes[:0]}
	var res []byte
	var resErr error
	for i := range b.refs {
		r := &b.refs[i]
		st := &b.stored[i]
		if i == 0 || r.res != b.refs[i-1].res {
			res, resErr = encodeResource(&e, r.res)
		}
		st.res = res
		st.err = resErr
		if resErr == nil {
			st.fact, st.err = encodeFact(&e, r)
		}
		r.stored = st
	}
	b.storedBytes = e.B
}

// encodeResource appends a resource's attributes to e.B and returns them,
// or the encoder's error with e.B as it was.
func encodeResource(e *journal.Encoder, res pcommon.Resource) ([]byte, error) {
	start := len(e.B)
	e.Attrs(res.Attributes(), nil, 0)
	return encoded(e, start)
}

// encodeFact appends a span's facts to e.B and returns them, or the
// encoder's error with e.B as it was.
func encodeFact(e *journal.Encoder, r *indexRef) ([]byte, error) {
	start := len(e.B)
	_, id := summary.SplitKey(r.id)
	e.Fact(r.span, id)
	return encoded(e, start)
}

// encoded returns what e wrote since start, capped so an append to it
// cannot reach what comes after, or e's error, undoing the write.
func encoded(e *journal.Encoder, start int) ([]byte, error) {
	if err := e.Err; err != nil {
		e.B, e.Err = e.B[:start], nil
		return nil, err
	}
	return e.B[start:len(e.B):len(e.B)], nil
}
