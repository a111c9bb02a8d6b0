package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/dashboards"
	"github.com/agentledger/agentledger/internal/testbin"
)

func TestReportCountsMissingAndDisagreeing(t *testing.T) {
	results := []testbin.AgentInvocation{
		{InvocationID: "a", Scenario: "foreground", Status: contract.StatusFinal, InputTokens: 30, OutputTokens: 6},
		{InvocationID: "b", Scenario: "background", Status: contract.StatusFinal, InputTokens: 40, OutputTokens: 8},
		{InvocationID: "c", Scenario: "warm-second", Status: contract.StatusFinal},
	}
	closed := map[string]testbin.Summary{
		"a": {InvocationID: "a", Status: contract.StatusFinal, InputTokens: 30, OutputTokens: 6, HasTimeToFinal: true},
		"b": {InvocationID: "b", Status: contract.StatusFinal, InputTokens: 41, OutputTokens: 8, Anomalies: []string{"followup_interrupted:job-1"}},
	}
	var out bytes.Buffer
	if bad := report(&out, results, closed); bad != 2 {
		t.Errorf("report counted %d bad invocations, want 2 (b differs, c missing)\n%s", bad, out.String())
	}
	for _, want := range []string{"MISSING", "DIFFERS", "input_tokens: agent 40, summary 41", "anomalies", "followup_interrupted:job-1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestRunLocal runs what `make demo` runs, for one scenario.
func TestRunLocal(t *testing.T) {
	bin := testbin.Require(t, testbin.EnvCollectorBin, "make build", ".bin/otelcol-agentledger")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := run(ctx, options{collector: bin, timeout: 2 * time.Minute, scenario: "background", workDir: t.TempDir()}, &out)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "summaries agree with the agent's own counts") || !strings.Contains(out.String(), "background") {
		t.Errorf("demo output:\n%s", out.String())
	}
}

// TestRunView runs what `make demo VIEW=1` runs, for one scenario, and
// stops what it started: no Jaeger, so the summaries come from the file and
// the status page links nowhere but to its own timeline; every example
// query returned data from the live Prometheus.
func TestRunView(t *testing.T) {
	bin := testbin.Require(t, testbin.EnvCollectorBin, "make build", ".bin/otelcol-agentledger")
	prom := testbin.Require(t, testbin.EnvPrometheusBin, "make prometheus", "/usr/bin/prometheus")
	t.Setenv("AGENTLEDGER_JAEGER_UI_URL", "")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var seen viewInfo
	o := options{
		collector: bin, view: true, prometheus: prom, stopView: true,
		timeout: 2 * time.Minute, scenario: "background", workDir: t.TempDir(),
		viewed: func(ctx context.Context, v viewInfo) error {
			seen = v
			for _, u := range []string{"http://" + v.Addrs.Status + "/", v.TimelineURL} {
				page, err := getText(ctx, u)
				if err != nil {
					return err
				}
				if strings.Contains(page, "/trace/") || strings.Contains(page, "Jaeger:") {
					t.Errorf("%s links to a Jaeger UI, and none is configured", u)
				}
			}
			return nil
		},
	}
	var out bytes.Buffer
	if err := run(ctx, o, &out); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	checkViewQueries(t, seen, out.String())
	for _, want := range []string{"jaeger.yaml and view.yaml", "Spans and summaries (OTLP JSON lines", seen.TimelineURL + "\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "Jaeger UI") {
		t.Errorf("the help mentions a Jaeger UI without a Jaeger:\n%s", out.String())
	}
}

// TestRunViewJaeger runs what `make demo VIEW=1 JAEGER=1` runs, for one
// scenario, and stops what it started: the Grafana provisioning names the
// ports the demo chose, every example query returned data from the live
// Prometheus (the p95 among them), and the Jaeger tag search it prints
// finds the invocation's traces, its continuation's included.
func TestRunViewJaeger(t *testing.T) {
	bin := testbin.Require(t, testbin.EnvCollectorBin, "make build", ".bin/otelcol-agentledger")
	jaeger := testbin.Require(t, testbin.EnvJaegerBin, "make jaeger", ".bin/jaeger")
	prom := testbin.Require(t, testbin.EnvPrometheusBin, "make prometheus", "/usr/bin/prometheus")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var seen viewInfo
	// The test stands in for a Jaeger release on the same query address:
	// the page's links are checked, not followed.
	uiAddr, err := testbin.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("JAEGER_QUERY_HTTP_ENDPOINT", uiAddr)
	t.Setenv("AGENTLEDGER_JAEGER_UI_URL", "http://"+uiAddr)
	o := options{
		collector: bin, view: true, jaeger: jaeger, prometheus: prom, stopView: true,
		timeout: 2 * time.Minute, scenario: "background", workDir: t.TempDir(),
		viewed: func(ctx context.Context, v viewInfo) error {
			seen = v
			var traces struct {
				Data []struct {
					Spans []struct {
						OperationName string `json:"operationName"`
					} `json:"spans"`
				} `json:"data"`
			}
			if err := testbin.GetJSON(ctx, jaegerTagSearch(v.Jaeger.QueryHTTP, v.InvocationID), &traces); err != nil {
				return err
			}
			var ops []string
			for _, tr := range traces.Data {
				for _, s := range tr.Spans {
					ops = append(ops, s.OperationName)
				}
			}
			if len(traces.Data) != 2 || !slices.Contains(ops, contract.SpanNameSummary) || !slices.Contains(ops, "continue_agent shellagent") {
				t.Errorf("tag search for invocation.id=%s: %d traces, spans %q; want 2 traces (the invocation and its continuation) with the summary", v.InvocationID, len(traces.Data), ops)
			}
			// The timeline page the help prints links each of its traces
			// in the Jaeger UI.
			page, err := getText(ctx, v.TimelineURL)
			if err != nil {
				return err
			}
			if n := strings.Count(page, `href="http://`+v.Jaeger.QueryHTTP+`/trace/`); n != 2 {
				t.Errorf("timeline page %s links %d traces in Jaeger, want 2 (the root's and the continuation's)", v.TimelineURL, n)
			}
			return nil
		},
	}
	var out bytes.Buffer
	if err := run(ctx, o, &out); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	checkViewQueries(t, seen, out.String())

	raw, err := os.ReadFile(filepath.Join(seen.GrafanaDir, "provisioning", "datasources", "agentledger.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds struct {
		Datasources []struct {
			UID string `yaml:"uid"`
			URL string `yaml:"url"`
		} `yaml:"datasources"`
	}
	if err := yaml.Unmarshal(raw, &ds); err != nil {
		t.Fatal(err)
	}
	urls := map[string]string{}
	for _, d := range ds.Datasources {
		urls[d.UID] = d.URL
	}
	want := map[string]string{
		dashboards.PrometheusUID: "http://" + seen.Prometheus,
		dashboards.JaegerUID:     "http://" + seen.Jaeger.QueryHTTP,
	}
	if !maps.Equal(urls, want) {
		t.Errorf("provisioned data sources %v, want %v", urls, want)
	}
	for _, f := range []string{"provisioning/dashboards/agentledger.yaml", "dashboards/overview.json", "dashboards/invocation.json"} {
		if _, err := os.Stat(filepath.Join(seen.GrafanaDir, f)); err != nil {
			t.Error(err)
		}
	}
	for _, want := range []string{"GF_PATHS_PROVISIONING=" + seen.GrafanaDir + "/provisioning", seen.TimelineURL + "\n", "/invocations/", "Tags invocation.id=" + seen.InvocationID, "histogram_quantile(0.95, sum by (le) (agentledger_invocation_time_to_final_milliseconds_bucket))\n      = "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, out.String())
		}
	}
}

// checkViewQueries checks that every example query returned data, the p95
// among them.
func checkViewQueries(t *testing.T, seen viewInfo, out string) {
	t.Helper()
	if len(seen.Queries) != len(promQueries) {
		t.Fatalf("%d query results, want %d\n%s", len(seen.Queries), len(promQueries), out)
	}
	for _, q := range seen.Queries {
		if !q.OK {
			t.Errorf("%s returned %s", q.Expr, q.Result)
		}
	}
	p95 := seen.Queries[slices.IndexFunc(seen.Queries, func(q queryResult) bool { return strings.HasPrefix(q.Expr, "histogram_quantile") })]
	if v, err := strconv.ParseFloat(p95.Result, 64); err != nil || v < 1000 {
		// The background scenario's job sleeps 1 s before it ends.
		t.Errorf("p95 time to final = %s, want at least 1000 (ms)", p95.Result)
	}
}

// getText GETs url and returns its body.
func getText(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s: %s", url, resp.Status, b)
	}
	return string(b), nil
}
