package invocationprocessor

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentledger/agentledger/internal/contract"
)

// expected is what the generator knows an invocation's final summary must
// say.
type expected struct {
	usage          usage
	afterIn        int64
	afterOut       int64
	modelCalls     int64
	backgroundJobs int64
	continuations  int64
	spans          int64
	traces         map[uint64]struct{}
}

// graphGen generates invocation graphs as CONTRACT.md describes them.
type graphGen struct {
	r      *rand.Rand
	nextID uint64
	invs   []*genInv
}

type genInv struct {
	id      string
	spans   []sp
	exp     expected
	rootEnd int64
	jobs    []job // background spans promising one followup, not yet followed up
	// consumed lists jobs whose notification another invocation's turn
	// read; the consuming span gets its link once all invocations exist.
	consumed []job
}

type job struct {
	id, trace uint64
	end       int64
}

func (g *graphGen) id() uint64 {
	g.nextID++
	return g.nextID
}

func (g *graphGen) invocation(name string) *genInv {
	inv := &genInv{id: name, exp: expected{traces: map[uint64]struct{}{}}}
	root := g.id()
	inv.rootEnd = 100 + g.r.Int64N(50)
	rootSpan := sp{inv: name, name: "invoke_agent coder", trace: root, id: root, start: 0, end: inv.rootEnd, role: contract.RoleRoot,
		extra: map[string]any{contract.AttrConversationID: "conv", contract.AttrAgentName: "coder", contract.AttrOperationName: contract.OpInvokeAgent}}
	rootSpan.children = int64(g.turn(inv, root, root, 1, inv.rootEnd-1, true))
	inv.add(rootSpan)

	// Resolve followups: continuations (possibly coalescing several jobs,
	// possibly starting more jobs: chains) or followup_closed spans.
	for depth := 0; len(inv.jobs) > 0; depth++ {
		jobs := inv.jobs
		inv.jobs = nil
		g.r.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
		for len(jobs) > 0 {
			n := 1 + g.r.IntN(min(3, len(jobs)))
			group := jobs[:n]
			jobs = jobs[n:]
			if depth < 3 && g.r.IntN(3) > 0 {
				g.continuation(inv, group)
				continue
			}
			for _, j := range group {
				g.followupClosed(inv, j)
			}
		}
	}
	return inv
}

func (inv *genInv) add(s sp) {
	inv.spans = append(inv.spans, s)
	inv.exp.spans++
	inv.exp.traces[s.trace] = struct{}{}
}

// turn adds the children of one agent turn under parent and returns how
// many direct children it made.
func (g *graphGen) turn(inv *genInv, trace, parent uint64, start, end int64, allowJobs bool) int {
	n := g.r.IntN(5)
	for range n {
		t0 := start + g.r.Int64N(max(1, end-start))
		if !allowJobs || g.r.IntN(2) == 0 {
			g.modelCall(inv, trace, parent, t0)
			continue
		}
		tool := g.id()
		toolSpan := sp{inv: inv.id, name: "execute_tool shell", trace: trace, id: tool, parent: parent, start: t0, end: t0, op: contract.OpExecuteTool,
			remote: g.r.IntN(10) == 0}
		kids := 0
		if g.r.IntN(2) == 0 {
			kids = 1
			bg := g.id()
			jobEnd := t0 + 1 + g.r.Int64N(200)
			bgSpan := sp{inv: inv.id, name: "background shell", trace: trace, id: bg, parent: tool, start: t0, end: jobEnd, role: contract.RoleBackground}
			// A background subagent makes model calls of its own.
			bgSpan.children = int64(0)
			if g.r.IntN(3) == 0 {
				bgSpan.name = "background subagent"
				c := g.r.IntN(3)
				for range c {
					g.modelCall(inv, trace, bg, t0+g.r.Int64N(jobEnd-t0))
				}
				bgSpan.children = int64(c)
			}
			if g.r.IntN(4) > 0 {
				bgSpan.followups = int64(1)
				inv.jobs = append(inv.jobs, job{id: bg, trace: trace, end: jobEnd})
			} else {
				bgSpan.followups = int64(0)
			}
			inv.exp.backgroundJobs++
			inv.add(bgSpan)
		}
		toolSpan.children = int64(kids)
		inv.add(toolSpan)
	}
	return n
}

func (g *graphGen) modelCall(inv *genInv, trace, parent uint64, start int64) {
	id := g.id()
	in, out := g.r.Int64N(10000), g.r.Int64N(2000)
	u := map[string]any{contract.AttrUsageInputTokens: in, contract.AttrUsageOutputTokens: out}
	inv.exp.usage.Input += in
	inv.exp.usage.Output += out
	if g.r.IntN(2) == 0 {
		cr, cc := g.r.Int64N(in+1), g.r.Int64N(100)
		u[contract.AttrUsageCacheReadTokens] = cr
		u[contract.AttrUsageCacheCreateTokens] = cc
		inv.exp.usage.CacheRead += cr
		inv.exp.usage.CacheCreation += cc
	}
	if g.r.IntN(3) == 0 {
		rs := g.r.Int64N(out + 1)
		u[contract.AttrUsageReasoningTokens] = rs
		inv.exp.usage.Reasoning += rs
	}
	if start > inv.rootEnd {
		inv.exp.afterIn += in
		inv.exp.afterOut += out
	}
	inv.exp.modelCalls++
	// Children of model calls carry no usage (HTTP client spans).
	kids := g.r.IntN(3)
	for range kids {
		inv.add(sp{inv: inv.id, name: "POST /v1/messages", trace: trace, id: g.id(), parent: id, start: start, end: start + 1, children: int64(0)})
	}
	inv.add(sp{inv: inv.id, name: "chat", trace: trace, id: id, parent: parent, start: start, end: start + 2, op: contract.OpChat, usage: u, children: int64(kids)})
}

func (g *graphGen) continuation(inv *genInv, group []job) {
	trace := g.id()
	start := inv.rootEnd
	for _, j := range group {
		start = max(start, j.end)
	}
	start++
	links := make([]uint64, len(group))
	for i, j := range group {
		links[i] = j.id
	}
	cont := sp{inv: inv.id, name: "continue_agent coder", trace: trace, id: trace, start: start, end: start + 50, role: contract.RoleContinuation,
		followupOf: links, linkTrace: group[0].trace}
	// Links to jobs of other traces of the invocation are set per link below.
	cont.children = int64(g.turn(inv, trace, trace, start+1, start+49, true))
	inv.exp.continuations++
	inv.add(cont)
	inv.fixLinkTraces(len(inv.spans)-1, group)
}

// fixLinkTraces records each followup link's own trace: jobs of one group
// may come from different traces.
func (inv *genInv) fixLinkTraces(i int, group []job) {
	s := &inv.spans[i]
	s.linkTraces = make([]uint64, len(group))
	for k, j := range group {
		s.linkTraces[k] = j.trace
	}
}

func (g *graphGen) followupClosed(inv *genInv, j job) {
	reasons := []string{contract.ReasonInterrupted, contract.ReasonSessionClosed, contract.ReasonCancelled, contract.ReasonConsumedBy}
	reason := reasons[g.r.IntN(len(reasons))]
	id := g.id()
	s := sp{inv: inv.id, name: contract.SpanNameFollowupClosed, trace: id, id: id, start: j.end, end: j.end, role: contract.RoleFollowupClosed,
		children: int64(0), followupOf: []uint64{j.id}, linkTrace: j.trace,
		extra: map[string]any{contract.AttrFollowupReason: reason}}
	if reason == contract.ReasonConsumedBy {
		inv.consumed = append(inv.consumed, j)
	}
	inv.add(s)
}

// linkConsumers gives each consumed notification a consuming turn in
// another invocation: a plain consumed link on one of its model calls.
func (g *graphGen) linkConsumers() {
	for _, inv := range g.invs {
		for _, j := range inv.consumed {
			other := g.invs[g.r.IntN(len(g.invs))]
			if other == inv {
				continue
			}
			for i := range other.spans {
				s := &other.spans[i]
				if s.op == contract.OpChat && len(s.consumedOf) == 0 && len(s.followupOf) == 0 {
					s.consumedOf = []uint64{j.id}
					s.linkTrace = j.trace
					for k := range inv.spans {
						if inv.spans[k].role == contract.RoleFollowupClosed && len(inv.spans[k].followupOf) == 1 && inv.spans[k].followupOf[0] == j.id {
							inv.spans[k].extra[contract.AttrFollowupConsumer] = other.id
						}
					}
					break
				}
			}
		}
	}
}

// deliver sends the spans shuffled, duplicated and split into random
// batches from several goroutines at once.
func deliver(t *testing.T, r *rand.Rand, h *harness, spans []sp) {
	t.Helper()
	all := make([]sp, 0, len(spans)*2)
	for _, s := range spans {
		all = append(all, s)
		if r.IntN(8) == 0 {
			all = append(all, s)
		}
	}
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	batches := make(chan []sp, len(all))
	for len(all) > 0 {
		n := 1 + r.IntN(min(12, len(all)))
		batches <- all[:n]
		all = all[n:]
	}
	close(batches)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			for b := range batches {
				if err := h.p.ConsumeTraces(context.Background(), batch(b...)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func TestPropertyFinalTotals(t *testing.T) {
	const iterations = 25
	for it := range iterations {
		seed := uint64(it) + 1
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 0x1ed9e7))
			g := &graphGen{r: r}
			for i := range 12 {
				g.invs = append(g.invs, g.invocation(fmt.Sprintf("inv-%d-%d", seed, i)))
			}
			g.linkConsumers()

			// Withhold one load-bearing span of one invocation.
			victim := g.invs[r.IntN(len(g.invs))]
			wi := r.IntN(len(victim.spans))
			withheld := victim.spans[wi]
			var spans []sp
			for _, inv := range g.invs {
				for i, s := range inv.spans {
					if inv == victim && i == wi {
						continue
					}
					spans = append(spans, s)
				}
			}

			h := newHarness(t, 1+r.IntN(8), func(c *Config) { c.RemoteSettle = 40 * time.Millisecond })
			// The real timer goroutine runs too (every 10ms, on the fake
			// clock), so -race sees ticks interleaved with ingestion.
			require.NoError(t, h.p.Start(context.Background(), nil))
			defer h.shutdown()
			deliver(t, r, h, spans)
			h.advance(3 * time.Second) // remote settle
			for _, s := range h.of(victim.id) {
				require.NotEqual(t, contract.StatusFinal, strAttr(s, contract.AttrStatus),
					"final while %q (span %d) is withheld", withheld.name, withheld.id)
			}
			h.consume(batch(withheld))
			h.advance(3 * time.Second)

			total := 0
			for _, inv := range g.invs {
				got := h.of(inv.id)
				total += int(inv.exp.spans)
				finals := 0
				for i, s := range got {
					st := strAttr(s, contract.AttrStatus)
					require.NotEqual(t, contract.StatusIncomplete, st, "%s: reasons %v", inv.id, strsAttr(s, contract.AttrIncompleteReasons))
					if st == contract.StatusPending {
						require.Zero(t, finals, "%s: pending after final (summary %d)", inv.id, i)
						continue
					}
					if intAttr(s, contract.AttrRevision) == 1 {
						finals++
					}
				}
				require.Equal(t, 1, finals, "%s: revision-1 finals", inv.id)
				var final = got[len(got)-1]
				for _, s := range got {
					if strAttr(s, contract.AttrStatus) == contract.StatusFinal && intAttr(s, contract.AttrRevision) == 1 {
						final = s
					}
				}
				e := inv.exp
				assert.Equal(t, e.usage.Input, intAttr(final, contract.AttrUsageInputTokens), inv.id)
				assert.Equal(t, e.usage.Output, intAttr(final, contract.AttrUsageOutputTokens), inv.id)
				assert.Equal(t, e.usage.CacheRead, intAttr(final, contract.AttrUsageCacheReadTokens), inv.id)
				assert.Equal(t, e.usage.CacheCreation, intAttr(final, contract.AttrUsageCacheCreateTokens), inv.id)
				assert.Equal(t, e.usage.Reasoning, intAttr(final, contract.AttrUsageReasoningTokens), inv.id)
				assert.Equal(t, e.afterIn, intAttr(final, contract.AttrAfterResultInput), inv.id)
				assert.Equal(t, e.afterOut, intAttr(final, contract.AttrAfterResultOutput), inv.id)
				assert.Equal(t, e.modelCalls, intAttr(final, contract.AttrModelCalls), inv.id)
				assert.Equal(t, e.backgroundJobs, intAttr(final, contract.AttrBackgroundJobs), inv.id)
				assert.Equal(t, e.continuations, intAttr(final, contract.AttrContinuations), inv.id)
				assert.Equal(t, e.spans, intAttr(final, contract.AttrSpans), inv.id)
				assert.Equal(t, int64(len(e.traces)), intAttr(final, contract.AttrTraces), inv.id)
				assert.Empty(t, strsAttr(final, contract.AttrAnomalies), inv.id)
			}
			assert.GreaterOrEqual(t, h.passed(), total, "every span passes through")
		})
	}
}

// TestPropertyBoundedMemory delivers random graphs through tiny bounds
// (few open invocations, few spans, short retention) and checks that the
// shard bookkeeping stays consistent after every batch, every span passes
// through, and every invocation still gets a final or incomplete summary.
func TestPropertyBoundedMemory(t *testing.T) {
	for it := range 20 {
		seed := uint64(it) + 100
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 0xb0b))
			g := &graphGen{r: r}
			for i := range 8 {
				g.invs = append(g.invs, g.invocation(fmt.Sprintf("inv-%d", i)))
			}
			g.linkConsumers()
			var spans []sp
			for _, inv := range g.invs {
				spans = append(spans, inv.spans...)
			}
			r.Shuffle(len(spans), func(i, j int) { spans[i], spans[j] = spans[j], spans[i] })
			limit := 1 + r.IntN(4)
			h := newHarness(t, 1+r.IntN(3), func(c *Config) {
				c.MaxOpenInvocations = limit
				c.MaxSpansPerInvocation = 5 + r.IntN(30)
				c.Retention = time.Duration(r.IntN(3)) * time.Second
			})
			sent := 0
			for len(spans) > 0 {
				n := 1 + r.IntN(min(10, len(spans)))
				b := spans[:n]
				if r.IntN(5) == 0 {
					b = append(b, b[0]) // a duplicate
				}
				h.consume(batch(b...))
				sent += len(b)
				spans = spans[n:]
				if r.IntN(3) == 0 {
					h.advance(time.Duration(r.IntN(2000)) * time.Millisecond)
				}
				open, closed := 0, 0
				for _, s := range h.p.shards {
					checkIndex(t, s)
					open += s.open.n
					closed += s.closed.n
				}
				require.LessOrEqual(t, open, limit, "max_open_invocations is global")
				require.LessOrEqual(t, closed, limit)
				require.Equal(t, int64(open), h.p.bounds.open.Load())
				require.Equal(t, int64(closed), h.p.bounds.closed.Load())
			}
			h.shutdown()
			assert.Equal(t, sent, h.passed())
			for _, inv := range g.invs {
				got := h.of(inv.id)
				require.NotEmpty(t, got, inv.id)
				last := got[len(got)-1]
				assert.NotEqual(t, contract.StatusPending, strAttr(last, contract.AttrStatus), inv.id)
			}
		})
	}
}
