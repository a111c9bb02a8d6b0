package journal // import "github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
)

// The stored form is a compact binary encoding of our own (no pdata, no
// protobuf): unsigned and zig-zag varints, length-prefixed strings, fixed
// 16- and 8-byte trace and span IDs, and typed attribute values. Every
// stored value starts with Version; see record.go for the framing.

// ErrCorrupt is wrapped by every decoding error.
var ErrCorrupt = errors.New("corrupt stored ledger data")

// Encoder appends to a byte slice. A value it cannot store (depth.go:
// nested deeper than MaxValueDepth) sets Err, which sticks; what it wrote
// is then not to be stored.
type Encoder struct {
	B   []byte
	Err error
}

func (e *Encoder) Byte1(v byte)       { e.B = append(e.B, v) }
func (e *Encoder) Uvarint(v uint64)   { e.B = binary.AppendUvarint(e.B, v) }
func (e *Encoder) Varint(v int64)     { e.B = binary.AppendVarint(e.B, v) }
func (e *Encoder) Raw(p []byte)       { e.B = append(e.B, p...) }
func (e *Encoder) BytesLP(p []byte)   { e.Uvarint(uint64(len(p))); e.B = append(e.B, p...) }
func (e *Encoder) Str(s string)       { e.Uvarint(uint64(len(s))); e.B = append(e.B, s...) }
func (e *Encoder) TraceID(t [16]byte) { e.B = append(e.B, t[:]...) }
func (e *Encoder) SpanID(s [8]byte)   { e.B = append(e.B, s[:]...) }

// Decoder reads what Encoder wrote. The first error sticks: every later
// read returns a zero value, so callers check err once per value.
type Decoder struct {
	B   []byte
	off int
	Err error
	// ID is the invocation id of the event whose span is decoded: a span
	// stored by Encoder.Fact may have left its invocation.id out.
	ID string
}

func (d *Decoder) Fail(format string, args ...any) {
	if d.Err == nil {
		d.Err = fmt.Errorf("%w: at byte %d: %s", ErrCorrupt, d.off, fmt.Sprintf(format, args...))
	}
}

func (d *Decoder) Remaining() int { return len(d.B) - d.off }

// Rest is what is left to read.
func (d *Decoder) Rest() []byte { return d.B[d.off:] }

func (d *Decoder) Byte1() byte {
	if d.Err != nil {
		return 0
	}
	if d.off >= len(d.B) {
		d.Fail("truncated")
		return 0
	}
	v := d.B[d.off]
	d.off++
	return v
}

func (d *Decoder) Uvarint() uint64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.B[d.off:])
	if n <= 0 {
		d.Fail("bad uvarint")
		return 0
	}
	d.off += n
	return v
}

func (d *Decoder) Varint() int64 {
	if d.Err != nil {
		return 0
	}
	v, n := binary.Varint(d.B[d.off:])
	if n <= 0 {
		d.Fail("bad varint")
		return 0
	}
	d.off += n
	return v
}

// Count reads an element Count, each element taking at least minSize
// bytes, so a corrupt Count cannot make the reader allocate beyond the
// input.
func (d *Decoder) Count(minSize int) int {
	n := d.Uvarint()
	if d.Err != nil {
		return 0
	}
	if n > uint64(d.Remaining()/max(minSize, 1)) {
		d.Fail("count %d exceeds the %d bytes left", n, d.Remaining())
		return 0
	}
	return int(n)
}

func (d *Decoder) Fixed(n int) []byte {
	if d.Err != nil {
		return nil
	}
	if d.Remaining() < n {
		d.Fail("truncated")
		return nil
	}
	p := d.B[d.off : d.off+n]
	d.off += n
	return p
}

func (d *Decoder) BytesLP() []byte {
	n := d.Count(1)
	return d.Fixed(n)
}

func (d *Decoder) Str() string { return string(d.BytesLP()) }

func (d *Decoder) TraceID() (t [16]byte) {
	copy(t[:], d.Fixed(16))
	return t
}

func (d *Decoder) SpanID() (s [8]byte) {
	copy(s[:], d.Fixed(8))
	return s
}

// AttrKeys is the dictionary of attribute keys stored as one index byte
// instead of the name. Append only: an index must keep its key for as long
// as data of Version exists.
var AttrKeys = []string{
	"", // 0: the key follows as a string
	contract.AttrInvocationID,
	contract.AttrRole,
	contract.AttrChildren,
	contract.AttrFollowups,
	contract.AttrRemote,
	contract.AttrLink,
	contract.AttrOperationName,
	contract.AttrUsageInputTokens,
	contract.AttrUsageOutputTokens,
	contract.AttrUsageCacheReadTokens,
	contract.AttrUsageCacheCreateTokens,
	contract.AttrUsageReasoningTokens,
	contract.AttrConversationID,
	contract.AttrAgentName,
	contract.AttrRequestModel,
	contract.AttrResponseModel,
	contract.AttrProviderName,
	contract.AttrToolName,
	contract.AttrToolCallID,
	contract.AttrFollowupReason,
	contract.AttrFollowupConsumer,
	contract.AttrLateChild,
	contract.AttrUnattributed,
	"service.name",
}

var attrKeyIndex = func() map[string]byte {
	m := make(map[string]byte, len(AttrKeys))
	for i, k := range AttrKeys[1:] {
		m[k] = byte(i + 1)
	}
	return m
}()

func (e *Encoder) Key(k string) {
	if i, ok := attrKeyIndex[k]; ok {
		e.Byte1(i)
		return
	}
	e.Byte1(0)
	e.Str(k)
}

func (d *Decoder) Key() string {
	i := d.Byte1()
	if i == 0 {
		return d.Str()
	}
	if int(i) >= len(AttrKeys) {
		d.Fail("unknown attribute key index %d", i)
		return ""
	}
	return AttrKeys[i]
}

// Value type tags.
const (
	tagEmpty byte = iota
	tagStr
	tagInt
	tagDouble
	tagBool
	tagBytes
	tagSlice
	tagMap
)

func (e *Encoder) Value(v pcommon.Value, depth int) {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		e.Byte1(tagStr)
		e.Str(v.Str())
	case pcommon.ValueTypeInt:
		e.Byte1(tagInt)
		e.Varint(v.Int())
	case pcommon.ValueTypeDouble:
		e.Byte1(tagDouble)
		e.B = binary.LittleEndian.AppendUint64(e.B, math.Float64bits(v.Double()))
	case pcommon.ValueTypeBool:
		e.Byte1(tagBool)
		if v.Bool() {
			e.Byte1(1)
		} else {
			e.Byte1(0)
		}
	case pcommon.ValueTypeBytes:
		e.Byte1(tagBytes)
		e.BytesLP(v.Bytes().AsRaw())
	case pcommon.ValueTypeSlice:
		e.Byte1(tagSlice)
		if depth >= MaxValueDepth {
			e.tooDeep()
			e.Uvarint(0)
			return
		}
		sl := v.Slice()
		e.Uvarint(uint64(sl.Len()))
		for i := 0; i < sl.Len(); i++ {
			e.Value(sl.At(i), depth+1)
		}
	case pcommon.ValueTypeMap:
		e.Byte1(tagMap)
		if depth >= MaxValueDepth {
			e.tooDeep()
			e.Uvarint(0)
			return
		}
		e.Attrs(v.Map(), nil, depth+1)
	default:
		e.Byte1(tagEmpty)
	}
}

func (d *Decoder) Value(v pcommon.Value, depth int) {
	switch tag := d.Byte1(); tag {
	case tagEmpty:
	case tagStr:
		v.SetStr(d.Str())
	case tagInt:
		v.SetInt(d.Varint())
	case tagDouble:
		p := d.Fixed(8)
		if p != nil {
			v.SetDouble(math.Float64frombits(binary.LittleEndian.Uint64(p)))
		}
	case tagBool:
		switch b := d.Byte1(); b {
		case 0, 1:
			v.SetBool(b == 1)
		default:
			d.Fail("bad bool %d", b)
		}
	case tagBytes:
		v.SetEmptyBytes().FromRaw(d.BytesLP())
	case tagSlice:
		if depth >= MaxValueDepth {
			d.Fail("value nested deeper than %d", MaxValueDepth)
			return
		}
		n := d.Count(1)
		sl := v.SetEmptySlice()
		sl.EnsureCapacity(n)
		for i := 0; i < n && d.Err == nil; i++ {
			d.Value(sl.AppendEmpty(), depth+1)
		}
	case tagMap:
		if depth >= MaxValueDepth {
			d.Fail("value nested deeper than %d", MaxValueDepth)
			return
		}
		d.Attrs(v.SetEmptyMap(), depth+1)
	default:
		d.Fail("unknown value tag %d", tag)
	}
}

// Attrs encodes the entries of m that keep accepts (all when keep is nil).
func (e *Encoder) Attrs(m pcommon.Map, keep func(string) bool, depth int) {
	n := 0
	for k := range m.All() {
		if keep == nil || keep(k) {
			n++
		}
	}
	e.Uvarint(uint64(n))
	for k, v := range m.All() {
		if keep == nil || keep(k) {
			e.Key(k)
			e.Value(v, depth)
		}
	}
}

func (d *Decoder) Attrs(m pcommon.Map, depth int) {
	n := d.Count(2)
	m.EnsureCapacity(n)
	for i := 0; i < n && d.Err == nil; i++ {
		k := d.Key()
		d.Value(m.PutEmpty(k), depth)
	}
}

// FactAttr reports whether a span attribute is part of a span's facts: the
// contract's namespaces, which hold everything the ledger reads from
// attributes (ids, roles, counts, flags, links' kinds, usage, models,
// conversation and agent).
func FactAttr(k string) bool {
	return strings.HasPrefix(k, "invocation.") || strings.HasPrefix(k, "gen_ai.")
}

// LinkAttr reports whether a link attribute is part of a span's facts.
func LinkAttr(k string) bool { return strings.HasPrefix(k, "invocation.") }

// Span flags in a stored span.
const (
	spanHasParent = 1 << iota
	// spanDropped: the SDK's limits dropped attributes, links or link
	// attributes (three uvarints follow the parent). Records written
	// before it never set it, so they decode as before.
	spanDropped
	// spanIDOmitted: the span's one invocation.id attribute, a string
	// equal to the invocation id its event is keyed by, is not stored
	// (Encoder.Fact); the reader puts it back from the key (Decoder.ID).
	// Records written before it never set it, so they decode as before.
	spanIDOmitted
	// spanEndDelta: the end time is stored as its distance from the
	// start (a varint, modular: any end reads back as written) instead
	// of as a time, about 5 bytes less a span. Every span written since
	// sets it; records written before never did, so they decode as
	// before, and a reader older than it rejects the bit ("bad span
	// flags") and treats what the record named as lost: it fails closed.
	spanEndDelta
)

// spanSummaryFields is never a span's: it marks a summary stored as its
// fields (summary.go), whose first bytes read as a span's up to these
// flags. Header rejects it, as every reader before it did, so a reader
// that does not know the fields fails on them instead of misreading them.
const spanSummaryFields = 1 << 7

// Dropped is what the SDK's limits dropped from a stored span: OTLP's
// dropped_attributes_count and dropped_links_count, and the sum of its
// links' dropped_attributes_count.
type Dropped struct {
	Attributes, Links, LinkAttributes uint32
}

// droppedOf reads a span's dropped counts.
func droppedOf(sp ptrace.Span) Dropped {
	d := Dropped{Attributes: sp.DroppedAttributesCount(), Links: sp.DroppedLinksCount()}
	links := sp.Links()
	for i := 0; i < links.Len(); i++ {
		d.LinkAttributes = uint32(min(uint64(d.LinkAttributes)+uint64(links.At(i).DroppedAttributesCount()), 1<<31))
	}
	return d
}

// Span writes what the ledger reads from one Span: IDs, parent, name,
// times, status code and kind, the attributes keep accepts (all when nil),
// and links with the link attributes linkKeep accepts.
func (e *Encoder) Span(sp ptrace.Span, keep, linkKeep func(string) bool) {
	e.span(sp, keep, linkKeep, false)
}

// Fact writes a span's facts (Span with FactAttr and LinkAttr) for the
// invocation id: when the span carries invocation.id once, as that id, the
// value is left out, since the event's key holds it. Any other
// invocation.id (repeated, not a string, another id) is stored as read,
// so that it replays as it was read live.
func (e *Encoder) Fact(sp ptrace.Span, id string) {
	e.span(sp, FactAttr, LinkAttr, omittable(sp.Attributes(), id))
}

// omittable reports whether m holds invocation.id exactly once, as the
// string id.
func omittable(m pcommon.Map, id string) bool {
	n, same := 0, false
	for k, v := range m.All() {
		if k == contract.AttrInvocationID {
			n++
			same = v.Type() == pcommon.ValueTypeStr && v.Str() == id
		}
	}
	return n == 1 && same
}

func (e *Encoder) span(sp ptrace.Span, keep, linkKeep func(string) bool, omitID bool) {
	e.TraceID(sp.TraceID())
	e.SpanID(sp.SpanID())
	var flags byte
	pid := sp.ParentSpanID()
	if !pid.IsEmpty() {
		flags |= spanHasParent
	}
	dropped := droppedOf(sp)
	if dropped != (Dropped{}) {
		flags |= spanDropped
	}
	if omitID {
		flags |= spanIDOmitted
	}
	flags |= spanEndDelta
	e.Byte1(flags)
	if !pid.IsEmpty() {
		e.SpanID(pid)
	}
	if flags&spanDropped != 0 {
		e.Uvarint(uint64(dropped.Attributes))
		e.Uvarint(uint64(dropped.Links))
		e.Uvarint(uint64(dropped.LinkAttributes))
	}
	e.Str(sp.Name())
	e.enum(int32(sp.Kind()))
	e.enum(int32(sp.Status().Code()))
	start := uint64(sp.StartTimestamp())
	e.Uvarint(start)
	e.Varint(int64(uint64(sp.EndTimestamp()) - start))
	if omitID {
		e.Attrs(sp.Attributes(), func(k string) bool { return k != contract.AttrInvocationID && (keep == nil || keep(k)) }, 0)
	} else {
		e.Attrs(sp.Attributes(), keep, 0)
	}
	links := sp.Links()
	e.Uvarint(uint64(links.Len()))
	for i := 0; i < links.Len(); i++ {
		l := links.At(i)
		e.TraceID(l.TraceID())
		e.SpanID(l.SpanID())
		e.Attrs(l.Attributes(), linkKeep, 0)
	}
}

// SpanHeader is a stored span's identity, name, kind, status and times.
type SpanHeader struct {
	TraceID    pcommon.TraceID
	SpanID     pcommon.SpanID
	Parent     pcommon.SpanID
	Name       string
	Kind       ptrace.SpanKind
	Code       ptrace.StatusCode
	Start, End uint64
	// Dropped is what the SDK's limits dropped from the span.
	Dropped Dropped
	// IDOmitted: the span's invocation.id is the event's id and was not
	// stored (Encoder.Fact); the reader supplies it.
	IDOmitted bool
}

// Header decodes what precedes a stored span's attributes.
func (d *Decoder) Header() (h SpanHeader, ok bool) {
	h.TraceID = d.TraceID()
	h.SpanID = d.SpanID()
	flags := d.Byte1()
	if flags&^(spanHasParent|spanDropped|spanIDOmitted|spanEndDelta) != 0 {
		d.Fail("bad span flags %#x", flags)
		return h, false
	}
	if flags&spanHasParent != 0 {
		h.Parent = d.SpanID()
	}
	if flags&spanDropped != 0 {
		h.Dropped = Dropped{Attributes: d.count32(), Links: d.count32(), LinkAttributes: d.count32()}
	}
	if flags&spanIDOmitted != 0 {
		if d.ID == "" {
			d.Fail("a span's invocation.id was left out and no id was given")
			return h, false
		}
		h.IDOmitted = true
	}
	h.Name = d.Str()
	h.Kind = ptrace.SpanKind(d.enum())
	h.Code = ptrace.StatusCode(d.enum())
	h.Start = d.Uvarint()
	if flags&spanEndDelta != 0 {
		h.End = h.Start + uint64(d.Varint())
	} else {
		h.End = d.Uvarint()
	}
	return h, d.Err == nil
}

// Span decodes a stored Span into sp, which must be empty.
func (d *Decoder) Span(sp ptrace.Span) {
	h, ok := d.Header()
	if !ok {
		return
	}
	sp.SetTraceID(h.TraceID)
	sp.SetSpanID(h.SpanID)
	if !h.Parent.IsEmpty() {
		sp.SetParentSpanID(h.Parent)
	}
	sp.SetName(h.Name)
	sp.SetKind(h.Kind)
	sp.Status().SetCode(h.Code)
	sp.SetStartTimestamp(pcommon.Timestamp(h.Start))
	sp.SetEndTimestamp(pcommon.Timestamp(h.End))
	sp.SetDroppedAttributesCount(h.Dropped.Attributes)
	sp.SetDroppedLinksCount(h.Dropped.Links)
	d.Attrs(sp.Attributes(), 0)
	if h.IDOmitted {
		sp.Attributes().PutStr(contract.AttrInvocationID, d.ID)
	}
	n := d.Count(25)
	for i := 0; i < n && d.Err == nil; i++ {
		l := sp.Links().AppendEmpty()
		l.SetTraceID(d.TraceID())
		l.SetSpanID(d.SpanID())
		d.Attrs(l.Attributes(), 0)
		if i == 0 {
			// The sum is stored: it goes on the first link.
			l.SetDroppedAttributesCount(h.Dropped.LinkAttributes)
		}
	}
}

// count32 decodes a dropped count, which fits in a uint32.
func (d *Decoder) count32() uint32 {
	v := d.Uvarint()
	if v > 1<<32-1 {
		d.Fail("dropped count %d out of range", v)
		return 0
	}
	return uint32(v)
}
