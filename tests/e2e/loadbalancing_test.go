package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/testbin"
)

// The tier-1 config is validated with the others by
// TestCollectorConfigsValidate. Tier 2 is local.yaml itself.
const (
	lbConfig      = "loadbalancing.yaml"
	backendConfig = "local.yaml"
	lbInvocations = 20
)

// lbSpan is one span of the load-balancing test with the invocation it
// belongs to.
type lbSpan struct {
	span handSpan
	inv  string
}

// lbInvocation is one hand-made invocation of the load-balancing test and
// what its summary must say.
type lbInvocation struct {
	id                             string
	root, chat1, tool, job, cont   handSpan
	chat2                          handSpan
	input, output, afterOut, dupes int64
}

func (iv *lbInvocation) spans() []handSpan {
	return []handSpan{iv.root, iv.chat1, iv.tool, iv.job, iv.cont, iv.chat2}
}

// newLBInvocation is backgroundInvocation with usage that differs per
// invocation, so that a span counted in the wrong invocation changes a sum.
func newLBInvocation(i int) *lbInvocation {
	iv := &lbInvocation{id: fmt.Sprintf("e2e-lb-%02d", i)}
	iv.root, iv.chat1, iv.tool, iv.job, iv.cont, iv.chat2 = backgroundInvocation(byte(0x10 + 8*i))
	iv.chat1.attrs[contract.AttrUsageInputTokens] = 100 + i
	iv.chat2.attrs[contract.AttrUsageOutputTokens] = 50 + i
	iv.input = 100 + int64(i) + 300
	iv.output = 20 + 50 + int64(i)
	iv.afterOut = 50 + int64(i)
	return iv
}

func (iv *lbInvocation) want() testbin.Summary {
	return testbin.Summary{
		TraceID: iv.root.trace.String(), InvocationID: iv.id, ConversationID: "session-1", AgentName: "e2e",
		Status: contract.StatusFinal, Revision: 1,
		InputTokens: iv.input, OutputTokens: iv.output, CacheReadTokens: 240, CacheCreationTokens: 10, ReasoningTokens: 5,
		AfterResultInputTokens: 300, AfterResultOutputTokens: iv.afterOut,
		ModelCalls: 2, BackgroundJobs: 1, Continuations: 1, Spans: 6, Traces: 2, DuplicateSpans: iv.dupes,
		TimeToFinalMS: 3000, HasTimeToFinal: true,
		Links: []string{iv.cont.trace.String() + "/" + iv.cont.id.String()},
	}
}

// mixedBatch puts spans of any invocations and traces into one OTLP request,
// in the given order, model calls under a second instrumentation scope as a
// client wrapper would export them.
func mixedBatch(t0 time.Time, items []lbSpan) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "e2e-agent")
	agent := rs.ScopeSpans().AppendEmpty()
	agent.Scope().SetName("github.com/agentledger/agentledger/tests/e2e")
	model := rs.ScopeSpans().AppendEmpty()
	model.Scope().SetName("github.com/agentledger/agentledger/tests/e2e/model")
	for _, it := range items {
		ss := agent
		if it.span.attrs[contract.AttrOperationName] == contract.OpChat {
			ss = model
		}
		it.span.appendTo(ss.Spans(), t0, it.inv)
	}
	return td
}

// chunk cuts items into mixed batches of at most n spans.
func chunk(t0 time.Time, items []lbSpan, n int) []ptrace.Traces {
	var out []ptrace.Traces
	for len(items) > 0 {
		k := min(n, len(items))
		out = append(out, mixedBatch(t0, items[:k]))
		items = items[k:]
	}
	return out
}

// lbBackend is one tier-2 collector (local.yaml).
type lbBackend struct {
	addrs testbin.CollectorAddrs
	proc  *testbin.Process
}

// startLBTier starts n backends running local.yaml and, last (so that its
// cleanup runs first and its queues drain into running backends), the
// load-balancing tier in front of them. Every process is stopped by PID
// when the test ends.
func startLBTier(t *testing.T, n int) ([]lbBackend, *testbin.Process, testbin.CollectorAddrs) {
	t.Helper()
	backends := startLBBackends(t, n)
	lb, lbAddrs := startLB(t, backends...)
	return backends, lb, lbAddrs
}

// startLBBackends starts n collectors running local.yaml on free ports.
func startLBBackends(t *testing.T, n int) []lbBackend {
	t.Helper()
	bin := collectorBin(t)
	backends := make([]lbBackend, n)
	for i := range backends {
		addrs, err := testbin.NewCollectorAddrs(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		backends[i] = lbBackend{addrs: addrs,
			proc: startCollector(t, bin, backendConfig, addrs, "AGENTLEDGER_DEBUG_VERBOSITY=basic")}
	}
	return backends
}

// startLB starts loadbalancing.yaml on free ports with backends as its
// static list.
func startLB(t *testing.T, backends ...lbBackend) (*testbin.Process, testbin.CollectorAddrs) {
	t.Helper()
	hostnames := make([]string, len(backends))
	for i, b := range backends {
		hostnames[i] = b.addrs.OTLPGRPC
	}
	addrs, err := testbin.NewCollectorAddrs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	lb := startCollector(t, collectorBin(t), lbConfig, addrs,
		"AGENTLEDGER_BACKENDS=["+strings.Join(hostnames, ", ")+"]")
	return lb, addrs
}

// TestLoadBalancingByInvocation runs the scale-out layout with the real
// distribution: collector-config/loadbalancing.yaml in front of two
// collectors running collector-config/local.yaml. Twenty invocations, each
// with a root trace holding a background job and a continuation in a
// second trace, are sent to the load-balancing tier shuffled across mixed
// batches, children before parents, continuations before roots, with
// duplicates. Every invocation must close exactly once, final with its exact
// totals, on the one backend that received all of its spans.
func TestLoadBalancingByInvocation(t *testing.T) {
	backends, lb, lbAddrs := startLBTier(t, 2)

	invs := make([]*lbInvocation, lbInvocations)
	byID := map[string]*lbInvocation{}
	owner := map[pcommon.SpanID]string{}
	for i := range invs {
		invs[i] = newLBInvocation(i)
		byID[invs[i].id] = invs[i]
		for _, s := range invs[i].spans() {
			owner[s.id] = invs[i].id
		}
	}

	// Phase 1: everything but the roots, with a duplicate of one span of
	// every other invocation, shuffled over batches of 7 spans. Nothing can
	// be final yet (no root), so the duplicates are all counted whatever
	// order the load balancer's per-backend queues deliver them in.
	rng := rand.New(rand.NewPCG(0x5ca1e, 0x0a7))
	var phase1 []lbSpan
	for i, iv := range invs {
		rest := []handSpan{iv.chat1, iv.tool, iv.job, iv.cont, iv.chat2}
		for _, s := range rest {
			phase1 = append(phase1, lbSpan{s, iv.id})
		}
		if i%2 == 0 {
			phase1 = append(phase1, lbSpan{rest[i%len(rest)], iv.id})
			iv.dupes++
		}
	}
	rng.Shuffle(len(phase1), func(i, j int) { phase1[i], phase1[j] = phase1[j], phase1[i] })
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	exportOTLP(t, lbAddrs.OTLPGRPC, chunk(t0, phase1, 7)...)

	ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	// Every phase-1 span has passed the invocation processor of some
	// backend before a root is sent.
	err := testbin.Poll(ctx, 100*time.Millisecond, func() (bool, string, error) {
		seen, err := lbPassedThrough(backends)
		if err != nil {
			return false, "", err
		}
		missing := 0
		for _, it := range phase1 {
			if _, ok := seen[it.span.id]; !ok {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d phase-1 spans not yet written by a backend", missing), nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Phase 2: the roots, four invocations per batch in shuffled order;
	// every third root twice in its batch (a batch is evaluated as a whole,
	// so that duplicate is counted too).
	order := rng.Perm(len(invs))
	var batches []ptrace.Traces
	for len(order) > 0 {
		k := min(4, len(order))
		var roots []lbSpan
		for _, i := range order[:k] {
			iv := invs[i]
			roots = append(roots, lbSpan{iv.root, iv.id})
			if i%3 == 0 {
				roots = append(roots, lbSpan{iv.root, iv.id})
				iv.dupes++
			}
		}
		rng.Shuffle(len(roots), func(i, j int) { roots[i], roots[j] = roots[j], roots[i] })
		batches = append(batches, mixedBatch(t0, roots))
		order = order[k:]
	}
	exportOTLP(t, lbAddrs.OTLPGRPC, batches...)

	var perBackend [][]testbin.Summary
	err = testbin.Poll(ctx, 100*time.Millisecond, func() (bool, string, error) {
		perBackend = perBackend[:0]
		closed := 0
		for _, b := range backends {
			sums, err := testbin.ReadSummaries(b.addrs.TracesFile)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return false, "", err
			}
			perBackend = append(perBackend, sums)
			closed += len(testbin.Closed(sums))
		}
		return closed >= len(invs), fmt.Sprintf("%d of %d invocations closed", closed, len(invs)), nil
	})
	if err != nil {
		// Go on: where the spans went says why.
		t.Error(err)
	}

	// Where every span went. A summary can be written before the span
	// that completed it: another batch's flush may send the shard's
	// summaries while this batch is still being passed on (the load
	// balancer sends to each backend from several consumers). So wait for
	// every span too, briefly.
	var seen map[pcommon.SpanID]map[int]bool
	err = testbin.Poll(ctx, 100*time.Millisecond, func() (bool, string, error) {
		var err error
		if seen, err = lbPassedThrough(backends); err != nil {
			return false, "", err
		}
		return len(seen) >= len(owner), fmt.Sprintf("%d of %d spans written", len(seen), len(owner)), nil
	})
	if err != nil {
		t.Error(err) // go on: the checks below name what is missing
	}
	if seen == nil {
		t.Fatal("no backend output could be read")
	}
	home := map[string]int{} // invocation -> backend holding its spans
	for _, iv := range invs {
		where := map[int]int{}
		for _, s := range iv.spans() {
			bs, ok := seen[s.id]
			if !ok {
				t.Errorf("%s: span %s %s reached no backend", iv.id, s.name, s.id)
				continue
			}
			for b := range bs {
				where[b]++
			}
		}
		if len(where) != 1 {
			t.Errorf("%s: spans split over backends %v (backend -> spans), want all on one", iv.id, where)
			continue
		}
		for b := range where {
			home[iv.id] = b
		}
	}
	for id, bs := range seen {
		if _, ok := owner[id]; !ok {
			t.Errorf("backends %v wrote span %s that was never sent", bs, id)
		}
	}

	checkLBSummaries(t, invs, byID, perBackend, home)

	split := make([]int, len(backends))
	for _, b := range home {
		split[b]++
	}
	t.Logf("invocations per backend: %v", split)
	for b, n := range split {
		if n == 0 {
			t.Errorf("backend %d (%s) received no invocation; split %v", b, backends[b].addrs.OTLPGRPC, split)
		}
	}

	if t.Failed() {
		return
	}
	// Stopping the tiers (the load balancer first, so its queues drain)
	// closes nothing more: no invocation was left open anywhere, and no
	// late duplicate caused a revision.
	if err := lb.Stop(testbin.StopTimeout); err != nil {
		t.Fatal(err)
	}
	for _, b := range backends {
		if err := b.proc.Stop(testbin.StopTimeout); err != nil {
			t.Fatal(err)
		}
	}
	for i, b := range backends {
		sums, err := testbin.ReadSummaries(b.addrs.TracesFile)
		if err != nil {
			t.Fatal(err)
		}
		if len(sums) != len(perBackend[i]) {
			for _, s := range sums[len(perBackend[i]):] {
				t.Errorf("backend %d wrote a summary after the invocations closed: %s %s revision %d reasons %v",
					i, s.InvocationID, s.Status, s.Revision, s.IncompleteReasons)
			}
		}
	}
}

// checkLBSummaries requires, across all backends, exactly one summary per
// invocation, final at revision 1 with its exact totals, written by the
// backend that holds the invocation's spans.
func checkLBSummaries(t *testing.T, invs []*lbInvocation, byID map[string]*lbInvocation, perBackend [][]testbin.Summary, home map[string]int) {
	t.Helper()
	got := map[string][]int{} // invocation -> backends that wrote a summary
	for b, sums := range perBackend {
		for _, s := range sums {
			iv, ok := byID[s.InvocationID]
			if !ok {
				t.Errorf("backend %d: summary for unknown invocation %q: %+v", b, s.InvocationID, s)
				continue
			}
			got[s.InvocationID] = append(got[s.InvocationID], b)
			want := iv.want()
			s.SpanID, s.Service = "", ""
			if !summaryEqual(s, want) {
				t.Errorf("backend %d: summary of %s\n got %+v\nwant %+v", b, iv.id, s, want)
			}
		}
	}
	for _, iv := range invs {
		bs := got[iv.id]
		switch {
		case len(bs) != 1:
			t.Errorf("%s: %d summaries (from backends %v), want exactly one", iv.id, len(bs), bs)
		case bs[0] != home[iv.id]:
			t.Errorf("%s: summary from backend %d, spans on backend %d", iv.id, bs[0], home[iv.id])
		}
	}
}

// lbPassedThrough returns, per span ID of a non-summary span, the indexes
// of the backends whose file exporter wrote it.
func lbPassedThrough(backends []lbBackend) (map[pcommon.SpanID]map[int]bool, error) {
	out := map[pcommon.SpanID]map[int]bool{}
	for b, be := range backends {
		tds, err := testbin.ReadTraces(be.addrs.TracesFile)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, td := range tds {
			for _, rs := range td.ResourceSpans().All() {
				for _, ss := range rs.ScopeSpans().All() {
					for _, sp := range ss.Spans().All() {
						if sp.Name() == contract.SpanNameSummary {
							continue
						}
						if out[sp.SpanID()] == nil {
							out[sp.SpanID()] = map[int]bool{}
						}
						out[sp.SpanID()][b] = true
					}
				}
			}
		}
	}
	return out, nil
}

// TestLoadBalancingReferenceAgent runs every scenario of the reference agent
// (examples/shellagent: background jobs in subprocesses that export their
// own spans, continuations, consumed and interrupted notifications) against
// the load-balancing tier. Each invocation must close exactly once, on the
// backend that holds all of its spans, agreeing with what the agent counted
// in process.
func TestLoadBalancingReferenceAgent(t *testing.T) {
	backends, _, lbAddrs := startLBTier(t, 2)
	agentBin := testbin.BuildT(t, "./examples/shellagent")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	results, err := testbin.RunAgent(ctx, agentBin, nil, "-all", "-otlp", lbAddrs.OTLPGRPC)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) == 0 {
		t.Fatal("shellagent -all reported no invocation")
	}

	wctx, wcancel := context.WithTimeout(context.Background(), waitBudget)
	defer wcancel()
	var perBackend [][]testbin.Summary
	err = testbin.Poll(wctx, 100*time.Millisecond, func() (bool, string, error) {
		perBackend = perBackend[:0]
		closed := map[string]bool{}
		for _, b := range backends {
			sums, err := testbin.ReadSummaries(b.addrs.TracesFile)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return false, "", err
			}
			perBackend = append(perBackend, sums)
			for id := range testbin.Closed(sums) {
				closed[id] = true
			}
		}
		missing := 0
		for _, r := range results {
			if !closed[r.InvocationID] {
				missing++
			}
		}
		return missing == 0, fmt.Sprintf("%d of %d invocations not closed", missing, len(results)), nil
	})
	if err != nil {
		t.Error(err)
	}

	spans, err := lbSpansByInvocation(backends)
	if err != nil {
		t.Fatal(err)
	}
	split := make([]int, len(backends))
	for _, r := range results {
		where := spans[r.InvocationID]
		if len(where) != 1 {
			t.Errorf("%s (%s): spans on backends %v (backend -> spans), want all on one", r.InvocationID, r.Scenario, where)
			continue
		}
		var home int
		for b := range where {
			home = b
		}
		split[home]++
		var closing []testbin.Summary
		for b, sums := range perBackend {
			for _, s := range sums {
				if s.InvocationID != r.InvocationID || s.Status == contract.StatusPending {
					continue
				}
				if b != home {
					t.Errorf("%s: summary from backend %d, spans on backend %d", r.InvocationID, b, home)
				}
				closing = append(closing, s)
			}
		}
		if len(closing) != 1 {
			t.Errorf("%s (%s): %d closing summaries, want exactly one: %+v", r.InvocationID, r.Scenario, len(closing), closing)
			continue
		}
		if m := testbin.Mismatches(r, closing[0]); len(m) > 0 || closing[0].Revision != 1 {
			t.Errorf("%s (%s): revision %d; summary disagrees with the agent: %s",
				r.InvocationID, r.Scenario, closing[0].Revision, strings.Join(m, "; "))
		}
	}
	t.Logf("%d invocations, per backend: %v", len(results), split)
}

// lbSpansByInvocation counts, per invocation.id and backend, the
// non-summary spans each backend's file exporter wrote.
func lbSpansByInvocation(backends []lbBackend) (map[string]map[int]int, error) {
	out := map[string]map[int]int{}
	for b, be := range backends {
		tds, err := testbin.ReadTraces(be.addrs.TracesFile)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, td := range tds {
			for _, rs := range td.ResourceSpans().All() {
				for _, ss := range rs.ScopeSpans().All() {
					for _, sp := range ss.Spans().All() {
						v, ok := sp.Attributes().Get(contract.AttrInvocationID)
						if !ok || sp.Name() == contract.SpanNameSummary {
							continue
						}
						id := v.AsString()
						if out[id] == nil {
							out[id] = map[int]int{}
						}
						out[id][b]++
					}
				}
			}
		}
	}
	return out, nil
}

// lbProbeRoutes learns where the load-balancing tier sends each routing
// key: for every candidate invocation ID one span in a resource that carries
// invocation.id (the exporter reads the resource first; the invocation
// processor reads span attributes only, so a probe is never indexed), and
// one span with no invocation.id at all, whose backend is returned as
// empty.
func lbProbeRoutes(t *testing.T, ctx context.Context, backends []lbBackend, lbOTLP string, candidates []string) (route map[string]int, empty int) {
	t.Helper()
	td := ptrace.NewTraces()
	probes := map[pcommon.SpanID]string{}
	for i, id := range append([]string{""}, candidates...) {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", "e2e-probe")
		if id != "" {
			rs.Resource().Attributes().PutStr(contract.AttrInvocationID, id)
		}
		sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		sp.SetTraceID(pcommon.TraceID{0xe2, 0xbb, byte(i), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
		sid := pcommon.SpanID{0xe2, 0xbb, byte(i), 1, 2, 3, 4, 5}
		sp.SetSpanID(sid)
		sp.SetName("probe")
		now := time.Now()
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(now))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(now))
		probes[sid] = id
	}
	exportOTLP(t, lbOTLP, td)
	route = map[string]int{}
	err := testbin.Poll(ctx, 100*time.Millisecond, func() (bool, string, error) {
		seen, err := lbPassedThrough(backends)
		if err != nil {
			return false, "", err
		}
		clear(route)
		for sid, id := range probes {
			bs := seen[sid]
			if len(bs) > 1 {
				return false, "", fmt.Errorf("probe for %q written by backends %v", id, bs)
			}
			for b := range bs {
				route[id] = b
			}
		}
		return len(route) == len(probes), fmt.Sprintf("%d of %d probes written", len(route), len(probes)), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	empty = route[""]
	delete(route, "")
	return route, empty
}

// TestLoadBalancingSplitInvocationNeverFinal shows the first-span caveat of
// docs/scale-out.md and what it costs. The invocation's root is the child
// of a caller's span that has no invocation.id, and that span comes first
// in its scope and trace: the exporter routes that piece of the root trace
// by the empty key, while the model call (another scope) and the
// continuation trace go by the invocation's own key. The
// invocation ID is chosen (by probing the tier) so that the two keys hash
// to different backends. Neither backend may call it final: the root side
// waits for its followup, the continuation side has no root, and both close
// incomplete, each with the usage it saw.
func TestLoadBalancingSplitInvocationNeverFinal(t *testing.T) {
	backends, lb, lbAddrs := startLBTier(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()

	candidates := make([]string, 32)
	for i := range candidates {
		candidates[i] = fmt.Sprintf("e2e-split-%02d", i)
	}
	route, emptyRoute := lbProbeRoutes(t, ctx, backends, lbAddrs.OTLPGRPC, candidates)
	id := ""
	for _, c := range candidates {
		if route[c] != emptyRoute {
			id = c
			break
		}
	}
	if id == "" {
		t.Fatalf("all %d candidate invocation IDs hash to backend %d, like the empty key", len(candidates), emptyRoute)
	}
	rootSide, contSide := emptyRoute, route[id]
	t.Logf("empty key -> backend %d, %s -> backend %d", rootSide, id, contSide)

	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	root, chat1, tool, job, cont, chat2 := backgroundInvocation(0x10)
	caller := pcommon.SpanID{0xe2, 0xca, 1, 2, 3, 4, 5, 6}
	root.parent = caller
	first := mixedBatch(t0, []lbSpan{{root, id}, {chat1, id}, {tool, id}, {job, id}})
	// The caller's span, without invocation.id, first in the root trace.
	spans := first.ResourceSpans().At(0).ScopeSpans().At(0).Spans()
	sp := ptrace.NewSpan()
	sp.SetTraceID(root.trace)
	sp.SetSpanID(caller)
	sp.SetName("POST /prompt")
	sp.SetStartTimestamp(pcommon.NewTimestampFromTime(t0.Add(-time.Millisecond)))
	sp.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(time.Second + time.Millisecond)))
	moved := ptrace.NewSpanSlice()
	sp.CopyTo(moved.AppendEmpty())
	spans.MoveAndAppendTo(moved)
	moved.MoveAndAppendTo(spans)
	exportOTLP(t, lbAddrs.OTLPGRPC, first, mixedBatch(t0, []lbSpan{{cont, id}, {chat2, id}}))

	// The exporter splits per resource, scope and trace: chat1, under the
	// model-call scope, is a piece of its own whose first span carries the
	// invocation's key.
	want := map[pcommon.SpanID]int{caller: rootSide, root.id: rootSide, tool.id: rootSide, job.id: rootSide,
		chat1.id: contSide, cont.id: contSide, chat2.id: contSide}
	err := testbin.Poll(ctx, 100*time.Millisecond, func() (bool, string, error) {
		seen, err := lbPassedThrough(backends)
		if err != nil {
			return false, "", err
		}
		for sid, b := range want {
			if !seen[sid][b] {
				return false, fmt.Sprintf("span %s not yet on backend %d (seen on %v)", sid, b, seen[sid]), nil
			}
		}
		sums, err := testbin.ReadSummaries(backends[rootSide].addrs.TracesFile)
		if err != nil {
			return false, "", err
		}
		for _, s := range sums {
			if s.InvocationID == id && s.Status == contract.StatusPending {
				return true, "", nil
			}
		}
		return false, "no pending summary yet on the root's backend", nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Stopping the backends keeps what they hold open in storage; they
	// close it when restarted past its open_timeout.
	if err := lb.Stop(testbin.StopTimeout); err != nil {
		t.Fatal(err)
	}
	for _, b := range backends {
		if err := b.proc.Stop(testbin.StopTimeout); err != nil {
			t.Fatal(err)
		}
	}
	all := restartToCloseOpen(t, backends)
	type side struct {
		backend       int
		reason        string
		input, output int64
	}
	for _, s := range []side{{rootSide, contract.ReasonOpenFollowup, 0, 0}, {contSide, contract.ReasonRootMissing, 400, 70}} {
		sums := all[s.backend]
		var closing []testbin.Summary
		for _, x := range sums {
			if x.InvocationID != id {
				continue
			}
			if x.Status == contract.StatusFinal {
				t.Errorf("backend %d called the split invocation final: %+v", s.backend, x)
			}
			if x.Status == contract.StatusIncomplete {
				closing = append(closing, x)
			}
		}
		if len(closing) != 1 {
			t.Errorf("backend %d: %d incomplete summaries for %s, want 1: %+v", s.backend, len(closing), id, closing)
			continue
		}
		c := closing[0]
		t.Logf("backend %d: %s incomplete, reasons %v, tokens %d/%d", s.backend, id, c.IncompleteReasons, c.InputTokens, c.OutputTokens)
		if !hasReason(c.IncompleteReasons, s.reason) || !hasReason(c.IncompleteReasons, contract.ReasonOpenTimeout) ||
			c.InputTokens != s.input || c.OutputTokens != s.output {
			t.Errorf("backend %d: %s closed with reasons %v, tokens %d/%d; want %s and %s, tokens %d/%d",
				s.backend, id, c.IncompleteReasons, c.InputTokens, c.OutputTokens, s.reason, contract.ReasonOpenTimeout, s.input, s.output)
		}
	}
}

// TestLoadBalancingReshardNeverWrongFinal adds a backend while invocations
// are open. The root traces of 20 invocations go through a tier that knows
// one backend; then a tier that knows two takes over and the continuations
// follow. Invocations the ring keeps on the first backend close final with
// exact totals; those it moves (found by probing the new tier) are split:
// neither backend may call them final, and both close them incomplete with
// the usage each saw (docs/scale-out.md, "Resharding").
func TestLoadBalancingReshardNeverWrongFinal(t *testing.T) {
	backends := startLBBackends(t, 2)
	lb1, addrs1 := startLB(t, backends[0])
	ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()

	invs := make([]*lbInvocation, lbInvocations)
	var before, after []lbSpan
	ids := make([]string, len(invs))
	for i := range invs {
		iv := newLBInvocation(i)
		invs[i], ids[i] = iv, iv.id
		for _, s := range []handSpan{iv.root, iv.chat1, iv.tool, iv.job} {
			before = append(before, lbSpan{s, iv.id})
		}
		after = append(after, lbSpan{iv.cont, iv.id}, lbSpan{iv.chat2, iv.id})
	}
	rng := rand.New(rand.NewPCG(0x2e5, 0x4a2d))
	rng.Shuffle(len(before), func(i, j int) { before[i], before[j] = before[j], before[i] })
	rng.Shuffle(len(after), func(i, j int) { after[i], after[j] = after[j], after[i] })
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)

	exportOTLP(t, addrs1.OTLPGRPC, chunk(t0, before, 7)...)
	pendingOn0 := func() (bool, string, error) {
		sums, err := testbin.ReadSummaries(backends[0].addrs.TracesFile)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, "", err
		}
		pending := map[string]bool{}
		for _, s := range sums {
			if s.Status == contract.StatusPending {
				pending[s.InvocationID] = true
			}
		}
		return len(pending) == len(invs), fmt.Sprintf("%d of %d pending on backend 0", len(pending), len(invs)), nil
	}
	if err := testbin.Poll(ctx, 100*time.Millisecond, pendingOn0); err != nil {
		t.Fatal(err)
	}
	if err := lb1.Stop(testbin.StopTimeout); err != nil {
		t.Fatal(err)
	}

	lb2, addrs2 := startLB(t, backends...)
	route, _ := lbProbeRoutes(t, ctx, backends, addrs2.OTLPGRPC, ids)
	moved := 0
	for _, id := range ids {
		if route[id] != 0 {
			moved++
		}
	}
	t.Logf("adding backend 1 moved %d of %d open invocations", moved, len(ids))
	if moved == 0 || moved == len(ids) {
		t.Fatalf("the new ring moved %d of %d invocations; the test needs some of each", moved, len(ids))
	}
	exportOTLP(t, addrs2.OTLPGRPC, chunk(t0, after, 7)...)

	err := testbin.Poll(ctx, 100*time.Millisecond, func() (bool, string, error) {
		seen, err := lbPassedThrough(backends)
		if err != nil {
			return false, "", err
		}
		sums, err := testbin.ReadSummaries(backends[0].addrs.TracesFile)
		if err != nil {
			return false, "", err
		}
		closed := testbin.Closed(sums)
		for _, iv := range invs {
			b := route[iv.id]
			if !seen[iv.cont.id][b] || !seen[iv.chat2.id][b] {
				return false, fmt.Sprintf("%s: continuation not yet on backend %d", iv.id, b), nil
			}
			if _, ok := closed[iv.id]; b == 0 && !ok {
				return false, fmt.Sprintf("%s: not yet closed on backend 0", iv.id), nil
			}
		}
		return true, "", nil
	})
	if err != nil {
		t.Fatal(err)
	}

	if err := lb2.Stop(testbin.StopTimeout); err != nil {
		t.Fatal(err)
	}
	for _, b := range backends {
		if err := b.proc.Stop(testbin.StopTimeout); err != nil {
			t.Fatal(err)
		}
	}
	all := restartToCloseOpen(t, backends)
	closing := make([]map[string][]testbin.Summary, len(backends))
	for b := range backends {
		sums := all[b]
		closing[b] = map[string][]testbin.Summary{}
		for _, s := range sums {
			if s.Status != contract.StatusPending {
				s.SpanID, s.Service = "", ""
				closing[b][s.InvocationID] = append(closing[b][s.InvocationID], s)
			}
		}
	}
	for i, iv := range invs {
		on0, on1 := closing[0][iv.id], closing[1][iv.id]
		if route[iv.id] == 0 {
			if len(on0) != 1 || len(on1) != 0 || !summaryEqual(on0[0], iv.want()) {
				t.Errorf("%s stayed on backend 0: closing summaries %+v on 0 and %+v on 1, want only %+v", iv.id, on0, on1, iv.want())
			}
			continue
		}
		checkSplitHalf(t, 0, iv.id, on0, contract.ReasonOpenFollowup, 100+int64(i), 20)
		checkSplitHalf(t, 1, iv.id, on1, contract.ReasonRootMissing, 300, 50+int64(i))
	}
}

// checkSplitHalf requires one closing summary of a split invocation on a
// backend: incomplete with reason and open_timeout (closed when the backend
// restarted on its storage past the timeout), carrying the usage that
// backend saw.
func checkSplitHalf(t *testing.T, backend int, id string, sums []testbin.Summary, reason string, input, output int64) {
	t.Helper()
	if len(sums) != 1 {
		t.Errorf("split %s on backend %d: %d closing summaries %+v, want one incomplete", id, backend, len(sums), sums)
		return
	}
	s := sums[0]
	if s.Status != contract.StatusIncomplete || s.Revision != 1 || !hasReason(s.IncompleteReasons, reason) ||
		!hasReason(s.IncompleteReasons, contract.ReasonOpenTimeout) || s.InputTokens != input || s.OutputTokens != output {
		t.Errorf("split %s on backend %d: %s revision %d reasons %v tokens %d/%d; want incomplete revision 1 with %s and %s, tokens %d/%d",
			id, backend, s.Status, s.Revision, s.IncompleteReasons, s.InputTokens, s.OutputTokens,
			reason, contract.ReasonOpenTimeout, input, output)
	}
}

// restartToCloseOpen restarts each stopped backend on its own storage
// directory with an open_timeout that has long passed, waits until it holds
// no open invocation (each closed incomplete with open_timeout at its first
// tick), stops it, and returns per backend the summaries of both runs. A
// backend with storage closes nothing when it stops, so this is how a test
// sees what a backend kept open.
func restartToCloseOpen(t *testing.T, backends []lbBackend) [][]testbin.Summary {
	t.Helper()
	bin := collectorBin(t)
	out := make([][]testbin.Summary, len(backends))
	for i, b := range backends {
		before, err := testbin.ReadSummaries(b.addrs.TracesFile)
		if err != nil {
			t.Fatal(err)
		}
		addrs := b.addrs
		addrs.TracesFile = b.addrs.TracesFile + ".restarted"
		p := startCollector(t, bin, backendConfig, addrs, "AGENTLEDGER_DEBUG_VERBOSITY=basic",
			"AGENTLEDGER_OPEN_TIMEOUT=2ms", "AGENTLEDGER_REMOTE_SETTLE=1ms", "AGENTLEDGER_PENDING_DELAY=0s")
		ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
		err = testbin.Poll(ctx, 50*time.Millisecond, func() (bool, string, error) {
			open, err := openInvocations(ctx, addrs.Telemetry)
			if err != nil {
				return false, err.Error(), nil
			}
			return open == 0, fmt.Sprintf("%d invocations open", open), nil
		})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Stop(testbin.StopTimeout); err != nil {
			t.Fatal(err)
		}
		after, err := testbin.ReadSummaries(addrs.TracesFile)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = append(before, after...)
	}
	return out
}

// openInvocations reads the processor's open invocations gauge from a
// collector's internal telemetry endpoint (absent counts as 0).
func openInvocations(ctx context.Context, telemetry string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+telemetry+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "otelcol_processor_invocation_open_invocations") {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("metric line %q: %w", line, err)
		}
		total += int(v)
	}
	return total, nil
}
