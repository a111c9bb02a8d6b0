package journal

import (
	"math"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// fuzzBytes reads a fuzz input as a generator's choices; past its end
// every choice is 0.
type fuzzBytes struct {
	b     []byte
	nodes int // values built so far, bounded so one input stays small
}

func (f *fuzzBytes) next() byte {
	if len(f.b) == 0 {
		return 0
	}
	c := f.b[0]
	f.b = f.b[1:]
	return c
}

func (f *fuzzBytes) u64() uint64 {
	var v uint64
	for range 8 {
		v = v<<8 | uint64(f.next())
	}
	return v
}

// fuzzKeys holds the keys a generated map uses: the empty key, keys of
// the dictionary (stored as one byte) and others (stored as strings), so
// that repeats are frequent.
var fuzzKeys = []string{"", "invocation.id", "service.name", "gen_ai.input.messages", "k", "é", "a\x00b", "tenant"}

func (f *fuzzBytes) str() string {
	switch c := f.next(); c % 4 {
	case 0:
		return ""
	case 1:
		return fuzzKeys[int(c/4)%len(fuzzKeys)]
	default:
		n := int(c/4) % 12
		out := make([]byte, n)
		for i := range out {
			out[i] = f.next() // any bytes, invalid UTF-8 included
		}
		return string(out)
	}
}

// value fills v with an arbitrary value: every type, empty and nil
// cases, and chains deep enough to cross MaxValueDepth.
func (f *fuzzBytes) value(v pcommon.Value, depth int) {
	f.nodes++
	c := f.next()
	if f.nodes > 400 || depth > MaxValueDepth+3 {
		c = 1 // a leaf
	}
	switch c % 11 {
	case 0: // empty value
	case 1:
		v.SetStr(f.str())
	case 2:
		v.SetInt(int64(f.u64()))
	case 3:
		bits := f.u64()
		switch f.next() % 4 {
		case 0:
			bits = math.Float64bits(math.NaN())
		case 1:
			bits = math.Float64bits(math.Copysign(0, -1))
		}
		v.SetDouble(math.Float64frombits(bits))
	case 4:
		v.SetBool(f.next()%2 == 1)
	case 5:
		raw := []byte(f.str())
		if len(raw) == 0 && f.next()%2 == 0 {
			raw = nil // nil and empty bytes
		}
		v.SetEmptyBytes().FromRaw(raw)
	case 6:
		sl := v.SetEmptySlice()
		for range int(f.next() % 5) {
			f.value(sl.AppendEmpty(), depth+1)
		}
	case 7:
		m := v.SetEmptyMap()
		for range int(f.next() % 5) {
			f.value(m.PutEmpty(f.str()), depth+1)
		}
	case 8: // a chain of n slices (or maps) around a leaf
		n := int(f.next()) % (MaxValueDepth + 8)
		mapChain := f.next()%2 == 1
		cur := v
		for range n {
			if mapChain {
				cur = cur.SetEmptyMap().PutEmpty(f.str())
			} else {
				cur = cur.SetEmptySlice().AppendEmpty()
			}
		}
		cur.SetInt(int64(n))
	case 9:
		v.SetEmptySlice() // empty slice
	default:
		v.SetEmptyMap() // empty map
	}
}

func (f *fuzzBytes) attrs(m pcommon.Map) {
	for range int(f.next() % 6) {
		f.value(m.PutEmpty(f.str()), 0)
	}
}

func (f *fuzzBytes) span(sp ptrace.Span) {
	var id [16]byte
	for i := range id {
		id[i] = f.next()
	}
	sp.SetTraceID(id)
	sp.SetSpanID([8]byte(id[8:]))
	if f.next()%2 == 1 {
		sp.SetParentSpanID([8]byte(id[:8]))
	}
	sp.SetName(f.str())
	// Any int32 the wire can carry, not only the defined values.
	sp.SetKind(ptrace.SpanKind(int32(uint32(f.u64()))))
	sp.Status().SetCode(ptrace.StatusCode(int32(uint32(f.u64()))))
	sp.SetStartTimestamp(pcommon.Timestamp(f.u64()))
	sp.SetEndTimestamp(pcommon.Timestamp(f.u64()))
	f.attrs(sp.Attributes())
	for range int(f.next() % 3) {
		l := sp.Links().AppendEmpty()
		l.SetTraceID(id)
		l.SetSpanID([8]byte(id[4:12]))
		f.attrs(l.Attributes())
	}
	// What the SDK's limits dropped (the span flag spanDropped): mostly
	// nothing, else counts from 1 up to the largest a uint32 holds, on
	// the span and on each link (whose sum is stored).
	if f.next()%2 == 1 {
		sp.SetDroppedAttributesCount(f.count())
		sp.SetDroppedLinksCount(f.count())
		for _, l := range sp.Links().All() {
			l.SetDroppedAttributesCount(f.count())
		}
	}
}

// count returns a dropped count: 0, small, or near and at the largest a
// uint32 holds.
func (f *fuzzBytes) count() uint32 {
	switch c := f.next(); c % 4 {
	case 0:
		return 0
	case 1:
		return uint32(c / 4)
	case 2:
		return math.MaxUint32 - uint32(c/4)
	default:
		return uint32(f.u64())
	}
}

// canonical returns what a stored map reads back as: a repeated key keeps
// its first place and takes its last value, as pcommon.Map.AsRaw reads it
// (span attributes are read by decodeFacts in the processor, which keeps
// every repeat; FuzzCodecRoundTrip checks that in the stored bytes).
func canonical(m pcommon.Map) pcommon.Map {
	out := pcommon.NewMap()
	for k, v := range m.All() {
		canonicalValue(v, out.PutEmpty(k))
	}
	return out
}

func canonicalValue(v, dst pcommon.Value) {
	switch v.Type() {
	case pcommon.ValueTypeMap:
		canonical(v.Map()).MoveTo(dst.SetEmptyMap())
	case pcommon.ValueTypeSlice:
		sl := dst.SetEmptySlice()
		for _, e := range v.Slice().All() {
			canonicalValue(e, sl.AppendEmpty())
		}
	default:
		v.CopyTo(dst)
	}
}

// sameValue compares values exactly: types, order, and a double's bits
// (NaN equals itself, -0 differs from 0).
func sameValue(a, b pcommon.Value) bool {
	if a.Type() != b.Type() {
		return false
	}
	switch a.Type() {
	case pcommon.ValueTypeDouble:
		return math.Float64bits(a.Double()) == math.Float64bits(b.Double())
	case pcommon.ValueTypeMap:
		return sameMap(a.Map(), b.Map())
	case pcommon.ValueTypeSlice:
		x, y := a.Slice(), b.Slice()
		if x.Len() != y.Len() {
			return false
		}
		for i := range x.Len() {
			if !sameValue(x.At(i), y.At(i)) {
				return false
			}
		}
		return true
	case pcommon.ValueTypeBytes:
		return string(a.Bytes().AsRaw()) == string(b.Bytes().AsRaw())
	}
	return a.Equal(b)
}

func sameMap(a, b pcommon.Map) bool {
	if a.Len() != b.Len() {
		return false
	}
	type kv struct {
		k string
		v pcommon.Value
	}
	var xs []kv
	for k, v := range a.All() {
		xs = append(xs, kv{k, v})
	}
	i := 0
	for k, v := range b.All() {
		if xs[i].k != k || !sameValue(xs[i].v, v) {
			return false
		}
		i++
	}
	return true
}

func mapDeeperThanMax(m pcommon.Map) bool {
	_, _, found := TooDeep(m, nil)
	return found
}

// FuzzCodecRoundTrip checks the journal's promise for everything the
// OTLP receiver can hand over: arbitrary attribute values (every type,
// empty and nil, NaN and -0, invalid UTF-8, repeated keys, chains across
// MaxValueDepth), arbitrary resources, scopes' attributes and spans (any
// int32 kind and status code, links, the counts the SDK's limits
// dropped from the span and its links): either the value is within
// MaxValueDepth, encodes without error and decodes to itself, or TooDeep
// finds it (the processor refuses its batch before acknowledging it) and
// the encoder reports ErrTooDeep instead of storing a cut value.
func FuzzCodecRoundTrip(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 8, 16, 0, 0, 8, 65, 0})           // a 16-deep chain
	f.Add([]byte{3, 8, 17, 0, 0, 8, 17, 1, 4, 0})     // 17 deep, in maps too
	f.Add([]byte{3, 8, 64, 0, 0, 8, 65, 0})           // at and beyond the limit
	f.Add([]byte{5, 5, 7, 4, 5, 1, 5, 1, 1, 9, 5, 1}) // repeats, nested maps
	// A span with links whose dropped counts are near the uint32 bound.
	f.Add(append(make([]byte, 16+1+1+16+3), 2, 0, 0, 2, 0, 0, 1, 6, 254, 3, 1, 2, 2))
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &fuzzBytes{b: data}
		res := pcommon.NewResource()
		g.attrs(res.Attributes())
		scope := pcommon.NewInstrumentationScope()
		scope.SetName(g.str())
		g.attrs(scope.Attributes())
		sp := ptrace.NewSpan()
		g.span(sp)

		for what, m := range map[string]pcommon.Map{"resource": res.Attributes(), "scope": scope.Attributes()} {
			e := Encoder{}
			e.Attrs(m, nil, 0)
			if mapDeeperThanMax(m) {
				if e.Err == nil {
					t.Fatalf("%s: a value deeper than %d was encoded without error", what, MaxValueDepth)
				}
				continue
			}
			if e.Err != nil {
				t.Fatalf("%s: encoding failed within the limit: %v", what, e.Err)
			}
			got := pcommon.NewMap()
			d := Decoder{B: e.B}
			d.Attrs(got, 0)
			if d.Err != nil || d.Remaining() != 0 {
				t.Fatalf("%s: decoding what was encoded: %v (%d bytes left)", what, d.Err, d.Remaining())
			}
			if want := canonical(m); !sameMap(want, got) {
				t.Fatalf("%s: read back %v, want %v", what, got.AsRaw(), want.AsRaw())
			}
		}

		e := Encoder{}
		e.Span(sp, nil, nil)
		deep := mapDeeperThanMax(sp.Attributes())
		for _, l := range sp.Links().All() {
			deep = deep || mapDeeperThanMax(l.Attributes())
		}
		if deep != (e.Err != nil) {
			t.Fatalf("span deeper than the limit: %v, encoder error: %v", deep, e.Err)
		}
		if deep {
			return
		}
		got := ptrace.NewSpan()
		d := Decoder{B: e.B}
		d.Span(got)
		if d.Err != nil || d.Remaining() != 0 {
			t.Fatalf("span: decoding what was encoded: %v (%d bytes left)", d.Err, d.Remaining())
		}
		if got.TraceID() != sp.TraceID() || got.SpanID() != sp.SpanID() || got.ParentSpanID() != sp.ParentSpanID() ||
			got.Name() != sp.Name() || got.Kind() != sp.Kind() || got.Status().Code() != sp.Status().Code() ||
			got.StartTimestamp() != sp.StartTimestamp() || got.EndTimestamp() != sp.EndTimestamp() {
			t.Fatalf("span header read back differently")
		}
		// The dropped counts come back, their flag set exactly when one is
		// not 0 (a span that dropped nothing is stored as before the flag
		// existed); the links' counts come back as their stored sum.
		if got.DroppedAttributesCount() != sp.DroppedAttributesCount() || got.DroppedLinksCount() != sp.DroppedLinksCount() ||
			droppedOf(got) != droppedOf(sp) {
			t.Fatalf("dropped counts read back as %+v, sent %+v", droppedOf(got), droppedOf(sp))
		}
		if flagged := e.B[24]&spanDropped != 0; flagged != (droppedOf(sp) != Dropped{}) {
			t.Fatalf("dropped flag %v for dropped counts %+v", flagged, droppedOf(sp))
		}
		if !sameMap(canonical(sp.Attributes()), got.Attributes()) || got.Links().Len() != sp.Links().Len() {
			t.Fatalf("span attributes or links read back differently")
		}
		for i, l := range sp.Links().All() {
			if !sameMap(canonical(l.Attributes()), got.Links().At(i).Attributes()) {
				t.Fatalf("link %d's attributes read back differently", i)
			}
		}
		// Repeats are kept in the stored bytes, in order: decoding the
		// attributes one by one (as the processor's decodeFacts does)
		// meets every entry of the original.
		d = Decoder{B: e.B}
		if _, ok := d.Header(); !ok {
			t.Fatal("header")
		}
		n := d.Count(2)
		if n != sp.Attributes().Len() {
			t.Fatalf("%d attributes stored, %d sent", n, sp.Attributes().Len())
		}
		i := 0
		for k, v := range sp.Attributes().All() {
			gotKey := d.Key()
			gotValue := pcommon.NewValueEmpty()
			d.Value(gotValue, 0)
			want := pcommon.NewValueEmpty()
			canonicalValue(v, want)
			if d.Err != nil || gotKey != k || !sameValue(want, gotValue) {
				t.Fatalf("attribute %d: read %q back differently (%v)", i, k, d.Err)
			}
			i++
		}
	})
}
