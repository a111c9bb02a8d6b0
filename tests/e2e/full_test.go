package e2e

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/testbin"
)

// timeoutAgent is the agent name of the hand-made invocation that never
// closes on its own: open_timeout makes it incomplete, so that the
// incomplete-invocation metrics and panels have data.
const (
	timeoutAgent   = "e2e-timeout"
	timeoutService = "e2e-agent"
	// openTimeout must outlast every shellagent scenario this test runs.
	openTimeout = 40 * time.Second
)

// liveCollector names the live stack's collector on its summaries.
const liveCollector = "e2e-live"

// liveStack is the real collector (jaeger.yaml), Jaeger and Prometheus.
type liveStack struct {
	collector testbin.CollectorAddrs
	jaeger    testbin.JaegerAddrs
	prom      string
}

func startLiveStack(t *testing.T) liveStack {
	t.Helper()
	colBin, jBin, pBin := collectorBin(t), jaegerBin(t), prometheusBin(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()

	var st liveStack
	var err error
	if st.jaeger, err = testbin.NewJaegerAddrs(); err != nil {
		t.Fatal(err)
	}
	jp, err := testbin.StartJaeger(ctx, jBin, repoPath(t, "collector-config", "jaeger-v2.yaml"), st.jaeger, filepath.Join(dir, "jaeger.log"))
	if jp != nil {
		t.Cleanup(func() { stopAndReport(t, jp) })
	}
	if err != nil {
		t.Fatal(err)
	}

	if st.collector, err = testbin.NewCollectorAddrs(dir); err != nil {
		t.Fatal(err)
	}
	st.collector.JaegerOTLP = st.jaeger.OTLPGRPC
	startCollector(t, colBin, "jaeger.yaml", st.collector, "AGENTLEDGER_OPEN_TIMEOUT="+openTimeout.String(),
		"AGENTLEDGER_COLLECTOR_NAME="+liveCollector)

	if st.prom, err = testbin.FreeAddr(); err != nil {
		t.Fatal(err)
	}
	promDir := filepath.Join(dir, "prometheus")
	if err := os.MkdirAll(promDir, 0o755); err != nil {
		t.Fatal(err)
	}
	pp, err := testbin.StartPrometheus(ctx, pBin, repoPath(t, "collector-config", "prometheus.yml"), st.collector,
		st.prom, promDir, filepath.Join(dir, "prometheus.log"))
	if pp != nil {
		t.Cleanup(func() { stopAndReport(t, pp) })
	}
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestFullPath runs the reference agent's foreground, background and
// warm-second scenarios through the real collector into real Jaeger and
// Prometheus, and checks each invocation's summary in Jaeger, the background
// scenario's two traces and their link, the token totals in Prometheus, and
// that every dashboard panel query returns data.
func TestFullPath(t *testing.T) {
	st := startLiveStack(t)
	started := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 4*waitBudget)
	defer cancel()

	// An invocation whose background job never reports back.
	t0 := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	troot, tchat, ttool, tjob, _, _ := backgroundInvocation(0x70)
	troot.attrs[contract.AttrAgentName] = timeoutAgent
	const timeoutID = "e2e-timeout-1"
	exportOTLP(t, st.collector.OTLPGRPC, batch(t0, timeoutID, troot, tchat, ttool, tjob))

	// A hand-made background invocation with known totals, under the
	// timeout invocation's agent and service so that it stays out of the
	// shellagent totals below.
	root, chat1, tool, job, cont, chat2 := backgroundInvocation(0x60)
	root.attrs[contract.AttrAgentName] = timeoutAgent
	handMade := testbin.AgentInvocation{
		InvocationID: "e2e-hand-made", Scenario: "hand-made", SessionID: "session-1", Status: contract.StatusFinal,
		InputTokens: 400, OutputTokens: 70, CacheReadInputTokens: 240, ReasoningOutputTokens: 5,
		AfterResultInputTokens: 300, AfterResultOutputTokens: 50,
		ModelCalls: 2, BackgroundJobs: 1, Continuations: 1, TimeToFinalMS: 3000,
	}
	exportOTLP(t, st.collector.OTLPGRPC, batch(t0, handMade.InvocationID, cont, chat2, chat1, job, tool, root))
	hm := waitJaegerSummaries(t, ctx, st.jaeger.QueryHTTP, t0, []testbin.AgentInvocation{handMade})[handMade.InvocationID]
	if m := testbin.Mismatches(handMade, hm); len(m) > 0 {
		t.Errorf("hand-made invocation: summary in Jaeger disagrees: %s", strings.Join(m, "; "))
	}
	checkBackgroundTraces(t, ctx, st.jaeger.QueryHTTP, handMade, hm)

	// A model call that arrives after the summary: Jaeger gets a corrected
	// summary (revision 2); the invocation metrics keep counting revision 1
	// only, while the model-call metric counts the late span.
	late := handSpan{trace: cont.trace, id: spanID(0x6f), parent: cont.id, name: "chat scripted-1",
		start: 3300 * time.Millisecond, end: 3400 * time.Millisecond, attrs: map[string]any{
			contract.AttrOperationName: contract.OpChat, contract.AttrRequestModel: "scripted-1", contract.AttrChildren: 0,
			contract.AttrUsageInputTokens: 7, contract.AttrUsageOutputTokens: 1,
		}}
	exportOTLP(t, st.collector.OTLPGRPC, batch(t0, handMade.InvocationID, late))
	revised := handMade
	revised.InputTokens, revised.OutputTokens, revised.ModelCalls = 407, 71, 3
	revised.AfterResultInputTokens, revised.AfterResultOutputTokens = 307, 51
	err := testbin.Poll(ctx, 250*time.Millisecond, func() (bool, string, error) {
		sums, err := testbin.JaegerSummaries(ctx, st.jaeger.QueryHTTP, t0.Add(-time.Minute), time.Now().Add(time.Minute))
		if err != nil {
			return false, "", err
		}
		hm = testbin.Closed(sums)[handMade.InvocationID]
		return hm.Revision >= 2, fmt.Sprintf("latest summary of %s has revision %d", handMade.InvocationID, hm.Revision), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if m := testbin.Mismatches(revised, hm); len(m) > 0 || hm.Revision != 2 || !hasReason(hm.Anomalies, contract.AnomalyLateSpan) {
		t.Errorf("corrected summary: revision %d, anomalies %v, mismatches %v", hm.Revision, hm.Anomalies, m)
	}

	agentBin := testbin.BuildT(t, "./examples/shellagent")
	runScenario := func(name string) []testbin.AgentInvocation {
		t.Helper()
		res, err := testbin.RunAgent(ctx, agentBin, nil, "-scenario", name, "-otlp", st.collector.OTLPGRPC)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) == 0 {
			t.Fatalf("shellagent -scenario %s reported no invocation", name)
		}
		return res
	}
	var results []testbin.AgentInvocation
	results = append(results, runScenario("foreground")...)
	// Let Prometheus scrape the first counters before the next scenarios
	// raise them, so that rate() and increase() over the run see growth.
	waitProm(t, ctx, st.prom, `sum(agentledger_invocations_total)`, func(v float64) bool { return v >= 1 })
	// The timeout invocation is still open: the processor's gauge shows it.
	waitProm(t, ctx, st.prom, `sum(otelcol_processor_invocation_open_invocations)`, func(v float64) bool { return v >= 1 })
	background := runScenario("background")
	results = append(results, background...)
	results = append(results, runScenario("warm-second")...)

	closed := waitJaegerSummaries(t, ctx, st.jaeger.QueryHTTP, started, results)
	for _, r := range results {
		if m := testbin.Mismatches(r, closed[r.InvocationID]); len(m) > 0 {
			t.Errorf("%s (%s): summary in Jaeger disagrees with the agent: %s", r.InvocationID, r.Scenario, strings.Join(m, "; "))
		}
	}
	for _, r := range background {
		checkBackgroundTraces(t, ctx, st.jaeger.QueryHTTP, r, closed[r.InvocationID])
	}

	// The hand-made invocation closes as incomplete on open_timeout.
	var timedOut testbin.Summary
	err = testbin.Poll(ctx, 250*time.Millisecond, func() (bool, string, error) {
		sums, err := testbin.JaegerSummaries(ctx, st.jaeger.QueryHTTP, t0.Add(-time.Minute), time.Now().Add(time.Minute))
		if err != nil {
			return false, "", err
		}
		s, ok := testbin.Closed(sums)[timeoutID]
		timedOut = s
		return ok, "no closing summary for " + timeoutID, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if timedOut.Status != contract.StatusIncomplete || !hasReason(timedOut.IncompleteReasons, contract.ReasonOpenTimeout) {
		t.Errorf("%s: status %s reasons %v, want incomplete with %s", timeoutID, timedOut.Status, timedOut.IncompleteReasons, contract.ReasonOpenTimeout)
	}

	checkPrometheusTotals(t, st.prom, results)

	t.Run("dashboards", func(t *testing.T) {
		agent := closed[results[0].InvocationID]
		checkDashboardQueries(t, st, agent.AgentName, agent.Service)
	})
}

// waitProm polls an instant query until its single value satisfies ok.
func waitProm(t *testing.T, ctx context.Context, prom, query string, ok func(float64) bool) float64 {
	t.Helper()
	var last float64
	err := testbin.Poll(ctx, 250*time.Millisecond, func() (bool, string, error) {
		s, err := testbin.PromQuery(ctx, prom, query)
		if err != nil {
			return false, "", err
		}
		if len(s) != 1 {
			return false, fmt.Sprintf("%s returned %d series", query, len(s)), nil
		}
		last = s[0].Value
		return ok(last), fmt.Sprintf("%s = %v", query, last), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return last
}

// waitJaegerSummaries waits until Jaeger holds a closing summary, with the
// status the agent expects, for every invocation.
func waitJaegerSummaries(t *testing.T, ctx context.Context, query string, since time.Time, results []testbin.AgentInvocation) map[string]testbin.Summary {
	t.Helper()
	var closed map[string]testbin.Summary
	err := testbin.Poll(ctx, 250*time.Millisecond, func() (bool, string, error) {
		sums, err := testbin.JaegerSummaries(ctx, query, since.Add(-time.Minute), time.Now().Add(time.Minute))
		if err != nil {
			return false, "", err
		}
		closed = testbin.Closed(sums)
		var missing []string
		for _, r := range results {
			if s, ok := closed[r.InvocationID]; !ok || s.Status != r.Status {
				missing = append(missing, r.InvocationID+" ("+r.Scenario+")")
			}
		}
		return len(missing) == 0, "waiting for summaries of " + strings.Join(missing, ", "), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return closed
}

// spansByID indexes every span of td.
func spansByID(td ptrace.Traces) map[pcommon.SpanID]ptrace.Span {
	out := map[pcommon.SpanID]ptrace.Span{}
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				out[sp.SpanID()] = sp
			}
		}
	}
	return out
}

func attrStr(sp ptrace.Span, key string) string {
	if v, ok := sp.Attributes().Get(key); ok {
		return v.AsString()
	}
	return ""
}

// checkBackgroundTraces checks, through Jaeger's API, both traces of a
// background invocation: the root trace with its background span, and each
// continuation trace whose root links to that span with invocation.link =
// followup (v3 API) and shows the link as FOLLOWS_FROM (v1 API).
func checkBackgroundTraces(t *testing.T, ctx context.Context, query string, r testbin.AgentInvocation, s testbin.Summary) {
	t.Helper()
	if s.Traces < 2 || s.Continuations < 1 || int64(len(s.Links)) != s.Continuations {
		t.Errorf("%s: summary has %d traces, %d continuations, %d links; want >= 2 traces and a link per continuation",
			r.InvocationID, s.Traces, s.Continuations, len(s.Links))
	}
	rootTrace, err := testbin.JaegerTrace(ctx, query, s.TraceID)
	if err != nil {
		t.Fatalf("%s: root trace %s: %v", r.InvocationID, s.TraceID, err)
	}
	jobs := map[pcommon.SpanID]bool{}
	haveRoot := false
	for id, sp := range spansByID(rootTrace) {
		if attrStr(sp, contract.AttrInvocationID) != r.InvocationID {
			continue
		}
		switch attrStr(sp, contract.AttrRole) {
		case contract.RoleRoot:
			haveRoot = true
		case contract.RoleBackground:
			jobs[id] = true
		}
	}
	if !haveRoot || len(jobs) == 0 {
		t.Fatalf("%s: root trace %s has root span %v and %d background spans", r.InvocationID, s.TraceID, haveRoot, len(jobs))
	}
	for _, link := range s.Links {
		contTraceID, contSpanID, _ := strings.Cut(link, "/")
		td, err := testbin.JaegerTrace(ctx, query, contTraceID)
		if err != nil {
			t.Errorf("%s: continuation trace %s: %v", r.InvocationID, contTraceID, err)
			continue
		}
		var cont ptrace.Span
		found := false
		for id, sp := range spansByID(td) {
			if id.String() == contSpanID {
				cont, found = sp, true
			}
		}
		if !found {
			t.Errorf("%s: continuation span %s not in trace %s", r.InvocationID, contSpanID, contTraceID)
			continue
		}
		if role := attrStr(cont, contract.AttrRole); role != contract.RoleContinuation || attrStr(cont, contract.AttrInvocationID) != r.InvocationID {
			t.Errorf("%s: linked span %s has role %q and invocation %q", r.InvocationID, contSpanID, role, attrStr(cont, contract.AttrInvocationID))
		}
		followups := 0
		var jobSpan pcommon.SpanID
		for _, l := range cont.Links().All() {
			if l.TraceID().String() != s.TraceID || !jobs[l.SpanID()] {
				continue
			}
			if v, ok := l.Attributes().Get(contract.AttrLink); ok && v.AsString() == contract.LinkFollowup {
				followups++
				jobSpan = l.SpanID()
			}
		}
		if followups == 0 {
			t.Errorf("%s: continuation %s has no %s=%s link to a background span of trace %s",
				r.InvocationID, contSpanID, contract.AttrLink, contract.LinkFollowup, s.TraceID)
			continue
		}
		checkFollowsFromV1(t, ctx, query, contTraceID, contSpanID, s.TraceID, jobSpan.String())
	}
}

// checkFollowsFromV1 checks that Jaeger's v1 API shows the continuation's
// link as a FOLLOWS_FROM reference to the job span.
func checkFollowsFromV1(t *testing.T, ctx context.Context, query, traceID, spanID, refTrace, refSpan string) {
	t.Helper()
	var out struct {
		Data []struct {
			Spans []struct {
				SpanID     string `json:"spanID"`
				References []struct {
					RefType string `json:"refType"`
					TraceID string `json:"traceID"`
					SpanID  string `json:"spanID"`
				} `json:"references"`
			} `json:"spans"`
		} `json:"data"`
	}
	if err := getJSON(ctx, "http://"+query+"/api/traces/"+traceID, &out); err != nil {
		t.Errorf("v1 trace %s: %v", traceID, err)
		return
	}
	trim := func(s string) string { return strings.TrimLeft(s, "0") }
	for _, tr := range out.Data {
		for _, sp := range tr.Spans {
			if trim(sp.SpanID) != trim(spanID) {
				continue
			}
			for _, ref := range sp.References {
				if ref.RefType == "FOLLOWS_FROM" && trim(ref.TraceID) == trim(refTrace) && trim(ref.SpanID) == trim(refSpan) {
					return
				}
			}
			t.Errorf("v1 span %s references %+v, want FOLLOWS_FROM %s/%s", spanID, sp.References, refTrace, refSpan)
			return
		}
	}
	t.Errorf("v1 trace %s has no span %s", traceID, spanID)
}

// checkPrometheusTotals waits for the Prometheus token totals to equal the
// agents' own sums; the hand-made timeout invocation (another service and
// agent) is left out of every query.
func checkPrometheusTotals(t *testing.T, prom string, results []testbin.AgentInvocation) {
	t.Helper()
	var in, out, cacheRead, reasoning, afterIn, afterOut, final float64
	for _, r := range results {
		in += float64(r.InputTokens)
		out += float64(r.OutputTokens)
		cacheRead += float64(r.CacheReadInputTokens)
		reasoning += float64(r.ReasoningOutputTokens)
		afterIn += float64(r.AfterResultInputTokens)
		afterOut += float64(r.AfterResultOutputTokens)
		if r.Status == contract.StatusFinal {
			final++
		}
	}
	agentSel := fmt.Sprintf(`gen_ai_agent_name!=%q`, timeoutAgent)
	modelSel := fmt.Sprintf(`job!=%q`, timeoutService)
	checks := []struct {
		query string
		want  float64
	}{
		{`sum(agentledger_invocation_tokens_total{gen_ai_token_type="input",` + agentSel + `})`, in},
		{`sum(agentledger_invocation_tokens_total{gen_ai_token_type="output",` + agentSel + `})`, out},
		{`sum(agentledger_invocation_tokens_total{gen_ai_token_type="cache_read",` + agentSel + `}) or vector(0)`, cacheRead},
		{`sum(agentledger_invocation_tokens_total{gen_ai_token_type="reasoning",` + agentSel + `}) or vector(0)`, reasoning},
		{`sum(agentledger_invocation_after_result_tokens_total{gen_ai_token_type="input",` + agentSel + `})`, afterIn},
		{`sum(agentledger_invocation_after_result_tokens_total{gen_ai_token_type="output",` + agentSel + `})`, afterOut},
		{`sum(agentledger_model_tokens_total{gen_ai_token_type="input",` + modelSel + `})`, in},
		{`sum(agentledger_model_tokens_total{gen_ai_token_type="output",` + modelSel + `})`, out},
		{`sum(agentledger_invocations_total{invocation_status="final",` + agentSel + `})`, final},
		{`sum(agentledger_invocation_time_to_final_milliseconds_count{` + agentSel + `})`, final},
		{fmt.Sprintf(`sum(agentledger_invocation_incomplete_total{gen_ai_agent_name=%q})`, timeoutAgent), 1},
		// Revision 1 of the hand-made invocation (400) and the timeout
		// invocation (100); the late span's 7 only in the model-call metric.
		{fmt.Sprintf(`sum(agentledger_invocation_tokens_total{gen_ai_token_type="input",gen_ai_agent_name=%q})`, timeoutAgent), 400 + 100},
		{fmt.Sprintf(`sum(agentledger_model_tokens_total{gen_ai_token_type="input",job=%q})`, timeoutService), 400 + 100 + 7},
		{`sum(otelcol_processor_invocation_open_invocations)`, 0},
	}
	for _, c := range checks {
		// Each check gets its own bound so that one wrong total does not
		// starve the others of time.
		cctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		var got float64
		err := testbin.Poll(cctx, 250*time.Millisecond, func() (bool, string, error) {
			s, err := testbin.PromQuery(cctx, prom, c.query)
			if err != nil {
				return false, "", err
			}
			if len(s) != 1 {
				return false, fmt.Sprintf("%d series", len(s)), nil
			}
			got = s[0].Value
			return got == c.want, fmt.Sprintf("value %v", got), nil
		})
		cancel()
		if err != nil {
			t.Errorf("%s: want %v: %v", c.query, c.want, err)
		}
	}
}

// getJSON is testbin's JSON GET for the v1 API the helpers do not wrap.
func getJSON(ctx context.Context, rawURL string, v any) error {
	return testbin.GetJSON(ctx, rawURL, v)
}

// jaegerV1Search runs a trace search on Jaeger's v1 API (what Grafana's
// Jaeger data source calls) and returns how many traces it found.
func jaegerV1Search(ctx context.Context, query string, params map[string]string) (int, error) {
	q := url.Values{"lookback": {"1h"}}
	for k, v := range params {
		q.Set(k, v)
	}
	var out struct {
		Data   []map[string]any `json:"data"`
		Errors []map[string]any `json:"errors"`
	}
	if err := getJSON(ctx, "http://"+query+"/api/traces?"+q.Encode(), &out); err != nil {
		if errors.Is(err, testbin.ErrNotFound) {
			return 0, nil
		}
		return 0, err
	}
	if len(out.Errors) > 0 {
		return 0, fmt.Errorf("jaeger search %v: %v", params, out.Errors)
	}
	return len(out.Data), nil
}

func finite(vals []float64) bool {
	for _, v := range vals {
		if !math.IsNaN(v) && !math.IsInf(v, 0) {
			return true
		}
	}
	return false
}
