package ledger

import (
	"math/rand/v2"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// adversarialGraph is a generated valid invocation (graph) plus spans
// that try to meet its counts without the counted work: late children
// (members whose usage counts, never counted by their parent), repeated
// followup links, self-parented spans and parent cycles (which forbid
// final), and a remote tool whose subtree must settle.
type adversarialGraph struct {
	graph
	// needed[i]: span i is counted by the valid graph; final is wrong
	// while any needed span is withheld.
	needed []bool
	// malformed[i]: span i makes the invocation unprovable; final is
	// wrong once it arrived.
	malformed []bool
	remote    bool
}

// generateAdversarial extends generate's graph.
func generateAdversarial(r *rand.Rand) adversarialGraph {
	base := generate(r)
	ag := adversarialGraph{graph: base}
	for range base.spans {
		ag.needed = append(ag.needed, true)
		ag.malformed = append(ag.malformed, false)
	}
	gg := &graphGen{r: r, nextID: 1 << 20, base: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), g: ag.graph}
	extra := func(malformed bool) {
		ag.needed = append(ag.needed, false)
		ag.malformed = append(ag.malformed, malformed)
	}
	var tools, conts []int
	for i, s := range base.spans {
		switch s.Name() {
		case "execute_tool shell":
			tools = append(tools, i)
		case "continue_agent a":
			conts = append(conts, i)
		}
	}
	root := base.spans[len(base.spans)-1].SpanContext()

	// Late children of tools, overtaking the counted siblings in any order.
	for _, ti := range tools {
		if r.IntN(2) == 0 {
			continue
		}
		in, out := int64(r.IntN(50)), int64(r.IntN(5))
		gg.add("chat late", base.spans[ti].SpanContext(), 60, 61, 0, []attribute.KeyValue{
			attribute.String(contract.AttrOperationName, contract.OpChat),
			attribute.Int64(contract.AttrUsageInputTokens, in),
			attribute.Int64(contract.AttrUsageOutputTokens, out),
			attribute.Bool(contract.AttrLateChild, true),
		}, nil)
		gg.g.want.Input += in
		gg.g.want.Output += out
		gg.g.want.ModelCalls++
		extra(false)
	}
	// A continuation repeats its followup links: it still discharges one
	// followup per job.
	for _, ci := range conts {
		if r.IntN(2) == 0 {
			continue
		}
		s := tracetest.SpanStubFromReadOnlySpan(gg.g.spans[ci])
		s.Links = append(s.Links, s.Links...)
		gg.g.spans[ci] = s.Snapshot()
	}
	// A remote tool: its subtree must settle before final.
	if len(tools) > 0 && r.IntN(3) == 0 {
		ti := tools[r.IntN(len(tools))]
		s := tracetest.SpanStubFromReadOnlySpan(gg.g.spans[ti])
		s.Attributes = append(s.Attributes, attribute.Bool(contract.AttrRemote, true))
		gg.g.spans[ti] = s.Snapshot()
		ag.remote = true
	}
	// Malformed parentage: a span that is its own parent, or two spans
	// that are each other's parent, each declaring one child.
	switch r.IntN(4) {
	case 0:
		_, sid := gg.ids()
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: root.TraceID(), SpanID: sid, TraceFlags: trace.FlagsSampled})
		stub := tracetest.SpanStub{Name: "execute_tool loop", SpanContext: sc, Parent: sc,
			StartTime: gg.at(30), EndTime: gg.at(31),
			Attributes: []attribute.KeyValue{attribute.String(contract.AttrInvocationID, "inv")}}
		gg.g.spans = append(gg.g.spans, stub.Snapshot())
		gg.g.children = append(gg.g.children, 1)
		extra(true)
	case 1:
		_, a := gg.ids()
		_, b := gg.ids()
		for _, pair := range [][2]trace.SpanID{{a, b}, {b, a}} {
			self := trace.NewSpanContext(trace.SpanContextConfig{TraceID: root.TraceID(), SpanID: pair[0], TraceFlags: trace.FlagsSampled})
			parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: root.TraceID(), SpanID: pair[1], TraceFlags: trace.FlagsSampled})
			stub := tracetest.SpanStub{Name: "execute_tool cycle", SpanContext: self, Parent: parent,
				StartTime: gg.at(30), EndTime: gg.at(31),
				Attributes: []attribute.KeyValue{attribute.String(contract.AttrInvocationID, "inv")}}
			gg.g.spans = append(gg.g.spans, stub.Snapshot())
			gg.g.children = append(gg.g.children, 1)
			extra(true)
		}
	}
	ag.graph = gg.g
	ag.want.Spans = int64(len(ag.spans))
	return ag
}

// TestLedgerAdversarialArrivalOrder delivers adversarial invocations
// shuffled and duplicated, one span per millisecond with a remote settle
// time: the ledger is never final while a counted span is withheld or
// after a malformed span arrived, and, once everything arrived and
// settled, it is final with the generator's exact totals when nothing was
// malformed, and never final when something was.
func TestLedgerAdversarialArrivalOrder(t *testing.T) {
	const settle = 5 * time.Millisecond
	for seed := uint64(0); seed < 500; seed++ {
		r := rand.New(rand.NewPCG(seed, 11))
		g := generateAdversarial(r)
		l, clk := newTestLedger(settle, defaultMaxSpans)
		order := r.Perm(len(g.spans))
		for i := 0; i < len(g.spans)/3; i++ {
			order = append(order, r.IntN(len(g.spans)))
		}
		r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })

		seen := map[int]bool{}
		malformedSeen, closedFinalFirst := false, false
		for _, idx := range order {
			clk.Advance(time.Millisecond)
			wasClosed := false
			if s, ok := l.Summary("inv"); ok && s.Status != contract.StatusPending {
				wasClosed = true
			}
			l.Arrived(g.spans[idx], g.children[idx])
			seen[idx] = true
			malformedSeen = malformedSeen || g.malformed[idx]
			s, _ := l.Summary("inv")
			if s.Status != contract.StatusFinal {
				continue
			}
			if !wasClosed && s.Revision == 1 {
				closedFinalFirst = !malformedSeen
			}
			for i, need := range g.needed {
				if need && !seen[i] {
					t.Fatalf("seed %d: final with counted span %q withheld", seed, g.spans[i].Name())
				}
			}
			if malformedSeen && !closedFinalFirst {
				t.Fatalf("seed %d: final after a malformed span arrived (reasons %v)", seed, s.Reasons)
			}
		}
		clk.Advance(settle)
		s, _ := l.Summary("inv")
		malformed := false
		for _, m := range g.malformed {
			malformed = malformed || m
		}
		switch {
		case malformed && s.Status == contract.StatusFinal:
			t.Fatalf("seed %d: final with malformed spans: %+v", seed, s)
		case !malformed && s.Status != contract.StatusFinal:
			t.Fatalf("seed %d: %s after every span arrived and settled: %v", seed, s.Status, s.Reasons)
		case !malformed && s.Usage != g.want:
			t.Fatalf("seed %d: usage %+v\nwant %+v", seed, s.Usage, g.want)
		}
	}
}
