// Package durable is the invocation ledger's write path to its storage
// extension: a queue of log records, each one locked section of a shard,
// encoded after it is queued (not under the shard's lock) and written in
// queue order in one storage Batch per commit, with the summaries each
// record held back released only once it is written.
//
// A record is encoded by the first committer that finds it queued, before
// that committer takes the write lock: concurrent requests encode their
// records side by side, and the write lock is held for the storage write
// (and the encoding of what nobody encoded yet).
//
// It knows nothing of shards or invocations: a record names its
// partition, its key and how many summaries it holds, and the processor's
// Release hook hands those to the shard once the record is durable. The
// root package journals a shard through its shardJournal interface
// (journal.go), which queues records here; reading state back and
// compaction stay with the root package, which owns the ledger they
// replay into.
package durable // import "github.com/agentledger/agentledger/processor/invocationprocessor/internal/durable"

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/collector/extension/xextension/storage"

	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// Record is a log record waiting to be written. A shard builds it under
// its lock (Op, Arena, Summaries: plain data, owned by the record once
// queued); the Log encodes it after the shard's lock is released, in the
// first commit that finds it queued and before that commit waits for the
// write lock, so concurrent batches do not wait on the encoding.
type Record struct {
	// Part is the partition (shard) whose record this is.
	Part int
	// Key is the storage key it is written under.
	Key string
	// Held is how many summaries of the partition this record holds back
	// until it is written.
	Held int

	// Op is the locked section's operation. Its facts and resources
	// point into Arena; its EvEmit events get their summary bytes from
	// Summaries when the record is encoded.
	Op journal.Op
	// Arena holds the encoded facts and resources of Op (see Keep).
	Arena []byte
	// Summaries are the summaries made in the section, each with the
	// index of its event in Op.Events.
	Summaries []Pending

	// Value is the encoded record: set by Encode (or by the caller, for
	// a record built already encoded).
	Value []byte

	ticket uint64
	// claimed: a committer (or the writer) took the record to encode
	// it; encoded: it did. Both are guarded by the Log's qmu, and a
	// record is encoded by whoever claimed it, once.
	claimed, encoded bool
}

// Pending is a summary whose bytes its event still lacks.
type Pending struct {
	Event   int
	Summary summary.Summary
}

// recordPool keeps records, with their slices' capacity, between
// sections: a record is returned once it is written and released.
var recordPool = sync.Pool{New: func() any { return new(Record) }}

// NewRecord returns an empty record, reusing a written one's buffers.
func NewRecord() *Record { return recordPool.Get().(*Record) }

// Keep copies b into the record's arena and returns the copy. A full
// arena is replaced, not grown: earlier copies stay valid in the old one.
func (r *Record) Keep(b []byte) []byte {
	if len(r.Arena)+len(b) > cap(r.Arena) {
		r.Arena = make([]byte, 0, max(64<<10, 2*len(b)))
	}
	start := len(r.Arena)
	r.Arena = append(r.Arena, b...)
	return r.Arena[start:len(r.Arena):len(r.Arena)]
}

// Encode sets r.Value from r.Op, encoding each pending summary with
// summaryBytes first. A record already encoded (or built with its Value)
// is left as is. A queued record is encoded by the Log, by whoever claims
// it.
func (r *Record) Encode(summaryBytes func(*summary.Summary) []byte) {
	if r.Value != nil {
		return
	}
	for i := range r.Summaries {
		p := &r.Summaries[i]
		r.Op.Events[p.Event].Summary = summaryBytes(&p.Summary)
	}
	r.Value = journal.EncodeOps(journal.KindLog, []journal.Op{r.Op})
}

// Reset empties r, keeping its buffers' capacity.
func (r *Record) Reset() {
	clear(r.Op.Events)
	clear(r.Op.Resources)
	clear(r.Summaries)
	*r = Record{
		Op:        journal.Op{Events: r.Op.Events[:0], Resources: r.Op.Resources[:0]},
		Arena:     r.Arena[:0],
		Summaries: r.Summaries[:0],
	}
}

// recycle returns a written record to the pool.
func (r *Record) recycle() {
	r.Reset()
	recordPool.Put(r)
}

// Writer is what the log needs of a storage client.
type Writer interface {
	Batch(ctx context.Context, ops ...*storage.Operation) error
}

// Config is what a Log is built from.
type Config struct {
	// Name names the storage in errors.
	Name string
	// EncodeSummary encodes a summary as the record stores it.
	EncodeSummary func(*summary.Summary) []byte
	// Client writes the records.
	Client Writer
	// Release hands the summaries held by written records to their
	// partitions, in order, and returns the partitions that got some. It
	// runs after every successful write, with the write lock held (so
	// releases follow writes in order) and no other of the Log's locks.
	Release func(recs []*Record) []int
	// Written reports a successful write of n bytes, and Failed a failed
	// write of n records; both also get the write's latency.
	Written func(ctx context.Context, n int64, took time.Duration)
	Failed  func(ctx context.Context, records int, err error, took time.Duration)
}

// Log is the queue of records and their writer. Records are queued under
// their shard's lock, in the shard's order, and written later by Commit.
type Log struct {
	cfg Config

	// qmu guards queue, claimed, nextTicket, durable and lastErr. It is taken
	// under a shard's lock (records are queued in the shard's order),
	// never the other way round.
	qmu   sync.Mutex
	queue []*Record
	// claimed is how many records at the head of the queue a committer
	// has taken to encode (or were encoded by a write that failed); the
	// rest are waiting for one.
	claimed    int
	nextTicket uint64
	durable    uint64
	lastErr    error
	// encodedCond, on qmu, is signalled when a claimed record is encoded.
	encodedCond sync.Cond

	// wmu serialises writes, so a partition's records are written in
	// order. It is never taken while a shard's lock or qmu is held.
	wmu sync.Mutex
}

// New returns an empty Log.
func New(cfg Config) *Log {
	l := &Log{cfg: cfg}
	l.encodedCond.L = &l.qmu
	return l
}

// Enqueue queues r to be written after every record queued before it.
func (l *Log) Enqueue(r *Record) {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	l.nextTicket++
	r.ticket = l.nextTicket
	l.queue = append(l.queue, r)
}

// LastTicket is the ticket of the latest record queued.
func (l *Log) LastTicket() uint64 {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	return l.nextTicket
}

// Commit writes every queued record in one storage Batch, in queue order,
// and then releases the summaries they held. On failure the records stay
// queued, in order, for the next commit. It returns the partitions that
// got summaries. Before it waits for the write lock it encodes the queued
// records no other committer took.
func (l *Log) Commit(ctx context.Context) (released []int, err error) {
	l.encodeUnclaimed()
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.commitLocked(ctx)
}

// encodeUnclaimed encodes, one at a time and outside every lock of the
// Log, the queued records no committer has taken yet.
func (l *Log) encodeUnclaimed() {
	for {
		l.qmu.Lock()
		if l.claimed >= len(l.queue) {
			l.qmu.Unlock()
			return
		}
		r := l.queue[l.claimed]
		l.claimed++
		r.claimed = true
		l.qmu.Unlock()
		l.encode(r)
	}
}

// encode encodes a record its caller claimed and says so. After it the
// caller does not touch r: the writer may recycle it.
func (l *Log) encode(r *Record) {
	r.Encode(l.cfg.EncodeSummary)
	l.qmu.Lock()
	r.encoded = true
	l.encodedCond.Broadcast()
	l.qmu.Unlock()
}

// encoded makes sure a record taken for writing is encoded: the writer
// encodes it if nobody claimed it, else waits for its claimer.
func (l *Log) encoded(r *Record) {
	l.qmu.Lock()
	if !r.claimed {
		r.claimed = true
		l.qmu.Unlock()
		l.encode(r)
		return
	}
	for !r.encoded {
		l.encodedCond.Wait()
	}
	l.qmu.Unlock()
}

func (l *Log) commitLocked(ctx context.Context) ([]int, error) {
	l.qmu.Lock()
	recs := l.queue
	l.queue, l.claimed = nil, 0
	l.qmu.Unlock()
	if len(recs) == 0 {
		return nil, nil
	}
	ops := make([]*storage.Operation, len(recs))
	var n int64
	for i, r := range recs {
		l.encoded(r)
		ops[i] = storage.SetOperation(r.Key, r.Value)
		n += int64(len(r.Value))
	}
	began := time.Now()
	err := l.cfg.Client.Batch(ctx, ops...)
	took := time.Since(began)
	if err != nil {
		l.qmu.Lock()
		// Encoded now, so claimed: the head of the queue again, before
		// the records queued (and maybe claimed) meanwhile.
		l.queue = append(recs, l.queue...)
		l.claimed += len(recs)
		l.lastErr = err
		l.qmu.Unlock()
		l.cfg.Failed(ctx, len(recs), err, took)
		return nil, fmt.Errorf("invocation processor: writing ledger state to %s: %w", l.cfg.Name, err)
	}
	l.cfg.Written(ctx, n, took)
	l.qmu.Lock()
	l.durable = recs[len(recs)-1].ticket
	l.lastErr = nil
	l.qmu.Unlock()
	released := l.cfg.Release(recs)
	for _, r := range recs {
		r.recycle()
	}
	return released, nil
}

// CommitThrough writes the queue and reports an error unless every record
// up to ticket is durable.
func (l *Log) CommitThrough(ctx context.Context, ticket uint64) ([]int, error) {
	released, err := l.Commit(ctx)
	l.qmu.Lock()
	durable, last := l.durable, l.lastErr
	l.qmu.Unlock()
	if durable >= ticket {
		return released, nil
	}
	if err == nil {
		err = fmt.Errorf("invocation processor: ledger state not written to %s: %w", l.cfg.Name, last)
	}
	return released, err
}

// Backlog reports whether records that failed to be written are still
// queued.
func (l *Log) Backlog() bool {
	l.qmu.Lock()
	defer l.qmu.Unlock()
	return len(l.queue) > 0 && l.lastErr != nil
}

// Exclusive runs fn with no write in progress or begun (closing the
// client).
func (l *Log) Exclusive(fn func()) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	fn()
}
