package ledger

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// graph is a generated invocation: its spans (with their declared
// invocation.children) and the usage they must sum to.
type graph struct {
	spans    []sdktrace.ReadOnlySpan
	children []int
	want     Usage
}

type graphGen struct {
	r      *rand.Rand
	nextID uint64
	base   time.Time
	g      graph
}

func (gg *graphGen) ids() (trace.TraceID, trace.SpanID) {
	gg.nextID++
	var t trace.TraceID
	var s trace.SpanID
	binary.BigEndian.PutUint64(t[8:], gg.nextID)
	binary.BigEndian.PutUint64(s[:], gg.nextID)
	return t, s
}

func (gg *graphGen) at(ms int) time.Time { return gg.base.Add(time.Duration(ms) * time.Millisecond) }

// add records a span; parent may be invalid (a root of its own trace).
func (gg *graphGen) add(name string, parent trace.SpanContext, start, end int, children int, attrs []attribute.KeyValue, links []sdktrace.Link) trace.SpanContext {
	tid, sid := gg.ids()
	if parent.IsValid() {
		tid = parent.TraceID()
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	attrs = append(attrs, attribute.String(contract.AttrInvocationID, "inv"))
	stub := tracetest.SpanStub{
		Name: name, SpanContext: sc, Parent: parent,
		StartTime: gg.at(start), EndTime: gg.at(end),
		Attributes: attrs, Links: links,
	}
	gg.g.spans = append(gg.g.spans, stub.Snapshot())
	gg.g.children = append(gg.g.children, children)
	return sc
}

// model adds a model call under parent.
func (gg *graphGen) model(parent trace.SpanContext, start int, afterResult bool) {
	in, out := int64(gg.r.IntN(100)), int64(gg.r.IntN(20))
	gg.add("chat m", parent, start, start+1, 0, []attribute.KeyValue{
		attribute.String(contract.AttrOperationName, contract.OpChat),
		attribute.Int64(contract.AttrUsageInputTokens, in),
		attribute.Int64(contract.AttrUsageOutputTokens, out),
	}, nil)
	gg.g.want.Input += in
	gg.g.want.Output += out
	gg.g.want.ModelCalls++
	if afterResult {
		gg.g.want.AfterInput += in
		gg.g.want.AfterOutput += out
	}
}

// generate builds a root (ending at 100ms) with model calls and tools;
// some tools start background jobs whose followups are discharged by
// continuations (model calls after the result) or followup_closed spans.
func generate(r *rand.Rand) graph {
	gg := &graphGen{r: r, base: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	root := trace.SpanContext{}
	// The root is added last in this slice order; its id is needed first.
	tid, sid := gg.ids()
	root = trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
	rootChildren := 0
	var jobs []trace.SpanContext
	for i, n := 0, 1+r.IntN(5); i < n; i++ {
		rootChildren++
		if r.IntN(2) == 0 {
			gg.model(root, 1+r.IntN(90), false)
			continue
		}
		toolChildren := r.IntN(3)
		tool := gg.add("execute_tool shell", root, 10, 20, toolChildren, nil, nil)
		for j := 0; j < toolChildren; j++ {
			if r.IntN(2) == 0 {
				gg.model(tool, 11, false)
				continue
			}
			followups := r.IntN(2)
			job := gg.add("background shell", tool, 12, 150+r.IntN(50), 0, []attribute.KeyValue{
				attribute.String(contract.AttrRole, contract.RoleBackground),
				attribute.Int(contract.AttrFollowups, followups),
			}, nil)
			gg.g.want.BackgroundJobs++
			if followups == 1 {
				jobs = append(jobs, job)
			}
		}
	}
	// Discharge the followups: batches of jobs per continuation, or a
	// followup_closed span each.
	r.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	for len(jobs) > 0 {
		k := 1 + r.IntN(len(jobs))
		batch := jobs[:k]
		jobs = jobs[k:]
		link := func(sc trace.SpanContext) sdktrace.Link {
			return sdktrace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{attribute.String(contract.AttrLink, contract.LinkFollowup)}}
		}
		if r.IntN(3) == 0 {
			for _, j := range batch {
				gg.add(contract.SpanNameFollowupClosed, trace.SpanContext{}, 220, 220, 0, []attribute.KeyValue{
					attribute.String(contract.AttrRole, contract.RoleFollowupClosed),
					attribute.String(contract.AttrFollowupReason, contract.ReasonCancelled),
				}, []sdktrace.Link{link(j)})
			}
			continue
		}
		var links []sdktrace.Link
		for _, j := range batch {
			links = append(links, link(j))
		}
		calls := 1 + r.IntN(3)
		cont := gg.add("continue_agent a", trace.SpanContext{}, 200, 300, calls, []attribute.KeyValue{
			attribute.String(contract.AttrRole, contract.RoleContinuation),
		}, links)
		gg.g.want.Continuations++
		for c := 0; c < calls; c++ {
			gg.model(cont, 201+c, true)
		}
	}
	stub := tracetest.SpanStub{
		Name: "invoke_agent a", SpanContext: root, StartTime: gg.at(0), EndTime: gg.at(100),
		Attributes: []attribute.KeyValue{
			attribute.String(contract.AttrInvocationID, "inv"),
			attribute.String(contract.AttrRole, contract.RoleRoot),
		},
	}
	gg.g.spans = append(gg.g.spans, stub.Snapshot())
	gg.g.children = append(gg.g.children, rootChildren)
	gg.g.want.Spans = int64(len(gg.g.spans))
	return gg.g
}

// TestLedgerAnyArrivalOrder delivers generated invocations in random
// order with duplicates: the ledger is final exactly when the last
// distinct span arrived, with exact sums.
func TestLedgerAnyArrivalOrder(t *testing.T) {
	for seed := uint64(0); seed < 300; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		g := generate(r)
		l, _ := newTestLedger(0, defaultMaxSpans)
		order := r.Perm(len(g.spans))
		for i := 0; i < len(g.spans)/3; i++ { // duplicates
			order = append(order, r.IntN(len(g.spans)))
		}
		r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		seen := map[int]bool{}
		for _, idx := range order {
			l.Arrived(g.spans[idx], g.children[idx])
			seen[idx] = true
			s, _ := l.Summary("inv")
			if all := len(seen) == len(g.spans); (s.Status == contract.StatusFinal) != all {
				t.Fatalf("seed %d: after %d of %d distinct spans status %s (reasons %v)",
					seed, len(seen), len(g.spans), s.Status, s.Reasons)
			}
		}
		s, _ := l.Summary("inv")
		if s.Usage != g.want || s.Revision != 1 || len(s.Anomalies) != 0 {
			t.Fatalf("seed %d: summary %+v\nwant usage %+v", seed, s, g.want)
		}
		if s.TimeToFinal != 200*time.Millisecond && g.want.Continuations > 0 {
			t.Fatalf("seed %d: time to final %v, want 200ms", seed, s.TimeToFinal)
		}
	}
}
