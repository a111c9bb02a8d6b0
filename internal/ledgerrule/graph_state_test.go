package ledgerrule

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// spanFromBytes draws a span of a small alphabet of span IDs, traces,
// roles, counts and links, so that graphs get parents before children,
// cycles, cross-trace links, late spans, duplicates and detached counts.
func spanFromBytes(p []byte) Span {
	at := func(i int) byte {
		if i < len(p) {
			return p[i]
		}
		return 0
	}
	var s Span
	s.Member = true
	s.ID = SpanID{at(0)%12 + 1}
	if at(1)%4 != 0 {
		s.Parent = SpanID{at(1) % 13}
	}
	s.Trace = TraceID{at(2)%3 + 1}
	s.Name = []string{"root", "chat", "tool", "job", "cont"}[at(3)%5]
	s.Role = Role(at(4) % 6)
	counts := []Count{{}, {CountValid, 1}, {CountValid, 2}, {CountInvalid, 0}}
	s.Children = counts[at(5)%4]
	s.Followups = counts[at(6)%4]
	if at(7) >= 192 {
		s.Detached = counts[at(7)%4]
	}
	s.Remote = at(8)%7 == 0
	s.LateChild = at(8)%11 == 0
	s.Interrupted = at(8)%13 == 0
	s.ModelCall = at(9)%2 == 0
	if s.ModelCall {
		s.UsagePresent = 3
		s.Usage[UsageInput], s.Usage[UsageOutput] = int64(at(10)), int64(at(11))
	}
	s.Start, s.End = uint64(at(12))*10, uint64(at(12))*10+uint64(at(13))
	for k := range int(at(14) % 3) {
		s.Links.Add(Link{Trace: TraceID{at(15+k)%3 + 1}, Span: SpanID{at(17+k)%12 + 1}, Kind: LinkKind(at(19+k) % 5)})
	}
	return s
}

// normalized is g with its lookup caches dropped and its empty lists
// nil, for comparing states.
func normalized(g Graph) Graph {
	g.maps = nil
	if g.notes != nil {
		n := *g.notes
		nilEmpty(&n.invalid)
		nilEmpty(&n.taints)
		nilEmpty(&n.anomalies)
		g.notes = &n
	}
	nilEmpty(&g.Names)
	nilEmpty(&g.Traces)
	nilEmpty(&g.Spans)
	nilEmpty(&g.closed)
	if g.follow != nil {
		// Kept in the order the followups came; a decoded graph has them
		// in the order of Spans.
		f := slices.Clone(g.follow.entries)
		slices.SortFunc(f, func(a, b spanFollowups) int { return bytes.Compare(a.id[:], b.id[:]) })
		g.follow = &followTable{entries: f}
	}
	if g.rare != nil {
		r := *g.rare
		nilEmpty(&r.linkTraces)
		nilEmpty(&r.detached)
		nilEmpty(&r.early)
		nilEmpty(&r.wakes)
		g.rare = &r
	}
	return g
}

func nilEmpty[T any](l *[]T) {
	if len(*l) == 0 {
		*l = nil
	}
}

// randomGraph feeds spans drawn from r into a new graph, shutting it
// after shutAt of them (never when shutAt is negative).
func randomGraph(r *rand.Rand, spans, shutAt int, cfg *GraphConfig) (*Graph, [][]byte) {
	var g Graph
	g.Init(1)
	var fed [][]byte
	for i := range spans {
		p := make([]byte, 24)
		for j := range p {
			p[j] = byte(r.UintN(256))
		}
		fed = append(fed, p)
		s := spanFromBytes(p)
		g.Arrive(&s, int64(i+2), cfg)
		if i == shutAt {
			g.Shut()
		}
	}
	return &g, fed
}

// TestGraphStateRoundTrip: a graph decoded from its state equals the
// original (lookup caches aside), and both answer the same spans fed
// after it in the same way, open or shut.
func TestGraphStateRoundTrip(t *testing.T) {
	cfg := &GraphConfig{MaxSpans: 40, Settle: 5}
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 3000 {
		spans := r.IntN(30)
		g, _ := randomGraph(r, spans, r.IntN(spans+2)-1, cfg)
		state := g.AppendState([]byte{0xee})
		var back Graph
		rest, err := back.DecodeState(state[1:])
		if err != nil || len(rest) != 0 {
			t.Fatalf("graph %d: %v, %d bytes left", n, err, len(rest))
		}
		if !reflect.DeepEqual(normalized(*g), normalized(back)) {
			t.Fatalf("graph %d: decoded\n%+v\nwant\n%+v", n, back, *g)
		}
		if again := back.AppendState([]byte{0xee}); !bytes.Equal(again, state) {
			t.Fatalf("graph %d: re-encoded state differs", n)
		}
		for i := range 20 {
			p := make([]byte, 24)
			for j := range p {
				p[j] = byte(r.UintN(256))
			}
			s := spanFromBytes(p)
			now := int64(100 + i)
			if a, b := g.Arrive(&s, now, cfg), back.Arrive(&s, now, cfg); a != b {
				t.Fatalf("graph %d, span %d after: %+v, decoded %+v", n, i, a, b)
			}
			if i == 10 && !g.IsShut {
				g.Shut()
				back.Shut()
			}
		}
		if !reflect.DeepEqual(normalized(*g), normalized(back)) {
			t.Fatalf("graph %d after more spans: decoded\n%+v\nwant\n%+v", n, back, *g)
		}
		if !reflect.DeepEqual(g.Reasons(200, cfg), back.Reasons(200, cfg)) || !reflect.DeepEqual(g.AnomaliesFor(true), back.AnomaliesFor(true)) {
			t.Fatalf("graph %d: reasons or anomalies differ", n)
		}
	}
}

// TestGraphStateCoversEveryField fails when Graph or SpanState gains a
// field: AppendState and DecodeState must then store it.
func TestGraphStateCoversEveryField(t *testing.T) {
	for _, c := range []struct {
		v    any
		want int
	}{{Graph{}, 29}, {graphNotes{}, 3}, {SpanState{}, 11}, {followTable{}, 2}, {spanFollowups{}, 3}, {closedSpan{}, 5}, {graphRare{}, 4}, {DetachedCount{}, 5}, {EarlyCall{}, 3}, {Usage{}, 5}} {
		if n := reflect.TypeOf(c.v).NumField(); n != c.want {
			t.Errorf("%T has %d fields, the state codec knows %d: store the new one in AppendState and DecodeState", c.v, n, c.want)
		}
	}
}

// FuzzGraphState: any input either fails to decode or decodes to a graph
// whose methods are safe, and that re-encodes to the bytes it was read
// from.
func FuzzGraphState(f *testing.F) {
	cfg := &GraphConfig{MaxSpans: 40, Settle: 5}
	r := rand.New(rand.NewPCG(3, 4))
	for range 20 {
		g, _ := randomGraph(r, r.IntN(20), r.IntN(20), cfg)
		f.Add(g.AppendState(nil))
	}
	f.Add([]byte{0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var g Graph
		rest, err := g.DecodeState(data)
		if err != nil {
			return
		}
		used := data[:len(data)-len(rest)]
		if again := g.AppendState(nil); !bytes.Equal(again, used) {
			// Non-canonical varints and flag bits decode to the same
			// state: compare the states instead.
			var h Graph
			if _, err := h.DecodeState(again); err != nil || !reflect.DeepEqual(normalized(g), normalized(h)) {
				t.Fatalf("re-encoded state does not decode to the same graph: %v", err)
			}
		}
		g.Obligations(10, 0, cfg)
		g.Reasons(10, cfg)
		g.AnomaliesFor(true)
		g.ApproxBytes()
		g.HeldBackground(func(SpanID) {})
		for i := range 8 {
			s := spanFromBytes([]byte{byte(i * 37), byte(i * 11), byte(i), byte(i), byte(i), 1, 1, 0, 0, 0, 1, 1, 3, 4, 2, 0, 1, 2, 3, 1, 1})
			g.Arrive(&s, int64(20+i), cfg)
		}
		g.Shut()
		g.Reasons(30, cfg)
	})
}
