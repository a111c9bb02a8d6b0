package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// A closed invocation is journalled, at compaction, as one record of its
// whole state (evClosed) instead of its spans: what dedupe and revisions
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
	e := encoder{b: b}
	for _, v := range []int64{inv.FirstArrival, inv.LastSummary, inv.RootArrival, inv.Revision} {
		e.varint(v)
	}
	var flags byte
	if inv.PendingSent {
		flags |= closedPendingSent
	}
	e.byte1(flags)
	e.traceID(inv.RootTraceID)
	e.spanID(inv.RootSpanID)
	e.str(inv.ConversationID)
	e.str(inv.AgentName)
	e.str(inv.Forced)
	e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(inv.Cost))
	e.uvarint(uint64(len(inv.ContinuationRoots)))
	for _, r := range inv.ContinuationRoots {
		e.traceID(r.TraceID)
		e.spanID(r.SpanID)
	}
	e.uvarint(uint64(len(inv.JobTimes)))
	for _, j := range inv.JobTimes {
		e.spanID(j.SpanID)
		e.uvarint(j.Start)
		e.uvarint(j.End)
	}
	return inv.AppendState(e.b)
}

// decodeClosed reads what encodeClosed wrote into a new closed invocation.
func decodeClosed(id string, b []byte) (*invocation, error) {
	d := decoder{b: b}
	inv := &invocation{ID: id, Phase: phaseClosed, index: invIndex{heapIdx: -1}}
	for _, p := range []*int64{&inv.FirstArrival, &inv.LastSummary, &inv.RootArrival, &inv.Revision} {
		*p = d.varint()
	}
	flags := d.byte1()
	if flags&^closedPendingSent != 0 {
		d.fail("bad closed invocation flags %#x", flags)
	}
	inv.PendingSent = flags&closedPendingSent != 0
	inv.RootTraceID = d.traceID()
	inv.RootSpanID = d.spanID()
	inv.ConversationID = d.str()
	inv.AgentName = d.str()
	inv.Forced = d.str()
	if p := d.fixed(8); p != nil {
		inv.Cost = math.Float64frombits(binary.LittleEndian.Uint64(p))
	}
	if n := d.count(24); n > 0 {
		inv.ContinuationRoots = make([]spanRef, n)
		for i := range inv.ContinuationRoots {
			inv.ContinuationRoots[i] = spanRef{TraceID: d.traceID(), SpanID: d.spanID()}
		}
	}
	if n := d.count(10); n > 0 {
		inv.JobTimes = make([]jobTimes, n)
		for i := range inv.JobTimes {
			inv.JobTimes[i] = jobTimes{SpanID: d.spanID(), Start: d.uvarint(), End: d.uvarint()}
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	rest, err := inv.DecodeState(d.b[d.off:])
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errCorrupt, err)
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes after a closed invocation", errCorrupt, len(rest))
	}
	// The timeline's span records are a view and not stored (they would
	// double the record): the page of an invocation restored from its
	// closed record draws its summary and says that its spans are not
	// drawn.
	inv.Timeline.omitted = inv.Indexed
	return inv, nil
}

// closedRecords returns one operation holding every closed invocation of
// s, earliest closed first, as the journal up to seq leaves them, and
// their ids. mu must be held, with every record of the partition written.
func closedRecords(s *shard, seq uint64, now int64) (storedOp, map[string]bool) {
	op := storedOp{seq: seq, time: now}
	ids := map[string]bool{}
	resIndex := map[uintptr]int{}
	var enc encoder
	for inv := s.closed.head; inv != nil; inv = inv.index.next {
		ev := storedEvent{kind: evClosed, id: inv.ID}
		if inv.Resource != nil {
			key := reflect.ValueOf(inv.Resource).Pointer()
			ri, ok := resIndex[key]
			if !ok {
				m := pcommon.NewMap()
				_ = m.FromRaw(inv.Resource) // it was made by AsRaw
				enc.b = enc.b[:0]
				enc.attrs(m, nil, 0)
				op.resources = append(op.resources, append([]byte(nil), enc.b...))
				ri = len(op.resources)
				resIndex[key] = ri
			}
			ev.res = ri
		}
		ev.fact = encodeClosed(nil, inv)
		op.events = append(op.events, ev)
		ids[inv.ID] = true
	}
	return op, ids
}

// withoutClosedFacts drops, from compacted operations, what a closed
// record replaces: the facts of the invocations in closed and their
// delivered summaries, and their records of an earlier compaction; an
// undelivered summary stays, detached, to be re-sent.
func withoutClosedFacts(ops []storedOp, closed map[string]bool) []storedOp {
	out := ops[:0]
	for i := range ops {
		op := ops[i]
		events := op.events[:0]
		for _, ev := range op.events {
			if closed[ev.id] && ev.kind != evTaintAll {
				switch ev.kind {
				case evFact, evClosed:
					continue
				case evEmit:
					if ev.flags&emitSent != 0 {
						continue
					}
					ev.flags |= emitDetached
				}
			}
			events = append(events, ev)
		}
		op.events = events
		if len(op.events) > 0 {
			out = append(out, op)
		}
	}
	return out
}

// restoreClosed re-creates a closed invocation from its record, in the
// shard's closed list after those restored before it, as closeInvocation
// left it. mu must be held.
func (p *invocationProcessor) restoreClosed(s *shard, ev *storedEvent, res map[string]any, stats *stats) error {
	inv, err := decodeClosed(ev.id, ev.fact)
	if err != nil {
		return err
	}
	if old, ok := s.invs[ev.id]; ok {
		s.forget(old) // not expected: a record names the latest incarnation
	}
	inv.Resource = res
	inv.index.seq = s.bounds.seq.Add(1)
	s.invs[inv.ID] = inv
	s.closed.pushBack(inv)
	s.bounds.closed.Add(1)
	tenant, _ := parseLedgerKey(inv.ID)
	ts := s.bounds.tenant(tenant)
	inv.index.tenant = ts
	ts.closed.Add(1)
	s.lists(ts).closed.pushBack(inv)
	s.names.shareNames(inv)
	stats.opened++
	stats.closed++
	return nil
}
