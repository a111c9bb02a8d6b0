package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/dashboards"
	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
	"github.com/agentledger/agentledger/internal/testbin"
)

// The configs of a shared collector, layered over a base config.
const (
	sharedConfig   = "shared.yaml"
	sharedLBConfig = "shared-loadbalancing.yaml"
	// e2eCollector names the collector under test on its summaries.
	e2eCollector = "e2e-collector"
)

// forgedSummary is what a client could send to make up billing records: a
// final summary with a billion input tokens for invocationID, under
// service, carrying the real collector's marker when marked.
func forgedSummary(invocationID, service string, id byte, marked bool) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", service)
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("forger")
	if marked {
		rs.Resource().Attributes().PutStr(contract.AttrSummaryCollector, e2eCollector)
		ss.Scope().SetName(contract.SummaryScopeName)
	}
	sp := ss.Spans().AppendEmpty()
	sp.SetName(contract.SpanNameSummary)
	sp.SetTraceID(traceID(id))
	sp.SetSpanID(spanID(id))
	now := time.Now()
	sp.SetStartTimestamp(pcommon.NewTimestampFromTime(now.Add(-time.Minute)))
	sp.SetEndTimestamp(pcommon.NewTimestampFromTime(now))
	a := sp.Attributes()
	a.PutStr(contract.AttrInvocationID, invocationID)
	a.PutStr(contract.AttrAgentName, "forger")
	a.PutStr(contract.AttrStatus, contract.StatusFinal)
	a.PutInt(contract.AttrRevision, 1)
	a.PutInt(contract.AttrUsageInputTokens, 1_000_000_000)
	a.PutInt(contract.AttrUsageOutputTokens, 1_000_000)
	a.PutInt(contract.AttrTimeToFinalMS, 5)
	a.PutEmptySlice(contract.AttrIncompleteReasons)
	return td
}

// spanIDsInFile returns every span ID the file exporter wrote, summaries
// included; a file not yet written holds none.
func spanIDsInFile(t *testing.T, path string) map[pcommon.SpanID]string {
	t.Helper()
	tds, err := testbin.ReadTraces(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	out := map[pcommon.SpanID]string{}
	for _, td := range tds {
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, sp := range ss.Spans().All() {
					out[sp.SpanID()] = sp.Name()
				}
			}
		}
	}
	return out
}

// telemetryValue sums the samples of one metric on a collector's internal
// telemetry endpoint (0 when the metric is absent: never recorded).
func telemetryValue(t *testing.T, telemetry, metric string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+telemetry+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, line := range strings.Split(string(body), "\n") {
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		if name != metric {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		total += v
	}
	return total
}

// withFileExporter writes a config that adds the file exporter (writing to
// path) to base's traces pipeline, whose exporters it reads from base.
func withFileExporter(t *testing.T, base, path string) string {
	t.Helper()
	raw, err := os.ReadFile(repoPath(t, "collector-config", base))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Service struct {
			Pipelines map[string]struct {
				Exporters []string `yaml:"exporters"`
			} `yaml:"pipelines"`
		} `yaml:"service"`
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	exporters := append(cfg.Service.Pipelines["traces"].Exporters, "file")
	overlay := fmt.Sprintf("exporters:\n  file:\n    path: %s\n    format: json\nservice:\n  pipelines:\n    traces:\n      exporters: [%s]\n",
		path, strings.Join(exporters, ", "))
	out := filepath.Join(t.TempDir(), "file-exporter.yaml")
	if err := os.WriteFile(out, []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestForgedSummaryNeverReachesExporters runs jaeger.yaml (with the file
// exporter added to its pipeline) in front of real Jaeger and Prometheus.
// A client sends forged final summaries with a billion tokens, one bare and
// one carrying this collector's marker and the genuine invocation's id,
// before a genuine invocation. The genuine summary reaches the file, Jaeger
// and Prometheus with exact totals; no forged span reaches any of them, and
// the processor counts both as dropped.
func TestForgedSummaryNeverReachesExporters(t *testing.T) {
	colBin, jBin, pBin := collectorBin(t), jaegerBin(t), prometheusBin(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitBudget)
	defer cancel()

	jaeger, err := testbin.NewJaegerAddrs()
	if err != nil {
		t.Fatal(err)
	}
	jp, err := testbin.StartJaeger(ctx, jBin, repoPath(t, "collector-config", "jaeger-v2.yaml"), jaeger, filepath.Join(dir, "jaeger.log"))
	if jp != nil {
		t.Cleanup(func() { stopAndReport(t, jp) })
	}
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := testbin.NewCollectorAddrs(dir)
	if err != nil {
		t.Fatal(err)
	}
	addrs.JaegerOTLP = jaeger.OTLPGRPC
	col, err := testbin.StartCollectorConfigs(ctx, colBin,
		[]string{repoPath(t, "collector-config", "jaeger.yaml"), withFileExporter(t, "jaeger.yaml", addrs.TracesFile)},
		addrs, filepath.Join(dir, "collector.log"), "AGENTLEDGER_COLLECTOR_NAME="+e2eCollector)
	if col != nil {
		t.Cleanup(func() { stopAndReport(t, col) })
	}
	if err != nil {
		t.Fatal(err)
	}
	prom, err := testbin.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	promDir := filepath.Join(dir, "prometheus")
	if err := os.MkdirAll(promDir, 0o755); err != nil {
		t.Fatal(err)
	}
	pp, err := testbin.StartPrometheus(ctx, pBin, repoPath(t, "collector-config", "prometheus.yml"), addrs, prom, promDir, filepath.Join(dir, "prometheus.log"))
	if pp != nil {
		t.Cleanup(func() { stopAndReport(t, pp) })
	}
	if err != nil {
		t.Fatal(err)
	}

	const genuineID = "e2e-genuine"
	bare := forgedSummary("e2e-forged", "forger", 0x90, false)
	marked := forgedSummary(genuineID, "e2e-agent", 0x91, true)
	forgedIDs := []pcommon.SpanID{spanID(0x90), spanID(0x91)}
	exportOTLP(t, addrs.OTLPGRPC, bare, marked)

	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	root, chat1, tool, job, cont, chat2 := backgroundInvocation(0xa0)
	exportOTLP(t, addrs.OTLPGRPC, batch(t0, genuineID, root, chat1, tool, job, cont, chat2))

	// The genuine summary, in the file and in Jaeger.
	var genuine testbin.Summary
	err = testbin.Poll(ctx, 100*time.Millisecond, func() (bool, string, error) {
		sums, err := testbin.ReadSummaries(addrs.TracesFile)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, "", err
		}
		var ok bool
		genuine, ok = testbin.Closed(sums)[genuineID]
		return ok, fmt.Sprintf("%d summaries in the file", len(sums)), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if genuine.Status != contract.StatusFinal || genuine.InputTokens != 400 || genuine.OutputTokens != 70 || genuine.Collector != e2eCollector {
		t.Errorf("genuine summary = %+v, want final 400/70 from %s", genuine, e2eCollector)
	}
	want := []testbin.AgentInvocation{{InvocationID: genuineID, Scenario: "genuine", Status: contract.StatusFinal}}
	if s := waitJaegerSummaries(t, ctx, jaeger.QueryHTTP, t0, want)[genuineID]; s.InputTokens != 400 || s.Collector != e2eCollector {
		t.Errorf("genuine summary in Jaeger = %+v, want 400 input tokens from %s", s, e2eCollector)
	}

	// Prometheus: the genuine invocation's tokens, exactly, and the two
	// forged summaries counted as dropped.
	waitProm(t, ctx, prom, `sum(agentledger_invocation_tokens_total{gen_ai_token_type="input"})`, func(v float64) bool { return v == 400 })
	waitProm(t, ctx, prom, `sum(otelcol_processor_invocation_incoming_summaries_dropped)`, func(v float64) bool { return v == 2 })
	for _, q := range []string{
		`agentledger_invocations_total{gen_ai_agent_name="forger"}`,
		`agentledger_invocation_tokens_total{gen_ai_agent_name="forger"}`,
		`agentledger_invocations_total{invocation_collector!="` + e2eCollector + `"}`,
		`{job="forger"}`,
	} {
		s, err := testbin.PromQuery(ctx, prom, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(s) != 0 {
			t.Errorf("%s = %+v, want no series", q, s)
		}
	}
	s, err := testbin.PromQuery(ctx, prom, `agentledger_invocations_total`)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 1 || s[0].Value != 1 || s[0].Labels["invocation_status"] != contract.StatusFinal || s[0].Labels["invocation_collector"] != e2eCollector {
		t.Errorf("agentledger_invocations_total = %+v, want one final invocation from %s", s, e2eCollector)
	}

	// No forged span anywhere: not in the file (read raw, not through the
	// marker), not among Jaeger's services or summaries.
	inFile := spanIDsInFile(t, addrs.TracesFile)
	for _, id := range forgedIDs {
		if name, ok := inFile[id]; ok {
			t.Errorf("forged span %s (%s) reached the file exporter", id, name)
		}
	}
	for _, sp := range []handSpan{root, chat1, tool, job, cont, chat2} {
		if _, ok := inFile[sp.id]; !ok {
			t.Errorf("genuine span %s %s not in the file", sp.name, sp.id)
		}
	}
	services, err := testbin.JaegerServices(ctx, jaeger.QueryHTTP)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(services, "forger") {
		t.Errorf("Jaeger knows the forger's service: %v", services)
	}
	td, err := testbin.JaegerFind(ctx, jaeger.QueryHTTP, "e2e-agent", contract.SpanNameSummary, t0.Add(-time.Hour), time.Now().Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range spansByID(td) {
		if slices.Contains(forgedIDs, sp.SpanID()) {
			t.Errorf("forged summary %s reached Jaeger", sp.SpanID())
		}
	}
	if got := telemetryValue(t, addrs.Telemetry, "otelcol_processor_invocation_incoming_summaries_dropped"); got != 2 {
		t.Errorf("incoming summaries dropped = %v, want 2", got)
	}

	// The drill-down dashboard's Jaeger search (which selects summaries by
	// the processor's scope) finds the genuine summary's trace.
	panels, err := dashboards.Panels()
	if err != nil {
		t.Fatal(err)
	}
	searched := 0
	for _, p := range panels {
		if p.Kind != dashboards.KindJaeger {
			continue
		}
		vars := dashboards.DefaultVars()
		vars["agent"], vars["service"], vars["collector"] = "e2e", "e2e-agent", e2eCollector
		params, err := p.JaegerSearch(vars)
		if err != nil {
			t.Fatal(err)
		}
		n, err := jaegerV1Search(ctx, jaeger.QueryHTTP, params)
		if err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("%s: Jaeger search %v found %d traces, want the genuine one", p.Panel, params, n)
		}
		searched++
	}
	if searched == 0 {
		t.Error("no Jaeger panel searched")
	}
}

// htpasswdFile writes an htpasswd file (bcrypt) for the users.
func htpasswdFile(t *testing.T, users map[string]string) string {
	t.Helper()
	var b bytes.Buffer
	for user, password := range users {
		hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s:%s\n", user, hash)
	}
	path := filepath.Join(t.TempDir(), "tenants.htpasswd")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func basicAuth(user, password string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

// exportGRPC sends one batch over OTLP/gRPC with the authorization header
// (none when empty) and returns the receiver's answer.
func exportGRPC(t *testing.T, endpoint, authorization string, td ptrace.Traces) error {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if authorization != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", authorization)
	}
	_, err = ptraceotlp.NewGRPCClient(conn).Export(ctx, ptraceotlp.NewExportRequestFromTraces(td))
	return err
}

// exportHTTP sends one batch over OTLP/HTTP (protobuf) with the
// authorization header and returns the status code.
func exportHTTP(t *testing.T, endpoint, authorization string, td ptrace.Traces) int {
	t.Helper()
	body, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, "http://"+endpoint+"/v1/traces", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// closedOf waits until the file exporter holds a closing summary of the
// tenant's invocation and returns it.
func closedOf(t *testing.T, ctx context.Context, path, tenant, id string) testbin.Summary {
	t.Helper()
	var got testbin.Summary
	err := testbin.Poll(ctx, 100*time.Millisecond, func() (bool, string, error) {
		sums, err := testbin.ReadSummaries(path)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, "", err
		}
		var own []testbin.Summary
		for _, s := range sums {
			if s.Tenant == tenant {
				own = append(own, s)
			}
		}
		var ok bool
		got, ok = testbin.Closed(own)[id]
		return ok, fmt.Sprintf("%d summaries of tenant %q", len(own), tenant), nil
	})
	if err != nil {
		t.Fatalf("closing summary of %s/%s: %v", tenant, id, err)
	}
	return got
}

// TestSharedCollector runs local.yaml with shared.yaml over it: basicauth
// in front of both OTLP protocols, tenants from the authenticated user.
//   - No credentials, a wrong password, an unknown user, a malformed
//     header: refused (gRPC Unauthenticated, HTTP 401), and nothing of them
//     is ever indexed, written or published; the right credentials are
//     accepted.
//   - Two tenants use the same invocation id, span and trace IDs: bob's
//     continuation would discharge alice's background job and his model
//     call would add to her totals. Alice's stays pending while bob's are
//     in, then is final with exactly her own totals; bob's is his alone.
//   - An authenticated tenant's forged summary is dropped too.
func TestSharedCollector(t *testing.T) {
	bin := collectorBin(t)
	dir := t.TempDir()
	addrs, err := testbin.NewCollectorAddrs(dir)
	if err != nil {
		t.Fatal(err)
	}
	passwords := map[string]string{"alice": "alice-secret", "bob": "bob-secret"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitBudget)
	defer cancel()
	p, err := testbin.StartCollectorConfigs(ctx, bin,
		[]string{repoPath(t, "collector-config", "local.yaml"), repoPath(t, "collector-config", sharedConfig)},
		addrs, filepath.Join(dir, "collector.log"),
		"AGENTLEDGER_HTPASSWD_FILE="+htpasswdFile(t, passwords), "AGENTLEDGER_COLLECTOR_NAME="+e2eCollector,
		"AGENTLEDGER_DEBUG_VERBOSITY=basic")
	if p != nil {
		t.Cleanup(func() { stopAndReport(t, p) })
	}
	if err != nil {
		t.Fatal(err)
	}
	alice, bob := basicAuth("alice", passwords["alice"]), basicAuth("bob", passwords["bob"])
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)

	// Refused: every attempt carries a whole invocation of its own.
	refused := map[string]string{
		"no credentials":    "",
		"wrong password":    basicAuth("alice", "guess"),
		"unknown user":      basicAuth("mallory", "alice-secret"),
		"malformed":         "Basic not-base64!",
		"bearer, not basic": "Bearer alice-secret",
	}
	var refusedSpans []pcommon.SpanID
	n := byte(0x40)
	for name, header := range refused {
		root, chat1, tool, job, cont, chat2 := backgroundInvocation(n)
		td := batch(t0, "e2e-refused-"+name, root, chat1, tool, job, cont, chat2)
		for _, sp := range []handSpan{root, chat1, tool, job, cont, chat2} {
			refusedSpans = append(refusedSpans, sp.id)
		}
		n += 8
		err := exportGRPC(t, addrs.OTLPGRPC, header, td)
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("gRPC export with %s: %v, want Unauthenticated", name, err)
		}
		if code := exportHTTP(t, addrs.OTLPHTTP, header, td); code != http.StatusUnauthorized {
			t.Errorf("HTTP export with %s: %d, want 401", name, code)
		}
	}

	// Accepted, over both protocols: alice's invocation without its
	// continuation (the job's notification is owed), then bob's spans under
	// the same id and span IDs.
	const shared = "e2e-shared-id"
	root, chat1, tool, job, cont, chat2 := backgroundInvocation(0x80)
	if err := exportGRPC(t, addrs.OTLPGRPC, alice, batch(t0, shared, root, chat1, tool)); err != nil {
		t.Fatalf("alice's export: %v", err)
	}
	if code := exportHTTP(t, addrs.OTLPHTTP, alice, batch(t0, shared, job)); code != http.StatusOK {
		t.Fatalf("alice's HTTP export: %d", code)
	}
	aliceStatus := statusClient(t, addrs.Status, statusapi.WithTenant("alice"))
	waitInvocation(t, aliceStatus, shared, "waiting on alice's followup", func(i statusapi.Invocation) bool {
		return i.Waiting != nil && len(i.Waiting.ExpectedFollowups) == 1 && len(i.Waiting.MissingChildren) == 0
	})
	bobCont, bobChat := cont, chat2
	bobChat.attrs = map[string]any{}
	for k, v := range chat2.attrs {
		bobChat.attrs[k] = v
	}
	bobChat.attrs[contract.AttrUsageInputTokens] = 9000
	if err := exportGRPC(t, addrs.OTLPGRPC, bob, batch(t0, shared, bobCont, bobChat)); err != nil {
		t.Fatalf("bob's export: %v", err)
	}
	bobStatus := statusClient(t, addrs.Status, statusapi.WithTenant("bob"))
	bobView := waitInvocation(t, bobStatus, shared, "known for bob", func(i statusapi.Invocation) bool { return i.Spans == 2 })
	if bobView.Status != statusapi.StatusPending || bobView.Usage.InputTokens != 9000 || bobView.Waiting == nil || !bobView.Waiting.RootMissing {
		t.Errorf("bob's invocation = %+v, want pending without a root, 9000 input tokens", bobView)
	}
	aliceView, err := aliceStatus.Invocation(ctx, shared)
	if err != nil {
		t.Fatal(err)
	}
	if aliceView.Status != statusapi.StatusPending || aliceView.Usage.InputTokens != 100 || len(aliceView.Waiting.ExpectedFollowups) != 1 {
		t.Errorf("alice's invocation after bob's spans = %+v, want still pending on her followup with 100 input tokens", aliceView)
	}
	if _, err := statusClient(t, addrs.Status).Invocation(ctx, shared); !errors.Is(err, statusapi.ErrNotFound) {
		t.Errorf("the invocation without a tenant: %v, want not found", err)
	}

	// Alice's continuation: final, exactly hers.
	if err := exportGRPC(t, addrs.OTLPGRPC, alice, batch(t0, shared, cont, chat2)); err != nil {
		t.Fatal(err)
	}
	got := closedOf(t, ctx, addrs.TracesFile, "alice", shared)
	want := testbin.Summary{
		TraceID: root.trace.String(), InvocationID: shared, ConversationID: "session-1", AgentName: "e2e",
		Tenant: "alice", Status: contract.StatusFinal, Revision: 1,
		InputTokens: 400, OutputTokens: 70, CacheReadTokens: 240, CacheCreationTokens: 10, ReasoningTokens: 5,
		AfterResultInputTokens: 300, AfterResultOutputTokens: 50,
		ModelCalls: 2, BackgroundJobs: 1, Continuations: 1, Spans: 6, Traces: 2,
		TimeToFinalMS: 3000, HasTimeToFinal: true,
		Links: []string{cont.trace.String() + "/" + cont.id.String()},
	}
	got.SpanID, got.Service = "", ""
	if !summaryEqual(got, want) {
		t.Errorf("alice's summary\n got %+v\nwant %+v", got, want)
	}
	if got.Collector != e2eCollector {
		t.Errorf("collector = %q, want %s", got.Collector, e2eCollector)
	}

	// An authenticated tenant cannot write summaries either.
	if err := exportGRPC(t, addrs.OTLPGRPC, bob, forgedSummary(shared, "e2e-agent", 0x92, true)); err != nil {
		t.Fatal(err)
	}
	err = testbin.Poll(ctx, 100*time.Millisecond, func() (bool, string, error) {
		v := telemetryValue(t, addrs.Telemetry, "otelcol_processor_invocation_incoming_summaries_dropped")
		return v == 1, fmt.Sprintf("dropped %v", v), nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// Nothing of the refused exports was ever indexed, written or
	// published: the accepted exports after them were processed, so they
	// would have been by now.
	inFile := spanIDsInFile(t, addrs.TracesFile)
	for _, id := range append(refusedSpans, spanID(0x92)) {
		if name, ok := inFile[id]; ok {
			t.Errorf("refused span %s (%s) reached the file exporter", id, name)
		}
	}
	if v := telemetryValue(t, addrs.Telemetry, "otelcol_processor_invocation_spans_indexed"); v != 8 {
		t.Errorf("spans indexed = %v, want 8 (alice's 6, bob's 2)", v)
	}
	for tenant, c := range map[string]*statusapi.Client{"": statusClient(t, addrs.Status), "alice": aliceStatus, "bob": bobStatus} {
		l, err := c.List(ctx, statusapi.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]int{"": 2, "alice": 1, "bob": 1}[tenant] // no tenant: the operator's list of all
		if l.Total != want {
			t.Errorf("tenant %q: the status API knows %d invocations, want %d: %+v", tenant, l.Total, want, l.Invocations)
		}
	}
	sums, err := testbin.ReadSummaries(addrs.TracesFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sums {
		if s.InvocationID != shared || (s.Tenant != "alice" && s.Tenant != "bob") {
			t.Errorf("unexpected summary %+v", s)
		}
		if s.Tenant == "bob" && s.Status == contract.StatusFinal {
			t.Errorf("bob's root-less invocation is final: %+v", s)
		}
	}
}

// TestSharedLoadBalancing runs the shared scale-out layout: loadbalancing.yaml
// with shared-loadbalancing.yaml in front of two backends running
// local.yaml with the tenant read from the resource attribute the tier
// stamps. Alice and bob each send the same six invocation ids with the same
// span IDs and their own usage; alice's spans also claim to be bob's
// (invocation.tenant = bob on their resource). Every (tenant, id) closes
// exactly once, final with that tenant's totals, on one backend: the tier
// replaced the claim with the authenticated user and routed by both.
func TestSharedLoadBalancing(t *testing.T) {
	bin := collectorBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitBudget)
	defer cancel()
	var backends []lbBackend
	for i := range 2 {
		dir := t.TempDir()
		addrs, err := testbin.NewCollectorAddrs(dir)
		if err != nil {
			t.Fatal(err)
		}
		p, err := testbin.StartCollectorConfigs(ctx, bin, []string{
			repoPath(t, "collector-config", backendConfig),
			"yaml:processors::invocation::tenant::source: resource",
			"yaml:processors::invocation::tenant::attribute: " + contract.AttrTenant,
		}, addrs, filepath.Join(dir, "collector.log"), "AGENTLEDGER_DEBUG_VERBOSITY=basic", fmt.Sprintf("AGENTLEDGER_COLLECTOR_NAME=backend-%d", i))
		if p != nil {
			t.Cleanup(func() { stopAndReport(t, p) })
		}
		if err != nil {
			t.Fatal(err)
		}
		backends = append(backends, lbBackend{addrs: addrs, proc: p})
	}
	passwords := map[string]string{"alice": "alice-secret", "bob": "bob-secret"}
	dir := t.TempDir()
	lbAddrs, err := testbin.NewCollectorAddrs(dir)
	if err != nil {
		t.Fatal(err)
	}
	lb, err := testbin.StartCollectorConfigs(ctx, bin,
		[]string{repoPath(t, "collector-config", lbConfig), repoPath(t, "collector-config", sharedLBConfig)},
		lbAddrs, filepath.Join(dir, "collector.log"),
		"AGENTLEDGER_HTPASSWD_FILE="+htpasswdFile(t, passwords),
		"AGENTLEDGER_BACKENDS=["+backends[0].addrs.OTLPGRPC+", "+backends[1].addrs.OTLPGRPC+"]")
	if lb != nil {
		t.Cleanup(func() { stopAndReport(t, lb) }) // first: its queues drain into running backends
	}
	if err != nil {
		t.Fatal(err)
	}

	if err := exportGRPC(t, lbAddrs.OTLPGRPC, "", batch(time.Now(), "e2e-lbt-anon", newLBInvocation(0).spans()...)); status.Code(err) != codes.Unauthenticated {
		t.Errorf("export without credentials: %v, want Unauthenticated", err)
	}
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	const n = 6
	want := map[[2]string]int64{} // (tenant, id) -> input tokens
	for i := range n {
		id := fmt.Sprintf("e2e-lbt-%d", i)
		for _, tenant := range []string{"alice", "bob"} {
			iv := newLBInvocation(i)
			extra := 0
			if tenant == "bob" {
				extra = 1000
			}
			iv.chat1.attrs[contract.AttrUsageInputTokens] = 100 + i + extra
			want[[2]string{tenant, id}] = iv.input + int64(extra)
			spans := iv.spans()
			// Root trace and continuation trace in separate requests,
			// continuation first.
			for _, part := range [][]handSpan{spans[4:], spans[:4]} {
				td := batch(t0, id, part...)
				td.ResourceSpans().At(0).Resource().Attributes().PutStr(contract.AttrTenant, "bob") // a claim
				if err := exportGRPC(t, lbAddrs.OTLPGRPC, basicAuth(tenant, passwords[tenant]), td); err != nil {
					t.Fatalf("%s's export of %s: %v", tenant, id, err)
				}
			}
		}
	}

	closing := map[[2]string][]int{} // (tenant, id) -> backends that closed it
	var got map[[2]string]testbin.Summary
	err = testbin.Poll(ctx, 200*time.Millisecond, func() (bool, string, error) {
		clear(closing)
		got = map[[2]string]testbin.Summary{}
		for b, be := range backends {
			sums, err := testbin.ReadSummaries(be.addrs.TracesFile)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return false, "", err
			}
			for _, s := range sums {
				if s.Status == contract.StatusPending {
					continue
				}
				k := [2]string{s.Tenant, s.InvocationID}
				closing[k] = append(closing[k], b)
				got[k] = s
			}
		}
		return len(closing) >= len(want), fmt.Sprintf("%d of %d closed", len(closing), len(want)), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for k, input := range want {
		s := got[k]
		if len(closing[k]) != 1 || s.Status != contract.StatusFinal || s.Revision != 1 || s.InputTokens != input || s.Spans != 6 || s.DuplicateSpans != 0 {
			t.Errorf("%s/%s: closed on backends %v, last %+v; want once, final, %d input tokens, 6 spans", k[0], k[1], closing[k], s, input)
		}
	}
	if len(closing) != len(want) {
		t.Errorf("closed %d (tenant, id) pairs, want %d: %v", len(closing), len(want), closing)
	}
}
