package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

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
// stored value starts with codecVersion; see record.go for the framing.

// errCorrupt is wrapped by every decoding error.
var errCorrupt = errors.New("corrupt stored ledger data")

// maxValueDepth bounds the nesting of a stored attribute value; deeper
// slices and maps are stored empty (no attribute the ledger reads nests).
const maxValueDepth = 16

// encoder appends to a byte slice.
type encoder struct{ b []byte }

func (e *encoder) byte1(v byte)       { e.b = append(e.b, v) }
func (e *encoder) uvarint(v uint64)   { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) varint(v int64)     { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) raw(p []byte)       { e.b = append(e.b, p...) }
func (e *encoder) bytesLP(p []byte)   { e.uvarint(uint64(len(p))); e.b = append(e.b, p...) }
func (e *encoder) str(s string)       { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) traceID(t [16]byte) { e.b = append(e.b, t[:]...) }
func (e *encoder) spanID(s [8]byte)   { e.b = append(e.b, s[:]...) }

// decoder reads what encoder wrote. The first error sticks: every later
// read returns a zero value, so callers check err once per value.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: at byte %d: %s", errCorrupt, d.off, fmt.Sprintf(format, args...))
	}
}

func (d *decoder) remaining() int { return len(d.b) - d.off }

func (d *decoder) byte1() byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.fail("truncated")
		return 0
	}
	v := d.b[d.off]
	d.off++
	return v
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.off += n
	return v
}

// count reads an element count, each element taking at least minSize
// bytes, so a corrupt count cannot make the reader allocate beyond the
// input.
func (d *decoder) count(minSize int) int {
	n := d.uvarint()
	if d.err != nil {
		return 0
	}
	if n > uint64(d.remaining()/max(minSize, 1)) {
		d.fail("count %d exceeds the %d bytes left", n, d.remaining())
		return 0
	}
	return int(n)
}

func (d *decoder) fixed(n int) []byte {
	if d.err != nil {
		return nil
	}
	if d.remaining() < n {
		d.fail("truncated")
		return nil
	}
	p := d.b[d.off : d.off+n]
	d.off += n
	return p
}

func (d *decoder) bytesLP() []byte {
	n := d.count(1)
	return d.fixed(n)
}

func (d *decoder) str() string { return string(d.bytesLP()) }

func (d *decoder) traceID() (t [16]byte) {
	copy(t[:], d.fixed(16))
	return t
}

func (d *decoder) spanID() (s [8]byte) {
	copy(s[:], d.fixed(8))
	return s
}

// attrKeys is the dictionary of attribute keys stored as one index byte
// instead of the name. Append only: an index must keep its key for as long
// as data of codecVersion exists.
var attrKeys = []string{
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
	m := make(map[string]byte, len(attrKeys))
	for i, k := range attrKeys[1:] {
		m[k] = byte(i + 1)
	}
	return m
}()

func (e *encoder) key(k string) {
	if i, ok := attrKeyIndex[k]; ok {
		e.byte1(i)
		return
	}
	e.byte1(0)
	e.str(k)
}

func (d *decoder) key() string {
	i := d.byte1()
	if i == 0 {
		return d.str()
	}
	if int(i) >= len(attrKeys) {
		d.fail("unknown attribute key index %d", i)
		return ""
	}
	return attrKeys[i]
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

func (e *encoder) value(v pcommon.Value, depth int) {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		e.byte1(tagStr)
		e.str(v.Str())
	case pcommon.ValueTypeInt:
		e.byte1(tagInt)
		e.varint(v.Int())
	case pcommon.ValueTypeDouble:
		e.byte1(tagDouble)
		e.b = binary.LittleEndian.AppendUint64(e.b, math.Float64bits(v.Double()))
	case pcommon.ValueTypeBool:
		e.byte1(tagBool)
		if v.Bool() {
			e.byte1(1)
		} else {
			e.byte1(0)
		}
	case pcommon.ValueTypeBytes:
		e.byte1(tagBytes)
		e.bytesLP(v.Bytes().AsRaw())
	case pcommon.ValueTypeSlice:
		e.byte1(tagSlice)
		if depth >= maxValueDepth {
			e.uvarint(0)
			return
		}
		sl := v.Slice()
		e.uvarint(uint64(sl.Len()))
		for i := 0; i < sl.Len(); i++ {
			e.value(sl.At(i), depth+1)
		}
	case pcommon.ValueTypeMap:
		e.byte1(tagMap)
		if depth >= maxValueDepth {
			e.uvarint(0)
			return
		}
		e.attrs(v.Map(), nil, depth+1)
	default:
		e.byte1(tagEmpty)
	}
}

func (d *decoder) value(v pcommon.Value, depth int) {
	switch tag := d.byte1(); tag {
	case tagEmpty:
	case tagStr:
		v.SetStr(d.str())
	case tagInt:
		v.SetInt(d.varint())
	case tagDouble:
		p := d.fixed(8)
		if p != nil {
			v.SetDouble(math.Float64frombits(binary.LittleEndian.Uint64(p)))
		}
	case tagBool:
		switch b := d.byte1(); b {
		case 0, 1:
			v.SetBool(b == 1)
		default:
			d.fail("bad bool %d", b)
		}
	case tagBytes:
		v.SetEmptyBytes().FromRaw(d.bytesLP())
	case tagSlice:
		if depth >= maxValueDepth {
			d.fail("value nested deeper than %d", maxValueDepth)
			return
		}
		n := d.count(1)
		sl := v.SetEmptySlice()
		sl.EnsureCapacity(n)
		for i := 0; i < n && d.err == nil; i++ {
			d.value(sl.AppendEmpty(), depth+1)
		}
	case tagMap:
		if depth >= maxValueDepth {
			d.fail("value nested deeper than %d", maxValueDepth)
			return
		}
		d.attrs(v.SetEmptyMap(), depth+1)
	default:
		d.fail("unknown value tag %d", tag)
	}
}

// attrs encodes the entries of m that keep accepts (all when keep is nil).
func (e *encoder) attrs(m pcommon.Map, keep func(string) bool, depth int) {
	n := 0
	for k := range m.All() {
		if keep == nil || keep(k) {
			n++
		}
	}
	e.uvarint(uint64(n))
	for k, v := range m.All() {
		if keep == nil || keep(k) {
			e.key(k)
			e.value(v, depth)
		}
	}
}

func (d *decoder) attrs(m pcommon.Map, depth int) {
	n := d.count(2)
	m.EnsureCapacity(n)
	for i := 0; i < n && d.err == nil; i++ {
		k := d.key()
		d.value(m.PutEmpty(k), depth)
	}
}

// factAttr reports whether a span attribute is part of a span's facts: the
// contract's namespaces, which hold everything the ledger reads from
// attributes (ids, roles, counts, flags, links' kinds, usage, models,
// conversation and agent).
func factAttr(k string) bool {
	return strings.HasPrefix(k, "invocation.") || strings.HasPrefix(k, "gen_ai.")
}

// linkAttr reports whether a link attribute is part of a span's facts.
func linkAttr(k string) bool { return strings.HasPrefix(k, "invocation.") }

// Span flags in a stored span.
const (
	spanHasParent = 1 << iota
)

// encodeSpan writes what the ledger reads from one span: IDs, parent,
// name, times, status code and kind, the attributes keep accepts (all when
// nil), and links with the link attributes linkKeep accepts.
func (e *encoder) span(sp ptrace.Span, keep, linkKeep func(string) bool) {
	e.traceID(sp.TraceID())
	e.spanID(sp.SpanID())
	var flags byte
	pid := sp.ParentSpanID()
	if !pid.IsEmpty() {
		flags |= spanHasParent
	}
	e.byte1(flags)
	if !pid.IsEmpty() {
		e.spanID(pid)
	}
	e.str(sp.Name())
	e.byte1(byte(sp.Kind()))
	e.byte1(byte(sp.Status().Code()))
	e.uvarint(uint64(sp.StartTimestamp()))
	e.uvarint(uint64(sp.EndTimestamp()))
	e.attrs(sp.Attributes(), keep, 0)
	links := sp.Links()
	e.uvarint(uint64(links.Len()))
	for i := 0; i < links.Len(); i++ {
		l := links.At(i)
		e.traceID(l.TraceID())
		e.spanID(l.SpanID())
		e.attrs(l.Attributes(), linkKeep, 0)
	}
}

// spanHeader is a stored span's identity, name, kind, status and times.
type spanHeader struct {
	traceID    pcommon.TraceID
	spanID     pcommon.SpanID
	parent     pcommon.SpanID
	name       string
	kind       ptrace.SpanKind
	code       ptrace.StatusCode
	start, end uint64
}

// header decodes what precedes a stored span's attributes.
func (d *decoder) header() (h spanHeader, ok bool) {
	h.traceID = d.traceID()
	h.spanID = d.spanID()
	flags := d.byte1()
	if flags&^spanHasParent != 0 {
		d.fail("bad span flags %#x", flags)
		return h, false
	}
	if flags&spanHasParent != 0 {
		h.parent = d.spanID()
	}
	h.name = d.str()
	kind := d.byte1()
	if kind > byte(ptrace.SpanKindConsumer) {
		d.fail("bad span kind %d", kind)
		return h, false
	}
	h.kind = ptrace.SpanKind(kind)
	code := d.byte1()
	if code > byte(ptrace.StatusCodeError) {
		d.fail("bad status code %d", code)
		return h, false
	}
	h.code = ptrace.StatusCode(code)
	h.start, h.end = d.uvarint(), d.uvarint()
	return h, d.err == nil
}

// span decodes a stored span into sp, which must be empty.
func (d *decoder) span(sp ptrace.Span) {
	h, ok := d.header()
	if !ok {
		return
	}
	sp.SetTraceID(h.traceID)
	sp.SetSpanID(h.spanID)
	if !h.parent.IsEmpty() {
		sp.SetParentSpanID(h.parent)
	}
	sp.SetName(h.name)
	sp.SetKind(h.kind)
	sp.Status().SetCode(h.code)
	sp.SetStartTimestamp(pcommon.Timestamp(h.start))
	sp.SetEndTimestamp(pcommon.Timestamp(h.end))
	d.attrs(sp.Attributes(), 0)
	n := d.count(25)
	for i := 0; i < n && d.err == nil; i++ {
		l := sp.Links().AppendEmpty()
		l.SetTraceID(d.traceID())
		l.SetSpanID(d.spanID())
		d.attrs(l.Attributes(), 0)
	}
}

// facts decodes a stored span straight into the ledger's reader, as
// readFacts reads a live one: every stored attribute, repeats included,
// in stored order, so that replay reads the same facts as the live path
// did (CONTRACT.md v0.6 rule 7).
func (d *decoder) facts(f *spanFacts, cfg *ledgerConfig) {
	h, ok := d.header()
	if !ok {
		return
	}
	var r factReader
	r.begin(f, h.name, h.traceID, h.spanID, h.parent, h.start, h.end, h.code == ptrace.StatusCodeError)
	n := d.count(2)
	for i := 0; i < n && d.err == nil; i++ {
		k := d.key()
		v := pcommon.NewValueEmpty()
		d.value(v, 0)
		r.attr(k, v)
	}
	nl := d.count(25)
	for i := 0; i < nl && d.err == nil; i++ {
		r.linkStart(d.traceID(), d.spanID())
		na := d.count(2)
		for j := 0; j < na && d.err == nil; j++ {
			k := d.key()
			v := pcommon.NewValueEmpty()
			d.value(v, 0)
			r.linkAttr(k, v)
		}
	}
	r.end(cfg)
}
