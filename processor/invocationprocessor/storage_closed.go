package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// A closed invocation is journalled, at compaction, as one record of its
// whole state (EvClosed) instead of its spans: what dedupe and revisions
// need (its span IDs in compact form, totals, names, emitted revision),
// about a tenth of the facts it replaces. Open invocations keep their
// facts, replayed through the reader (CONTRACT.md v0.6 rule 7); a closed
// one is no longer read again, only extended by late spans, which its
// Graph answers as the original would (ledgerrule.Graph.DecodeState).

// closedFlags in a stored closed invocation.
const closedPendingSent = 1

// encodeClosed appends a closed invocation's state (all but its ID and
// resource, which the event carries) to b.
func encodeClosed(b []byte, inv *invocation) []byte {
	e := journal.Encoder{B: b}
	for _, v := range []int64{inv.FirstArrival, inv.LastSummary, inv.RootArrival, inv.Revision} {
		e.Varint(v)
	}
	var flags byte
	if inv.PendingSent {
		flags |= closedPendingSent
	}
	e.Byte1(flags)
	e.TraceID(inv.RootTraceID)
	e.SpanID(inv.RootSpanID)
	e.Str(inv.ConversationID)
	e.Str(inv.AgentName)
	e.Str(inv.Forced)
	e.B = binary.LittleEndian.AppendUint64(e.B, math.Float64bits(inv.Cost))
	e.Uvarint(uint64(len(inv.ContinuationRoots)))
	for _, r := range inv.ContinuationRoots {
		e.TraceID(r.TraceID)
		e.SpanID(r.SpanID)
	}
	e.Uvarint(uint64(len(inv.JobTimes)))
	for _, j := range inv.JobTimes {
		e.SpanID(j.SpanID)
		e.Uvarint(j.Start)
		e.Uvarint(j.End)
	}
	return inv.AppendState(e.B)
}

// decodeClosed reads what encodeClosed wrote into a new closed invocation.
func decodeClosed(id string, b []byte) (*invocation, error) {
	d := journal.Decoder{B: b}
	inv := &invocation{ID: id, Phase: phaseClosed, index: invIndex{heapIdx: -1}}
	for _, p := range []*int64{&inv.FirstArrival, &inv.LastSummary, &inv.RootArrival, &inv.Revision} {
		*p = d.Varint()
	}
	flags := d.Byte1()
	if flags&^closedPendingSent != 0 {
		d.Fail("bad closed invocation flags %#x", flags)
	}
	inv.PendingSent = flags&closedPendingSent != 0
	inv.RootTraceID = d.TraceID()
	inv.RootSpanID = d.SpanID()
	inv.ConversationID = d.Str()
	inv.AgentName = d.Str()
	inv.Forced = d.Str()
	if p := d.Fixed(8); p != nil {
		inv.Cost = math.Float64frombits(binary.LittleEndian.Uint64(p))
	}
	if n := d.Count(24); n > 0 {
		inv.ContinuationRoots = make([]summary.SpanRef, n)
		for i := range inv.ContinuationRoots {
			inv.ContinuationRoots[i] = summary.SpanRef{TraceID: d.TraceID(), SpanID: d.SpanID()}
		}
	}
	if n := d.Count(10); n > 0 {
		inv.JobTimes = make([]jobTimes, n)
		for i := range inv.JobTimes {
			inv.JobTimes[i] = jobTimes{SpanID: d.SpanID(), Start: d.Uvarint(), End: d.Uvarint()}
		}
	}
	if d.Err != nil {
		return nil, d.Err
	}
	rest, err := inv.DecodeState(d.Rest())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", journal.ErrCorrupt, err)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes after a closed invocation", journal.ErrCorrupt, len(rest))
	}
	// The timeline's span records are a view and not stored (they would
	// double the record): the page of an invocation restored from its
	// closed record draws its summary and says that its spans are not
	// drawn.
	inv.timelineNotStored()
	return inv, nil
}

// closedRecords returns one operation holding every closed invocation of
// s, earliest closed first, as the journal up to seq leaves them, and
// their ids. mu must be held, with every record of the partition written.
func closedRecords(s *shard, seq uint64, now int64) (journal.Op, map[string]bool) {
	op := journal.Op{Seq: seq, Time: now}
	ids := map[string]bool{}
	resIndex := map[uintptr]int{}
	var enc journal.Encoder
	for inv := s.closed.head; inv != nil; inv = inv.index.next {
		ev := journal.Event{Kind: journal.EvClosed, ID: inv.ID}
		if inv.Resource != nil {
			key := reflect.ValueOf(inv.Resource).Pointer()
			ri, ok := resIndex[key]
			if !ok {
				m := pcommon.NewMap()
				_ = m.FromRaw(inv.Resource) // it was made by AsRaw
				enc.B = enc.B[:0]
				enc.Attrs(m, nil, 0)
				op.Resources = append(op.Resources, append([]byte(nil), enc.B...))
				ri = len(op.Resources)
				resIndex[key] = ri
			}
			ev.Res = ri
		}
		ev.Fact = encodeClosed(nil, inv)
		op.Events = append(op.Events, ev)
		ids[inv.ID] = true
	}
	return op, ids
}

// withoutClosedFacts drops, from compacted operations, what a closed
// record replaces: the facts of the invocations in closed and their
// delivered summaries, and their records of an earlier compaction; an
// undelivered summary stays, detached, to be re-sent.
func withoutClosedFacts(ops []journal.Op, closed map[string]bool) []journal.Op {
	out := ops[:0]
	for i := range ops {
		op := ops[i]
		events := op.Events[:0]
		for _, ev := range op.Events {
			if closed[ev.ID] && ev.Kind != journal.EvTaintAll {
				switch ev.Kind {
				case journal.EvFact, journal.EvClosed:
					continue
				case journal.EvEmit:
					if ev.Flags&journal.EmitSent != 0 {
						continue
					}
					ev.Flags |= journal.EmitDetached
				}
			}
			events = append(events, ev)
		}
		op.Events = events
		if len(op.Events) > 0 {
			out = append(out, op)
		}
	}
	return out
}

// restoreClosed re-creates a closed invocation from its record, in the
// shard's closed list after those restored before it, as closeInvocation
// left it. mu must be held.
func (p *invocationProcessor) restoreClosed(s *shard, ev *journal.Event, res map[string]any, stats *stats) error {
	inv, err := decodeClosed(ev.ID, ev.Fact)
	if err != nil {
		return err
	}
	if old, ok := s.invs[ev.ID]; ok {
		s.forget(old) // not expected: a record names the latest incarnation
	}
	inv.Resource = res
	inv.index.seq = s.bounds.seq.Add(1)
	s.invs[inv.ID] = inv
	s.closed.pushBack(inv)
	s.bounds.closed.Add(1)
	tenant, _ := summary.SplitKey(inv.ID)
	ts := s.bounds.tenant(tenant)
	inv.index.tenant = ts
	ts.closed.Add(1)
	s.lists(ts).closed.pushBack(inv)
	s.names.shareNames(inv)
	stats.opened++
	stats.closed++
	return nil
}
