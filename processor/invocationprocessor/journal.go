package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"context"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/durable"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// shardJournal is the layer a shard calls to make its locked sections durable:
// one call where a section begins and ends, one per span indexed, per
// invocation forgotten, per id remembered, and one when the next consumer
// accepted summaries. Without storage it is noJournal; with storage it is
// the shard's *shardPersist (internal/durable writes what it queues). Every method
// but sent runs with the shard's mu held; sent takes it.
type shardJournal interface {
	begin(s *shard)
	fact(s *shard, r *indexRef, now int64, stats *stats)
	forget(s *shard, inv *invocation)
	remember(s *shard, id string, until int64)
	end(s *shard, now int64)
	sent(s *shard, out []summary.Summary)
}

// noJournal is the journal of a processor without storage: it records
// nothing.
type noJournal struct{}

func (noJournal) begin(*shard)                          {}
func (noJournal) fact(*shard, *indexRef, int64, *stats) {}
func (noJournal) forget(*shard, *invocation)            {}
func (noJournal) remember(*shard, string, int64)        {}
func (noJournal) end(*shard, int64)                     {}
func (noJournal) sent(*shard, []summary.Summary)        {}

var (
	_ shardJournal = noJournal{}
	_ shardJournal = (*shardPersist)(nil)
)

// shardPersist is one shard's journal and the state of its partition. It
// is guarded by the shard's mu.
type shardPersist struct {
	part  int
	store *store

	// The current locked section.
	active   bool
	observed int // outbox length already journalled
	mark     int // outbox length when the section began
	// rec is the section's record: its operation, the arena of its
	// encoded facts and resources, and its summaries, which the durable
	// log encodes once it is queued (after the lock is released).
	rec      *durable.Record
	resIndex map[pcommon.Resource]int
	enc      journal.Encoder

	// marks are delivery marks (and forgets outside a section)
	// waiting for the shard's next record.
	marks []journal.Event
	// held are summaries made but not yet durable, in order.
	held []summary.Summary
	// unwritten counts queued records.
	unwritten int

	// Partition layout.
	nextSeq   uint64
	invs      int // len(s.invs) when the section began, for the metric
	man       journal.Manifest
	logBytes  int64
	replaying bool

	// Lost state: invocations (and, with taintAll, any invocation of the
	// partition) created before the time given cannot be final.
	tainted  map[string]int64
	taintAll int64
	// lostAtLoad are invocations whose closed record could not be read
	// back (replay fills it, loadPartition journals the loss).
	lostAtLoad []string
	// loadKeys names the stored record of each operation read, by
	// sequence number, while the partition loads (for the log).
	loadKeys map[uint64]string
}

// begin starts journalling a locked section of s.
func (ps *shardPersist) begin(s *shard) {
	if ps.replaying {
		return
	}
	ps.active = true
	ps.invs = len(s.invs)
	ps.mark = len(s.outbox)
	ps.observed = ps.mark
	if ps.rec == nil {
		ps.rec = durable.NewRecord()
	} else {
		ps.rec.Reset()
	}
	clear(ps.resIndex)
}

// fact records one span about to be indexed (before s.ensure, so a lost
// invocation is marked before anything can close it). Its bytes were
// encoded before the lock (encodeFacts); here they are only copied into
// the record.
func (ps *shardPersist) fact(s *shard, r *indexRef, now int64, stats *stats) {
	if !ps.active {
		return
	}
	ps.observe(s)
	if ps.taintAll > now || ps.tainted[r.id] > now {
		taintInvocation(s.ensure(r.id, now, stats))
	}
	st := r.stored
	if st == nil {
		// Not encoded before the lock (no path does this today): encode
		// it now, as encodeFacts would have.
		st = &storedFact{}
		ps.enc.B, ps.enc.Err = ps.enc.B[:0], nil
		if st.res, st.err = encodeResource(&ps.enc, r.res); st.err == nil {
			st.fact, st.err = encodeFact(&ps.enc, r)
		}
	}
	if st.err != nil {
		ps.unstorable(s, r, st.err, now, stats)
		return
	}
	ri, ok := ps.resIndex[r.res]
	if !ok {
		ps.rec.Op.Resources = append(ps.rec.Op.Resources, ps.rec.Keep(st.res))
		ri = len(ps.rec.Op.Resources)
		ps.resIndex[r.res] = ri
	}
	ps.rec.Op.Events = append(ps.rec.Op.Events, journal.Event{Kind: journal.EvFact, ID: r.id, Res: ri, Fact: ps.rec.Keep(st.fact)})
}

// unstorable fails closed on a span the encoder could not store, which
// the accept path (accept.go) refuses before it gets here: its invocation
// is marked lost now and in the journal, so that it can never be final,
// live or after a restart.
func (ps *shardPersist) unstorable(s *shard, r *indexRef, err error, now int64, stats *stats) {
	ps.store.fail(context.Background(), opWrite, err, "a span of invocation "+r.id+" cannot be stored; the invocation is treated as lost")
	taintInvocation(s.ensure(r.id, now, stats))
	until := satAdd(now, satAdd(s.cfg.openTimeout, s.cfg.retention))
	ps.tainted[r.id] = max(ps.tainted[r.id], until)
	ps.rec.Op.Events = append(ps.rec.Op.Events, journal.Event{Kind: journal.EvTaint, ID: r.id, Until: until})
}

// forget records that inv is being forgotten.
func (ps *shardPersist) forget(s *shard, inv *invocation) {
	if ps.replaying {
		return
	}
	if ps.active {
		ps.observe(s)
		ps.rec.Op.Events = append(ps.rec.Op.Events, journal.Event{Kind: journal.EvForget, ID: inv.ID})
		return
	}
	// Outside a journalled section (no such path today): keep the event
	// for the shard's next record.
	ps.marks = append(ps.marks, journal.Event{Kind: journal.EvForget, ID: inv.ID})
}

// remember records that a forgotten invocation's id is remembered until
// the given time, in a journalled section.
func (ps *shardPersist) remember(s *shard, id string, until int64) {
	if !ps.active {
		return
	}
	ps.observe(s)
	ps.rec.Op.Events = append(ps.rec.Op.Events, journal.Event{Kind: journal.EvRemember, ID: id, Until: until})
}

// observe journals the summaries added to the outbox since the last look.
// Their bytes are encoded with the record, after the lock is released: a
// summary is plain data once made.
func (ps *shardPersist) observe(s *shard) {
	for ; ps.observed < len(s.outbox); ps.observed++ {
		sum := &s.outbox[ps.observed]
		ev := journal.Event{Kind: journal.EvEmit, ID: sum.ID, Status: sum.Status, Revision: sum.Revision}
		if inv, ok := s.invs[sum.ID]; ok && sum.Revision == 1 {
			ev.Forced = inv.Forced
		}
		ps.rec.Summaries = append(ps.rec.Summaries, durable.Pending{Event: len(ps.rec.Op.Events), Summary: *sum})
		ps.rec.Op.Events = append(ps.rec.Op.Events, ev)
	}
}

// end closes the section: the summaries it made are held back and its
// record is queued for writing.
func (ps *shardPersist) end(s *shard, now int64) {
	if !ps.active {
		return
	}
	ps.observe(s)
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
	rec := ps.rec
	if len(ps.marks) > 0 {
		rec.Op.Events = append(ps.marks, rec.Op.Events...)
		for i := range rec.Summaries {
			rec.Summaries[i].Event += len(ps.marks)
		}
		ps.marks = nil
	}
	if len(rec.Op.Events) == 0 {
		return
	}
	rec.Op.Seq = ps.nextSeq
	rec.Op.Time = now
	ps.nextSeq++
	rec.Part, rec.Key, rec.Held = ps.part, journal.LogKey(ps.part, rec.Op.Seq), made
	ps.unwritten++
	ps.rec = nil // the log owns it now, and encodes it before it writes it
	ps.store.log.Enqueue(rec)
}

// sent records that the next consumer accepted summaries.
func (ps *shardPersist) sent(s *shard, out []summary.Summary) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range out {
		ps.marks = append(ps.marks, journal.Event{Kind: journal.EvSent, ID: out[i].ID, Revision: out[i].Revision, Status: out[i].Status})
	}
}

// partition is the shard's journal with storage. Only storage code, which
// runs after load set it, calls it.
func (s *shard) partition() *shardPersist { return s.journal.(*shardPersist) }
