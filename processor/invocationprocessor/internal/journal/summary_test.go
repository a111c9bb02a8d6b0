package journal

import (
	"errors"
	"math"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/ledgerrule"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// summary makes an arbitrary Summary: any ids, times (an end before the
// start included), strings, counts of any sign, NaN and -0 costs, and a
// resource of any values, as AsRaw makes them and as FromRaw also takes
// them (int, uint32, float32) or refuses them.
func (f *fuzzBytes) summary() summary.Summary {
	var s summary.Summary
	s.ID = f.str()
	if f.next()%2 == 1 {
		s.ID = f.str() + "\x00" + s.ID // a tenant's
	}
	s.Status = [...]string{contract.StatusPending, contract.StatusFinal, contract.StatusIncomplete, f.str()}[f.next()%4]
	s.Revision = int64(f.u64())
	for i := range s.TraceID {
		s.TraceID[i] = f.next()
	}
	for i := range s.ParentID {
		s.ParentID[i] = f.next()
	}
	s.Start, s.End = f.u64(), f.u64()
	s.ConversationID, s.AgentName = f.str(), f.str()
	if f.next()%4 != 0 {
		res := pcommon.NewMap()
		f.attrs(res)
		s.Resource = res.AsRaw()
		switch f.next() % 5 {
		case 0:
			s.Resource["int"] = int(f.u64())
		case 1:
			s.Resource["uint32"] = uint32(f.u64())
		case 2:
			s.Resource["float32"] = float32(f.u64())
		case 3:
			s.Resource["refused"] = struct{}{}
		}
	}
	strs := func() []string {
		n := int(f.next() % 4)
		if n == 0 && f.next()%2 == 0 {
			return nil
		}
		out := make([]string, n)
		for i := range out {
			out[i] = f.str()
		}
		return out
	}
	s.Reasons, s.Anomalies = strs(), strs()
	for range int(f.next() % 3) {
		var l summary.SpanRef
		for i := range l.TraceID {
			l.TraceID[i] = f.next()
		}
		copy(l.SpanID[:], l.TraceID[3:])
		s.Links = append(s.Links, l)
	}
	s.Usage = ledgerrule.Usage{Input: int64(f.u64()), Output: int64(f.u64()), CacheRead: int64(f.next()), CacheCreation: -int64(f.next()), Reasoning: int64(f.next())}
	s.AfterIn, s.AfterOut = int64(f.next()), int64(f.u64())
	s.ModelCalls, s.BackgroundJobs, s.Continuations = int64(f.next()), int64(f.next()), int64(f.next())
	s.Spans, s.Traces, s.Duplicates = int64(f.u64()), int64(f.next()), int64(f.next())
	s.HasTimeToFinal, s.TimeToFinalMS = f.next()%2 == 1, int64(f.u64())
	s.HasCost = f.next()%2 == 1
	switch f.next() % 4 {
	case 0:
		s.Cost = math.NaN()
	case 1:
		s.Cost = math.Copysign(0, -1)
	default:
		s.Cost = math.Float64frombits(f.u64())
	}
	return s
}

// built is the one summary span Build makes of s, with its resource.
func built(s summary.Summary, mark func(pcommon.Map)) (pcommon.Resource, ptrace.Span, pcommon.InstrumentationScope) {
	rs := summary.Build([]summary.Summary{s}, mark).ResourceSpans().At(0)
	ss := rs.ScopeSpans().At(0)
	return rs.Resource(), ss.Spans().At(0), ss.Scope()
}

// sameUnordered compares values as sameValue does, but a map's entries in
// any order: Build puts a resource's raw map (a Go map) in map order.
func sameUnordered(a, b pcommon.Value) bool {
	switch {
	case a.Type() != b.Type():
		return false
	case a.Type() == pcommon.ValueTypeMap:
		return sameMapUnordered(a.Map(), b.Map())
	case a.Type() == pcommon.ValueTypeSlice:
		x, y := a.Slice(), b.Slice()
		if x.Len() != y.Len() {
			return false
		}
		for i := range x.Len() {
			if !sameUnordered(x.At(i), y.At(i)) {
				return false
			}
		}
		return true
	}
	return sameValue(a, b)
}

func sameMapUnordered(a, b pcommon.Map) bool {
	if a.Len() != b.Len() {
		return false
	}
	for k, v := range a.All() {
		w, ok := b.Get(k)
		if !ok || !sameUnordered(v, w) {
			return false
		}
	}
	return true
}

// requireSameSummarySpan compares two built summaries: the resource's
// attributes (in any order), the scope, every field of the span, and its
// attributes one by one in order, each value exactly.
func requireSameSummarySpan(t *testing.T, want, got summary.Summary, mark func(pcommon.Map)) {
	t.Helper()
	wres, wsp, wscope := built(want, mark)
	gres, gsp, gscope := built(got, mark)
	if !sameMapUnordered(wres.Attributes(), gres.Attributes()) {
		t.Fatalf("resource %v, built live %v", gres.Attributes().AsRaw(), wres.Attributes().AsRaw())
	}
	if wscope.Name() != gscope.Name() || wscope.Version() != gscope.Version() {
		t.Fatalf("scope %q, built live %q", gscope.Name(), wscope.Name())
	}
	if gsp.TraceID() != wsp.TraceID() || gsp.SpanID() != wsp.SpanID() || gsp.ParentSpanID() != wsp.ParentSpanID() ||
		gsp.Name() != wsp.Name() || gsp.Kind() != wsp.Kind() || gsp.Status().Code() != wsp.Status().Code() ||
		gsp.StartTimestamp() != wsp.StartTimestamp() || gsp.EndTimestamp() != wsp.EndTimestamp() {
		t.Fatalf("span header differs from the one built live")
	}
	if gsp.Links().Len() != wsp.Links().Len() {
		t.Fatalf("%d links, built live %d", gsp.Links().Len(), wsp.Links().Len())
	}
	for i, l := range wsp.Links().All() {
		g := gsp.Links().At(i)
		if g.TraceID() != l.TraceID() || g.SpanID() != l.SpanID() || g.Attributes().Len() != 0 {
			t.Fatalf("link %d differs from the one built live", i)
		}
	}
	if gsp.Attributes().Len() != wsp.Attributes().Len() {
		t.Fatalf("%d attributes %v, built live %d %v", gsp.Attributes().Len(), gsp.Attributes().AsRaw(), wsp.Attributes().Len(), wsp.Attributes().AsRaw())
	}
	type kv struct {
		k string
		v pcommon.Value
	}
	var ws []kv
	for k, v := range wsp.Attributes().All() {
		ws = append(ws, kv{k, v})
	}
	i := 0
	for k, v := range gsp.Attributes().All() {
		if ws[i].k != k || !sameValue(ws[i].v, v) {
			t.Fatalf("attribute %d: %q = %v, built live %q = %v", i, k, v.AsRaw(), ws[i].k, ws[i].v.AsRaw())
		}
		i++
	}
}

// FuzzSummaryFields checks a stored summary's promise: a summary stored
// as its fields (Encoder.Summary) and read back (Decoder.Summary, the
// ID, status and revision coming from its event) builds the same span as
// the summary built live, attribute by attribute; a reader of the older
// form (Attrs then Span) refuses the bytes, and the older form is never
// taken for the fields. A resource deeper than MaxValueDepth (which the
// processor refuses before it makes a summary) is an encoding error, never
// a cut value.
func FuzzSummaryFields(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30})
	f.Add([]byte(strings.Repeat("\x05\x07\x04\x01", 40)))
	f.Add(append(make([]byte, 60), 3, 8, 70, 0, 0, 8, 65, 0)) // a resource beyond the depth limit
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &fuzzBytes{b: data}
		s := g.summary()
		var mark func(pcommon.Map)
		if g.next()%2 == 0 {
			mark = func(m pcommon.Map) {
				m.Remove(contract.AttrTenant)
				m.PutStr(contract.AttrSummaryCollector, "c")
			}
		} else {
			mark = func(pcommon.Map) {} // an empty resource stays empty
		}

		e := Encoder{}
		e.Summary(&s)
		res := pcommon.NewMap()
		_ = res.FromRaw(s.Resource)
		if mapDeeperThanMax(res) {
			if e.Err == nil {
				t.Fatalf("a resource deeper than %d was encoded without error", MaxValueDepth)
			}
			return
		}
		if e.Err != nil {
			t.Fatalf("encoding failed within the limit: %v", e.Err)
		}
		if !IsSummaryFields(e.B) {
			t.Fatalf("the fields are not recognised as such")
		}
		got := summary.Summary{ID: s.ID, Status: s.Status, Revision: s.Revision}
		d := Decoder{B: e.B}
		d.Summary(&got)
		if d.Err != nil {
			t.Fatalf("decoding what was encoded: %v", d.Err)
		}
		requireSameSummarySpan(t, s, got, mark)

		// A reader of the older form fails on the fields, at the flags.
		old := Decoder{B: e.B}
		old.Attrs(pcommon.NewMap(), 0)
		old.Span(ptrace.NewSpan())
		if old.Err == nil || !strings.Contains(old.Err.Error(), "bad span flags") {
			t.Fatalf("a reader of the older form read the fields: %v", old.Err)
		}

		// The older form, however the summary looks, is not the fields.
		rs := summary.Build([]summary.Summary{s}, mark).ResourceSpans().At(0)
		o := Encoder{}
		o.Attrs(rs.Resource().Attributes(), nil, 0)
		o.Span(rs.ScopeSpans().At(0).Spans().At(0), nil, nil)
		if IsSummaryFields(o.B) {
			t.Fatalf("a summary span of the older form was taken for the fields")
		}
	})
}

// Damaged fields fail: every truncation, and a flag no writer sets.
func TestSummaryFieldsDamaged(t *testing.T) {
	s := summary.Summary{
		ID: "t\x00inv-1", Status: contract.StatusFinal, Revision: 1, Start: 10, End: 20,
		ConversationID: "conv-1", AgentName: "coder", Resource: map[string]any{"service.name": "agent", "n": int64(3)},
		Reasons: []string{"open_children"}, Links: []summary.SpanRef{{SpanID: [8]byte{1}}},
		Usage: ledgerrule.Usage{Input: 150, Output: 15}, Spans: 6, HasTimeToFinal: true, TimeToFinalMS: 20, HasCost: true, Cost: 0.25,
	}
	e := Encoder{}
	e.Summary(&s)
	if e.Err != nil {
		t.Fatal(e.Err)
	}
	for n := range len(e.B) {
		var got summary.Summary
		d := Decoder{B: e.B[:n]}
		d.Summary(&got)
		if d.Err == nil {
			t.Fatalf("%d of %d bytes decoded without error", n, len(e.B))
		}
	}
	var got summary.Summary
	d := Decoder{B: append(append([]byte{}, e.B...), 0)}
	d.Summary(&got)
	if d.Err == nil {
		t.Fatal("a trailing byte decoded without error")
	}
	bad := append([]byte{}, e.B...)
	bad[summaryFieldsAt] |= 1 << 6
	d = Decoder{B: bad}
	d.Summary(&got)
	if d.Err == nil || !strings.Contains(d.Err.Error(), "bad summary flags") {
		t.Fatalf("an unknown summary flag: %v", d.Err)
	}
}

// FuzzDecodeSummary feeds arbitrary bytes to the fields' decoder: it
// never panics, fails only with ErrCorrupt, and what it accepts is
// written back to bytes that build the same span.
func FuzzDecodeSummary(f *testing.F) {
	s := summary.Summary{
		ID: "inv-1", Status: contract.StatusFinal, Revision: 1, Start: 10, End: 20, AgentName: "coder",
		Resource:  map[string]any{"service.name": "agent", "l": []any{int64(1), map[string]any{"k": 0.5}}},
		Anomalies: []string{"extra_root"}, Links: []summary.SpanRef{{SpanID: [8]byte{1}}}, HasCost: true, Cost: 1,
	}
	e := Encoder{}
	e.Summary(&s)
	f.Add(e.B)
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, data []byte) {
		got := summary.Summary{ID: "inv-1", Status: contract.StatusFinal, Revision: 1}
		d := Decoder{B: data}
		d.Summary(&got)
		if d.Err != nil {
			if !errors.Is(d.Err, ErrCorrupt) {
				t.Fatalf("error not ErrCorrupt: %v", d.Err)
			}
			return
		}
		if !IsSummaryFields(data) {
			t.Fatal("accepted bytes IsSummaryFields does not recognise")
		}
		e := Encoder{}
		e.Summary(&got)
		if e.Err != nil {
			t.Fatalf("what was read cannot be written: %v", e.Err)
		}
		again := summary.Summary{ID: got.ID, Status: got.Status, Revision: got.Revision}
		d = Decoder{B: e.B}
		d.Summary(&again)
		if d.Err != nil {
			t.Fatalf("reading it again: %v", d.Err)
		}
		requireSameSummarySpan(t, got, again, func(pcommon.Map) {})
	})
}
