package ledgerrule

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestReserveChangesNothing: a graph that reserved room before its first
// span answers every span, and ends, as one that did not: Reserve only
// sizes slices.
func TestReserveChangesNothing(t *testing.T) {
	cfg := &GraphConfig{MaxSpans: 40, Settle: 5}
	r := rand.New(rand.NewPCG(3, 4))
	for n := range 3000 {
		var plain, reserved Graph
		plain.Init(1)
		reserved.Init(1)
		reserved.Reserve(r.IntN(80), r.IntN(80))
		spans := r.IntN(30)
		shutAt := r.IntN(spans+2) - 1
		for i := range spans {
			p := make([]byte, 24)
			for j := range p {
				p[j] = byte(r.UintN(256))
			}
			s := spanFromBytes(p)
			now := int64(i + 2)
			if a, b := plain.Arrive(&s, now, cfg), reserved.Arrive(&s, now, cfg); a != b {
				t.Fatalf("graph %d, span %d: %+v, reserved %+v", n, i, a, b)
			}
			if i == shutAt {
				plain.Shut()
				reserved.Shut()
			}
		}
		if a, b := plain.Obligations(100, 0, cfg), reserved.Obligations(100, 0, cfg); !reflect.DeepEqual(a, b) {
			t.Fatalf("graph %d: obligations %+v, reserved %+v", n, a, b)
		}
		if !reflect.DeepEqual(plain.Reasons(100, cfg), reserved.Reasons(100, cfg)) ||
			!reflect.DeepEqual(plain.AnomaliesFor(true), reserved.AnomaliesFor(true)) {
			t.Fatalf("graph %d: reasons or anomalies differ", n)
		}
		if a, b := withoutEmptyRare(normalized(plain)), withoutEmptyRare(normalized(reserved)); !reflect.DeepEqual(a, b) {
			t.Fatalf("graph %d: reserved\n%+v\nwant\n%+v", n, b, a)
		}
	}
}

// TestRootDropsEmptyRare: the root's arrival after early model calls
// leaves no rare part when nothing else needed one.
func TestRootDropsEmptyRare(t *testing.T) {
	cfg := &GraphConfig{MaxSpans: 40, Settle: 5}
	var g Graph
	g.Init(1)
	var call Span
	call.Member, call.ID, call.Parent, call.Trace, call.Name = true, SpanID{2}, SpanID{1}, TraceID{1}, "chat"
	call.ModelCall, call.UsagePresent, call.Start, call.End = true, 3, 10, 20
	call.Usage[UsageInput], call.Usage[UsageOutput] = 5, 1
	g.Arrive(&call, 2, cfg)
	if g.rare == nil || len(g.rare.early) != 1 {
		t.Fatalf("early call not held: %+v", g.rare)
	}
	var root Span
	root.Member, root.ID, root.Trace, root.Name, root.Role = true, SpanID{1}, TraceID{1}, "root", RoleRoot
	root.Children, root.Start, root.End = Count{CountValid, 1}, 5, 30
	g.Arrive(&root, 3, cfg)
	if g.rare != nil {
		t.Fatalf("rare kept after the root: %+v", g.rare)
	}
	if g.Usage.Input != 5 || g.Usage.Output != 1 {
		t.Fatalf("usage %+v", g.Usage)
	}
}

// withoutEmptyRare is g with a rare part that holds nothing dropped.
func withoutEmptyRare(g Graph) Graph {
	if r := g.rare; r != nil && r.linkTraces == nil && r.detached == nil && r.early == nil && r.wakes == nil {
		g.rare = nil
	}
	return g
}
