package invocationprocessor

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/ledgerrule"
)

// expected is what the generator knows an invocation's final summary must
// say.
type expected struct {
	usage          ledgerrule.Usage
	afterIn        int64
	afterOut       int64
	modelCalls     int64
	backgroundJobs int64
	continuations  int64
	spans          int64
	traces         map[uint64]struct{}
	anomalies      map[string]struct{}
}

func (e expected) clone() expected {
	c := e
	c.traces = maps.Clone(e.traces)
	c.anomalies = maps.Clone(e.anomalies)
	return c
}

// graphGen generates invocation graphs as CONTRACT.md describes them, and
// the adversarial inputs CONTRACT v0.2 closes: late children (uncounted,
// overtaking their counted siblings in delivery), a continuation repeating
// a followup link, self-parents and parent cycles, a span ID reused in
// another trace, model calls without usage (failed ones, which are fine,
// and billed ones, which are not), and uncounted children of remote spans
// that arrive after the summary.
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
	jobs    []job // one entry per followup a background span promised, not yet followed up
	// consumed lists jobs whose notification another invocation's turn
	// read; the consuming span gets its link once all invocations exist.
	consumed []job
	// taint is the reason kind that keeps the invocation from ever being
	// final (malformed_parentage, span_id_reused, usage_missing), or "";
	// first holds the spans that carry it. They are delivered before the
	// rest: a cycle or a self-parent is nobody's child, so delivered last
	// it would rightly find the invocation already final.
	taint string
	first []sp
	// after holds uncounted spans delivered after the first final (late
	// children, children of remote tools): expLate is what the revision
	// they cause must say. remoteTools are the remote tool spans.
	after       []sp
	expLate     expected
	remoteTools []sp
}

type job struct {
	id, trace uint64
	name      string
	end       int64
	promised  int // the job's invocation.followups
}

func (g *graphGen) id() uint64 {
	g.nextID++
	return g.nextID
}

func (g *graphGen) invocation(name string) *genInv {
	inv := &genInv{id: name, exp: expected{traces: map[uint64]struct{}{}, anomalies: map[string]struct{}{}}}
	root := g.id()
	inv.rootEnd = 100 + g.r.Int64N(50)
	rootSpan := sp{inv: name, name: "invoke_agent coder", trace: root, id: root, start: 0, end: inv.rootEnd, role: contract.RoleRoot,
		extra: map[string]any{contract.AttrConversationID: "conv", contract.AttrAgentName: "coder", contract.AttrOperationName: contract.OpInvokeAgent}}
	rootSpan.children = int64(g.turn(inv, root, root, 1, inv.rootEnd-1, true))
	g.crossCheck(inv, &rootSpan)
	inv.add(rootSpan)

	// Resolve followups: continuations (possibly coalescing several jobs,
	// possibly starting more jobs: chains) or followup_closed spans.
	for depth := 0; len(inv.jobs) > 0; depth++ {
		jobs := inv.jobs
		inv.jobs = nil
		g.r.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
		for len(jobs) > 0 {
			n := 1 + g.r.IntN(min(3, len(jobs)))
			var group []job
			for _, j := range jobs[:n] {
				if slices.ContainsFunc(group, func(o job) bool { return o.id == j.id }) {
					inv.jobs = append(inv.jobs, j) // its second followup: a later span
					continue
				}
				group = append(group, j)
			}
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
	if g.r.IntN(6) == 0 {
		g.taint(inv)
	}
	for _, tool := range inv.remoteTools {
		if g.r.IntN(2) == 0 {
			// A model call the subprocess made: uncounted, arriving late.
			inv.after = append(inv.after, g.lateCall(inv, tool, false))
		}
	}
	inv.expLate = inv.exp.clone()
	for _, s := range inv.after {
		inv.expLate.addSpan(s, inv.rootEnd)
		inv.expLate.anomalies[contract.AnomalyLateSpan+":"+s.name] = struct{}{}
	}
	return inv
}

// addSpan counts an uncounted span (without children of its own) in e.
func (e *expected) addSpan(s sp, rootEnd int64) {
	e.spans++
	e.traces[s.trace] = struct{}{}
	if s.op != contract.OpChat {
		return
	}
	e.modelCalls++
	in, _ := s.usage[contract.AttrUsageInputTokens].(int64)
	out, _ := s.usage[contract.AttrUsageOutputTokens].(int64)
	e.usage.Input += in
	e.usage.Output += out
	if s.start > rootEnd {
		e.afterIn += in
		e.afterOut += out
	}
	if s.extraChildrenOf != "" {
		e.anomalies[s.extraChildrenOf] = struct{}{}
	}
}

// lateCall makes an uncounted model call under parent: a late child (late
// set), or a child from a remote process.
func (g *graphGen) lateCall(inv *genInv, parent sp, late bool) sp {
	start := parent.end + 1 + g.r.Int64N(50)
	call := sp{inv: inv.id, name: "chat", trace: parent.trace, id: g.id(), parent: parent.id, start: start, end: start + 2,
		op: contract.OpChat, children: int64(0), usage: tokens(1+g.r.Int64N(500), g.r.Int64N(50)), late: late, uncounted: true}
	if late && !parent.remote {
		call.extraChildrenOf = contract.AnomalyExtraChildren + ":" + parent.name
	}
	return call
}

func (inv *genInv) add(s sp) {
	inv.spans = append(inv.spans, s)
	inv.exp.spans++
	inv.exp.traces[s.trace] = struct{}{}
}

// taint adds one input the contract never lets be final.
func (g *graphGen) taint(inv *genInv) {
	root := inv.spans[len(inv.spans)-1] // added last by invocation
	switch g.r.IntN(4) {
	case 0: // a span that is its own parent, declaring one child
		id := g.id()
		inv.first = append(inv.first, sp{inv: inv.id, name: "execute_tool loop", trace: root.trace, id: id, parent: id, start: 2, end: 3, children: int64(1), uncounted: true})
		inv.taint = contract.ReasonMalformedParentage
	case 1: // two spans that are each other's parent, each declaring one child
		a, b := g.id(), g.id()
		inv.first = append(inv.first,
			sp{inv: inv.id, name: "execute_tool a", trace: root.trace, id: a, parent: b, start: 2, end: 3, children: int64(1), uncounted: true},
			sp{inv: inv.id, name: "execute_tool b", trace: root.trace, id: b, parent: a, start: 2, end: 3, children: int64(1), uncounted: true})
		inv.taint = contract.ReasonMalformedParentage
	case 2: // a span ID reused in another trace (delivered first, so the
		// counted span is the later arrival and is not indexed)
		for _, s := range inv.spans {
			if s.op == contract.OpChat {
				inv.first = append(inv.first, sp{inv: inv.id, name: "chat retry", trace: g.id(), id: s.id, start: 2, end: 3,
					children: int64(0), op: contract.OpChat, usage: tokens(9, 9), uncounted: true})
				inv.taint = contract.ReasonSpanIDReused
				break
			}
		}
	case 3: // a billed model call without usage, counted by the root
		root.children = root.children.(int64) + 1
		inv.spans[len(inv.spans)-1] = root
		inv.add(sp{inv: inv.id, name: "chat", trace: root.trace, id: g.id(), parent: root.id, start: 5, end: 6, children: int64(0), op: contract.OpChat})
		inv.taint = contract.ReasonUsageMissing
	}
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
			switch k := g.r.IntN(4); k {
			case 0:
				bgSpan.followups = int64(0)
			case 1: // two followups, by two spans
				bgSpan.followups = int64(2)
				j := job{id: bg, trace: trace, name: bgSpan.name, end: jobEnd, promised: 2}
				inv.jobs = append(inv.jobs, j, j)
			default:
				bgSpan.followups = int64(1)
				inv.jobs = append(inv.jobs, job{id: bg, trace: trace, name: bgSpan.name, end: jobEnd, promised: 1})
			}
			inv.exp.backgroundJobs++
			inv.add(bgSpan)
		}
		toolSpan.children = int64(kids)
		inv.add(toolSpan)
		if toolSpan.remote {
			inv.remoteTools = append(inv.remoteTools, toolSpan)
		}
		if g.r.IntN(6) == 0 {
			// A late child: started after the tool ended, so the tool's
			// count does not include it; its usage is the invocation's.
			// Delivered first it overtakes its counted siblings and must
			// be in the first final; delivered after the final, a revision.
			late := g.lateCall(inv, toolSpan, true)
			if g.r.IntN(2) == 0 {
				inv.first = append(inv.first, late)
				inv.exp.addSpan(late, inv.rootEnd)
			} else {
				inv.after = append(inv.after, late)
			}
		}
	}
	return n
}

func (g *graphGen) modelCall(inv *genInv, trace, parent uint64, start int64) {
	inv.add(g.modelCallSpan(inv, trace, parent, start, &inv.exp))
}

// modelCallSpan makes a model call (adding its HTTP children to inv) and
// counts it in exp; one in ten failed without usage, which is not missing
// usage.
func (g *graphGen) modelCallSpan(inv *genInv, trace, parent uint64, start int64, exp *expected) sp {
	id := g.id()
	exp.modelCalls++
	// Children of model calls carry no usage (HTTP client spans).
	kids := g.r.IntN(3)
	for range kids {
		inv.add(sp{inv: inv.id, name: "POST /v1/messages", trace: trace, id: g.id(), parent: id, start: start, end: start + 1, children: int64(0)})
	}
	call := sp{inv: inv.id, name: "chat", trace: trace, id: id, parent: parent, start: start, end: start + 2, op: contract.OpChat, children: int64(kids)}
	if g.r.IntN(10) == 0 {
		call.failed = true
		return call
	}
	in, out := g.r.Int64N(10000), g.r.Int64N(2000)
	u := map[string]any{contract.AttrUsageInputTokens: in, contract.AttrUsageOutputTokens: out}
	exp.usage.Input += in
	exp.usage.Output += out
	if g.r.IntN(2) == 0 {
		cr, cc := g.r.Int64N(in+1), g.r.Int64N(100)
		u[contract.AttrUsageCacheReadTokens] = cr
		u[contract.AttrUsageCacheCreateTokens] = cc
		exp.usage.CacheRead += cr
		exp.usage.CacheCreation += cc
	}
	if g.r.IntN(3) == 0 {
		rs := g.r.Int64N(out + 1)
		u[contract.AttrUsageReasoningTokens] = rs
		exp.usage.Reasoning += rs
	}
	if start > inv.rootEnd {
		exp.afterIn += in
		exp.afterOut += out
	}
	call.usage = u
	return call
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
		followupOf: links}
	cont.children = int64(g.turn(inv, trace, trace, start+1, start+49, true))
	// Each followup link names its job's own trace: jobs of one group may
	// come from different traces.
	for _, j := range group {
		cont.linkTraces = append(cont.linkTraces, j.trace)
	}
	// The same job linked twice: still one discharge. Most tempting when
	// the job promised two followups.
	twice := -1
	for i, j := range group {
		if j.promised == 2 && g.r.IntN(2) == 0 {
			twice = i
		}
	}
	if twice < 0 && g.r.IntN(6) == 0 {
		twice = 0
	}
	if twice >= 0 {
		cont.followupOf = append(cont.followupOf, group[twice].id)
		cont.linkTraces = append(cont.linkTraces, group[twice].trace)
		inv.exp.anomalies[contract.AnomalyDuplicateLink+":"+cont.name] = struct{}{}
	}
	inv.exp.continuations++
	g.crossCheck(inv, &cont)
	inv.add(cont)
}

// crossCheck is an adapter comparing a turn's wire usage with the
// runtime's own report (CONTRACT.md v0.8): a quarter of turns disagree
// and are flagged, another quarter agree and say so.
func (g *graphGen) crossCheck(inv *genInv, turn *sp) {
	mismatch := false
	switch g.r.IntN(4) {
	case 0:
		mismatch = true
		inv.exp.anomalies[contract.AnomalyUsageMismatch+":"+turn.name] = struct{}{}
	case 1:
	default:
		return
	}
	extra := map[string]any{contract.AttrUsageMismatch: mismatch}
	for k, v := range turn.extra {
		extra[k] = v
	}
	turn.extra = extra
}

func (g *graphGen) followupClosed(inv *genInv, j job) {
	reasons := []string{contract.ReasonInterrupted, contract.ReasonSessionClosed, contract.ReasonCancelled, contract.ReasonConsumedBy}
	reason := reasons[g.r.IntN(len(reasons))]
	id := g.id()
	s := sp{inv: inv.id, name: contract.SpanNameFollowupClosed, trace: id, id: id, start: j.end, end: j.end, role: contract.RoleFollowupClosed,
		children: int64(0), followupOf: []uint64{j.id}, linkTrace: j.trace,
		extra: map[string]any{contract.AttrFollowupReason: reason}}
	switch reason {
	case contract.ReasonConsumedBy:
		inv.consumed = append(inv.consumed, j)
	case contract.ReasonInterrupted:
		// CONTRACT.md v0.7: the job was killed.
		inv.exp.anomalies[contract.AnomalyFollowupInterrupted+":"+j.name] = struct{}{}
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
				if s.op == contract.OpChat && s.name == "chat" && len(s.consumedOf) == 0 && len(s.followupOf) == 0 {
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

// withholdCounted picks a span of inv that some count declares (withheld,
// the invocation must not be final). When inv has a late child, it prefers
// a counted sibling of it, so the late child overtakes it in delivery.
func (g *graphGen) withholdCounted(inv *genInv) int {
	var lateParents []uint64
	for _, s := range slices.Concat(inv.first, inv.after) {
		if s.late {
			lateParents = append(lateParents, s.parent)
		}
	}
	if len(lateParents) > 0 && g.r.IntN(2) == 0 {
		for i, s := range inv.spans {
			if !s.uncounted && slices.Contains(lateParents, s.parent) && s.parent != 0 {
				return i
			}
		}
	}
	// A job linked twice by one span: withhold the other span that
	// follows it up, if the job promised two.
	var twice []uint64
	for _, s := range inv.spans {
		for k, f := range s.followupOf {
			if slices.Contains(s.followupOf[k+1:], f) {
				twice = append(twice, f)
			}
		}
	}
	if len(twice) > 0 && g.r.IntN(2) == 0 {
		for i, s := range inv.spans {
			for _, f := range twice {
				if c := countOf(s.followupOf, f); c == 1 {
					return i
				}
			}
		}
	}
	for {
		i := g.r.IntN(len(inv.spans))
		if !inv.spans[i].uncounted {
			return i
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

// TestPropertyFinalTotals generates invocations (some adversarial),
// delivers them shuffled, split, duplicated and concurrently with one
// counted span withheld, and checks: no final while a counted span is
// withheld; every final's totals and anomalies equal the generator's; an
// invocation the contract never lets be final never is; and an uncounted
// child of a remote span arriving after the final gets a final revision
// only after remote_settle, with the generator's new totals.
func TestPropertyFinalTotals(t *testing.T) {
	const iterations = 25
	const settle = 40 * time.Millisecond
	for it := range iterations {
		seed := uint64(it) + 1
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 0x1ed9e7))
			g := &graphGen{r: r}
			for i := range 12 {
				g.invs = append(g.invs, g.invocation(fmt.Sprintf("inv-%d-%d", seed, i)))
			}
			g.linkConsumers()

			// Withhold one counted span of one invocation the contract
			// would otherwise let be final; half the time one with a late
			// child or a job linked twice, whose withheld sibling is the
			// span those would stand in for.
			var candidates, tempting []*genInv
			for _, inv := range g.invs {
				if inv.taint == "" {
					candidates = append(candidates, inv)
					if len(inv.first)+len(inv.after) > 0 || hasDuplicateLink(inv) {
						tempting = append(tempting, inv)
					}
				}
			}
			if len(tempting) > 0 && r.IntN(2) == 0 {
				candidates = tempting
			}
			require.NotEmpty(t, candidates)
			victim := candidates[r.IntN(len(candidates))]
			wi := g.withholdCounted(victim)
			withheld := victim.spans[wi]
			var spans, first []sp
			for _, inv := range g.invs {
				first = append(first, inv.first...)
				for i, s := range inv.spans {
					if inv == victim && i == wi {
						continue
					}
					spans = append(spans, s)
				}
			}

			// pending_delay: none, within remote_settle, beyond it.
			pendingDelay := []time.Duration{0, settle / 2, 2 * settle}[r.IntN(3)]
			h := newHarness(t, 1+r.IntN(8), func(c *Config) {
				c.RemoteSettle = settle
				c.PendingDelay = pendingDelay
			})
			// The real timer goroutine runs too (every 10ms, on the fake
			// clock), so -race sees ticks interleaved with ingestion.
			require.NoError(t, h.p.Start(context.Background(), nil))
			shutdown := sync.OnceFunc(h.shutdown)
			defer shutdown()
			if len(first) > 0 {
				h.consume(batch(first...))
			}
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
				total += len(inv.spans) + len(inv.first)
				if inv.taint != "" {
					requireNeverFinal(t, inv, got)
					continue
				}
				finals := 0
				var final ptrace.Span
				for i, s := range got {
					st := strAttr(s, contract.AttrStatus)
					require.NotEqual(t, contract.StatusIncomplete, st, "%s: reasons %v", inv.id, strsAttr(s, contract.AttrIncompleteReasons))
					if st == contract.StatusPending {
						require.Zero(t, finals, "%s: pending after final (summary %d)", inv.id, i)
						require.Zero(t, i, "%s: a second pending (summary %d)", inv.id, i)
						continue
					}
					if intAttr(s, contract.AttrRevision) == 1 {
						finals++
						final = s
					}
				}
				require.Equal(t, 1, finals, "%s: revision-1 finals", inv.id)
				assertTotals(t, inv.id, inv.exp, final)
			}
			assert.GreaterOrEqual(t, h.passed(), total, "every span passes through")

			// Uncounted spans arrive after the final: late children and
			// children of remote tools. The revision is final at once
			// without a remote span, only after remote_settle with one.
			var late []sp
			finalsBefore := map[string]int{}
			for _, inv := range g.invs {
				if inv.taint == "" && len(inv.after) > 0 {
					late = append(late, inv.after...)
					finalsBefore[inv.id] = countStatus(h.of(inv.id), contract.StatusFinal)
				}
			}
			r.Shuffle(len(late), func(i, j int) { late[i], late[j] = late[j], late[i] })
			for _, s := range late {
				h.consume(batch(s))
			}
			for _, inv := range g.invs {
				if n, ok := finalsBefore[inv.id]; ok && len(inv.remoteTools) > 0 {
					require.Equal(t, n, countStatus(h.of(inv.id), contract.StatusFinal), "%s: a final revision before remote_settle", inv.id)
				}
			}
			h.advance(settle)
			for _, inv := range g.invs {
				if _, ok := finalsBefore[inv.id]; !ok {
					continue
				}
				got := h.of(inv.id)
				last := got[len(got)-1]
				require.Equal(t, contract.StatusFinal, strAttr(last, contract.AttrStatus), "%s: reasons %v", inv.id, strsAttr(last, contract.AttrIncompleteReasons))
				require.GreaterOrEqual(t, intAttr(last, contract.AttrRevision), int64(2))
				assertTotals(t, inv.id, inv.expLate, last)
			}

			shutdown()
			for _, inv := range g.invs {
				if inv.taint != "" {
					got := h.of(inv.id)
					requireNeverFinal(t, inv, got)
					require.NotEmpty(t, got)
					last := got[len(got)-1]
					require.Equal(t, contract.StatusIncomplete, strAttr(last, contract.AttrStatus), inv.id)
					requireReasonKind(t, inv, last)
				}
			}
		})
	}
}

func hasDuplicateLink(inv *genInv) bool {
	_, ok := inv.exp.anomalies[contract.AnomalyDuplicateLink+":continue_agent coder"]
	return ok
}

func countOf(ids []uint64, id uint64) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}

func countStatus(sums []ptrace.Span, status string) int {
	n := 0
	for _, s := range sums {
		if strAttr(s, contract.AttrStatus) == status {
			n++
		}
	}
	return n
}

// requireNeverFinal checks a tainted invocation's summaries: none final,
// and each final or incomplete one says why.
func requireNeverFinal(t *testing.T, inv *genInv, got []ptrace.Span) {
	t.Helper()
	for _, s := range got {
		st := strAttr(s, contract.AttrStatus)
		require.NotEqual(t, contract.StatusFinal, st, "%s: final although %s", inv.id, inv.taint)
		if st == contract.StatusIncomplete {
			requireReasonKind(t, inv, s)
		}
	}
}

func requireReasonKind(t *testing.T, inv *genInv, s ptrace.Span) {
	t.Helper()
	reasons := strsAttr(s, contract.AttrIncompleteReasons)
	require.True(t, slices.ContainsFunc(reasons, func(r string) bool { return strings.HasPrefix(r, inv.taint+":") }),
		"%s: reasons %v lack %s", inv.id, reasons, inv.taint)
}

func assertTotals(t *testing.T, id string, e expected, final ptrace.Span) {
	t.Helper()
	assert.Equal(t, e.usage.Input, intAttr(final, contract.AttrUsageInputTokens), id)
	assert.Equal(t, e.usage.Output, intAttr(final, contract.AttrUsageOutputTokens), id)
	assert.Equal(t, e.usage.CacheRead, intAttr(final, contract.AttrUsageCacheReadTokens), id)
	assert.Equal(t, e.usage.CacheCreation, intAttr(final, contract.AttrUsageCacheCreateTokens), id)
	assert.Equal(t, e.usage.Reasoning, intAttr(final, contract.AttrUsageReasoningTokens), id)
	assert.Equal(t, e.afterIn, intAttr(final, contract.AttrAfterResultInput), id)
	assert.Equal(t, e.afterOut, intAttr(final, contract.AttrAfterResultOutput), id)
	assert.Equal(t, e.modelCalls, intAttr(final, contract.AttrModelCalls), id)
	assert.Equal(t, e.backgroundJobs, intAttr(final, contract.AttrBackgroundJobs), id)
	assert.Equal(t, e.continuations, intAttr(final, contract.AttrContinuations), id)
	assert.Equal(t, e.spans, intAttr(final, contract.AttrSpans), id)
	assert.Equal(t, int64(len(e.traces)), intAttr(final, contract.AttrTraces), id)
	assert.Equal(t, sorted(slices.Collect(maps.Keys(e.anomalies))), sorted(strsAttr(final, contract.AttrAnomalies)), id)
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
				spans = append(spans, inv.first...)
				spans = append(spans, inv.spans...)
				spans = append(spans, inv.after...)
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
				b := slices.Clip(spans[:n]) // appending must not overwrite the next span
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
