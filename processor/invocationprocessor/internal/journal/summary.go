package journal // import "github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"

import (
	"encoding/binary"
	"math"

	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// A summary not yet delivered is stored as its fields (Encoder.Summary),
// from which summary.Build makes the span again on a restart: the span the
// next consumer would have got live, without building it to store it.
// Summaries stored before were the built span itself (its resource's
// attributes, then Encoder.Span); those still read as they did, through
// the caller's own decoder (the processor's storage_summary.go), and
// IsSummaryFields tells the two apart.
//
// The fields begin as an old-form summary span would: a resource of no
// attributes, a trace ID, a span ID (here the parent's) and span flags,
// which here carry spanSummaryFields. A reader older than the fields
// reads the flags as a span's, rejects the unknown bit ("bad span flags")
// and makes the summary again from its restored state, as for any
// unreadable summary: it fails closed rather than misread the bytes.
const (
	// summaryFieldsAt is the offset of the flags byte.
	summaryFieldsAt = 1 + 16 + 8
	// Flags after spanSummaryFields: what optional fields follow.
	summaryHasTimeToFinal = 1 << 0
	summaryHasCost        = 1 << 1
	summaryFlagsKnown     = spanSummaryFields | summaryHasTimeToFinal | summaryHasCost
)

// IsSummaryFields reports whether a stored summary holds its fields
// (Encoder.Summary) rather than a summary span of the older form.
func IsSummaryFields(b []byte) bool {
	return len(b) > summaryFieldsAt && b[0] == 0 && b[summaryFieldsAt]&spanSummaryFields != 0
}

// Summary writes what summary.Build reads of s, but for what the
// summary's event already holds: its ID (the ledger key), status and
// revision. Integers are varints, the end time is stored as its distance
// from the start, the resource as typed values (RawValue), and the time to
// final and the cost only when the summary carries them.
func (e *Encoder) Summary(s *summary.Summary) {
	e.Byte1(0)
	e.TraceID(s.TraceID)
	e.SpanID(s.ParentID)
	flags := byte(spanSummaryFields)
	if s.HasTimeToFinal {
		flags |= summaryHasTimeToFinal
	}
	if s.HasCost {
		flags |= summaryHasCost
	}
	e.Byte1(flags)
	e.Uvarint(s.Start)
	// Modular: any End, before Start included, reads back as written.
	e.Varint(int64(s.End - s.Start))
	e.Str(s.ConversationID)
	e.Str(s.AgentName)
	e.RawMap(s.Resource, 0)
	e.strs(s.Reasons)
	e.strs(s.Anomalies)
	e.Uvarint(uint64(len(s.Links)))
	for _, l := range s.Links {
		e.TraceID(l.TraceID)
		e.SpanID(l.SpanID)
	}
	for _, v := range [...]int64{
		s.Usage.Input, s.Usage.Output, s.Usage.CacheRead, s.Usage.CacheCreation, s.Usage.Reasoning,
		s.AfterIn, s.AfterOut, s.ModelCalls, s.BackgroundJobs, s.Continuations,
		s.Spans, s.Traces, s.Duplicates,
	} {
		e.Varint(v)
	}
	if s.HasTimeToFinal {
		e.Varint(s.TimeToFinalMS)
	}
	if s.HasCost {
		e.B = binary.LittleEndian.AppendUint64(e.B, math.Float64bits(s.Cost))
	}
}

func (e *Encoder) strs(ss []string) {
	e.Uvarint(uint64(len(ss)))
	for _, s := range ss {
		e.Str(s)
	}
}

// Summary reads what Encoder.Summary wrote into s, whose ID, Status and
// Revision the caller sets from the summary's event. The whole of d.B
// must be the summary.
func (d *Decoder) Summary(s *summary.Summary) {
	if d.Byte1() != 0 && d.Err == nil {
		d.Fail("a summary's fields do not start with 0")
	}
	s.TraceID = d.TraceID()
	s.ParentID = d.SpanID()
	flags := d.Byte1()
	if d.Err != nil {
		return
	}
	if flags&spanSummaryFields == 0 || flags&^summaryFlagsKnown != 0 {
		d.Fail("bad summary flags %#x", flags)
		return
	}
	s.HasTimeToFinal = flags&summaryHasTimeToFinal != 0
	s.HasCost = flags&summaryHasCost != 0
	s.Start = d.Uvarint()
	s.End = s.Start + uint64(d.Varint())
	s.ConversationID = d.Str()
	s.AgentName = d.Str()
	s.Resource = d.RawMap(0)
	s.Reasons = d.strs()
	s.Anomalies = d.strs()
	if n := d.Count(24); n > 0 {
		s.Links = make([]summary.SpanRef, n)
		for i := range s.Links {
			s.Links[i] = summary.SpanRef{TraceID: d.TraceID(), SpanID: d.SpanID()}
		}
	}
	for _, p := range [...]*int64{
		&s.Usage.Input, &s.Usage.Output, &s.Usage.CacheRead, &s.Usage.CacheCreation, &s.Usage.Reasoning,
		&s.AfterIn, &s.AfterOut, &s.ModelCalls, &s.BackgroundJobs, &s.Continuations,
		&s.Spans, &s.Traces, &s.Duplicates,
	} {
		*p = d.Varint()
	}
	if s.HasTimeToFinal {
		s.TimeToFinalMS = d.Varint()
	}
	if s.HasCost {
		if p := d.Fixed(8); p != nil {
			s.Cost = math.Float64frombits(binary.LittleEndian.Uint64(p))
		}
	}
	if d.Err == nil && d.Remaining() != 0 {
		d.Fail("%d trailing bytes", d.Remaining())
	}
}

func (d *Decoder) strs() []string {
	n := d.Count(1)
	if n == 0 {
		return nil
	}
	out := make([]string, 0, n)
	for i := 0; i < n && d.Err == nil; i++ {
		out = append(out, d.Str())
	}
	return out
}
