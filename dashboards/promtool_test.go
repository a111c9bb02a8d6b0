package dashboards_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/agentledger/agentledger/dashboards"
)

// Synthetic series, one sample a minute from 0 to 20m. Rates per second:
// model tokens m1 input 1, output 2; agent build input 1, output 1,
// cache_read 10, after-result output 0.5; agent plan input 2, after-result
// input 1; build final 0.1/s, incomplete 0.05/s, plan final 0.1/s. Of
// build's time-to-final observations one third is <=100ms and the rest in
// (100ms, 1000ms]; all of plan's are <=100ms. The invocation series carry
// the summary marker's label; unmarked ones with huge values must not
// count.
var promtoolSeries = []struct{ series, values string }{
	{`agentledger_model_tokens_total{job="svc",gen_ai_request_model="m1",gen_ai_token_type="input"}`, "0+60x20"},
	{`agentledger_model_tokens_total{job="svc",gen_ai_request_model="m1",gen_ai_token_type="output"}`, "0+120x20"},
	{`agentledger_invocation_tokens_total{job="svc",invocation_collector="c1",gen_ai_agent_name="build",gen_ai_token_type="input"}`, "0+60x20"},
	{`agentledger_invocation_tokens_total{job="svc",invocation_collector="c1",gen_ai_agent_name="build",gen_ai_token_type="output"}`, "0+60x20"},
	{`agentledger_invocation_tokens_total{job="svc",invocation_collector="c1",gen_ai_agent_name="build",gen_ai_token_type="cache_read"}`, "0+600x20"},
	{`agentledger_invocation_tokens_total{job="svc",invocation_collector="c1",gen_ai_agent_name="plan",gen_ai_token_type="input"}`, "0+120x20"},
	{`agentledger_invocation_after_result_tokens_total{job="svc",invocation_collector="c1",gen_ai_agent_name="build",gen_ai_token_type="output"}`, "0+30x20"},
	{`agentledger_invocation_after_result_tokens_total{job="svc",invocation_collector="c1",gen_ai_agent_name="plan",gen_ai_token_type="input"}`, "0+60x20"},
	{`agentledger_invocations_total{job="svc",invocation_collector="c1",gen_ai_agent_name="build",invocation_status="final"}`, "0+6x20"},
	{`agentledger_invocations_total{job="svc",invocation_collector="c1",gen_ai_agent_name="build",invocation_status="incomplete"}`, "0+3x20"},
	{`agentledger_invocations_total{job="svc",invocation_collector="c1",gen_ai_agent_name="plan",invocation_status="final"}`, "0+6x20"},
	{`agentledger_invocation_incomplete_total{job="svc",invocation_collector="c1",gen_ai_agent_name="build",invocation_incomplete_reasons="[\"open_timeout\"]"}`, "0+3x20"},
	{`agentledger_invocation_time_to_final_milliseconds_bucket{job="svc",invocation_collector="c1",gen_ai_agent_name="build",le="100"}`, "0+1x20"},
	{`agentledger_invocation_time_to_final_milliseconds_bucket{job="svc",invocation_collector="c1",gen_ai_agent_name="build",le="1000"}`, "0+3x20"},
	{`agentledger_invocation_time_to_final_milliseconds_bucket{job="svc",invocation_collector="c1",gen_ai_agent_name="build",le="+Inf"}`, "0+3x20"},
	{`agentledger_invocation_time_to_final_milliseconds_bucket{job="svc",invocation_collector="c1",gen_ai_agent_name="plan",le="100"}`, "0+5x20"},
	{`agentledger_invocation_time_to_final_milliseconds_bucket{job="svc",invocation_collector="c1",gen_ai_agent_name="plan",le="1000"}`, "0+5x20"},
	{`agentledger_invocation_time_to_final_milliseconds_bucket{job="svc",invocation_collector="c1",gen_ai_agent_name="plan",le="+Inf"}`, "0+5x20"},
	// Series without the summary marker (made from spans named
	// invocation.summary that no collector's processor wrote): every
	// query must ignore them.
	{`agentledger_invocation_tokens_total{job="svc",gen_ai_agent_name="build",gen_ai_token_type="input"}`, "0+600000x20"},
	{`agentledger_invocation_after_result_tokens_total{job="svc",gen_ai_agent_name="build",gen_ai_token_type="output"}`, "0+600000x20"},
	{`agentledger_invocations_total{job="svc",gen_ai_agent_name="build",invocation_status="final"}`, "0+600x20"},
	{`agentledger_invocation_incomplete_total{job="svc",gen_ai_agent_name="build",invocation_incomplete_reasons="[\"forged\"]"}`, "0+600x20"},
	{`agentledger_invocation_time_to_final_milliseconds_bucket{job="svc",gen_ai_agent_name="build",le="100"}`, "0+600x20"},
	{`agentledger_invocation_time_to_final_milliseconds_bucket{job="svc",gen_ai_agent_name="build",le="1000"}`, "0+600x20"},
	{`agentledger_invocation_time_to_final_milliseconds_bucket{job="svc",gen_ai_agent_name="build",le="+Inf"}`, "0+600x20"},
	{`otelcol_processor_invocation_open_invocations{job="otelcol",otelcol_component_id="invocation"}`, "3x20"},
}

type sample struct {
	Labels string  `yaml:"labels"`
	Value  float64 `yaml:"value"`
}

// promtoolExpected is what each Prometheus query must return at 10m for
// agent "build", worked out by hand from promtoolSeries. The unfiltered
// answers differ, so a query that ignored $agent would fail.
var promtoolExpected = map[string][]sample{
	// Overview.
	"agentledger-overview/1/A": {
		{`{gen_ai_request_model="m1", gen_ai_token_type="input"}`, 1},
		{`{gen_ai_request_model="m1", gen_ai_token_type="output"}`, 2},
	},
	"agentledger-overview/2/A": {{`{gen_ai_agent_name="build"}`, 2}}, // cache_read excluded
	"agentledger-overview/3/A": {{`{}`, 0.25}},                       // 0.5 / (1 + 1)
	"agentledger-overview/4/A": {{`{}`, 0.25}},
	"agentledger-overview/5/A": {
		{`{invocation_status="final"}`, 0.1},
		{`{invocation_status="incomplete"}`, 0.05},
	},
	"agentledger-overview/6/A": {
		{`{invocation_status="final"}`, 60},
		{`{invocation_status="incomplete"}`, 30},
	},
	// 1/3 at <=100ms, 2/3 in (100ms, 1000ms]: p50 = 100 + 900*(1.5-1)/2,
	// p90 = 100 + 900*(2.7-1)/2, p99 = 100 + 900*(2.97-1)/2, in seconds.
	"agentledger-overview/7/A": {{`{}`, 0.325}},
	"agentledger-overview/7/B": {{`{}`, 0.865}},
	"agentledger-overview/7/C": {{`{}`, 0.9865}},
	"agentledger-overview/8/A": {{`{}`, 3}},
	"agentledger-overview/9/A": {{`{invocation_incomplete_reasons="[\"open_timeout\"]"}`, 30}},
	// Invocation drill-down.
	"agentledger-invocation/2/A": {
		{`{invocation_status="final"}`, 60},
		{`{invocation_status="incomplete"}`, 30},
	},
	"agentledger-invocation/3/A": {{`{}`, 0.25}},
	"agentledger-invocation/4/A": {
		{`{gen_ai_token_type="input"}`, 1},
		{`{gen_ai_token_type="output"}`, 1},
		{`{gen_ai_token_type="cache_read"}`, 10},
	},
	"agentledger-invocation/5/A": {{`{}`, 0.325}},
	"agentledger-invocation/5/B": {{`{}`, 0.865}},
}

// TestPromQLWithPromtool evaluates every Prometheus query of the dashboards
// with promtool's rule unit tests (Prometheus' own engine, no server) on
// synthetic series of the exported metrics, and compares with hand-worked
// results.
func TestPromQLWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not in PATH")
	}
	qs, err := dashboards.Panels()
	require.NoError(t, err)

	vars := dashboards.DefaultVars()
	vars["agent"] = "build"
	vars["__rate_interval"] = "5m"
	vars["__range"] = "10m"

	type exprTest struct {
		Expr       string   `yaml:"expr"`
		EvalTime   string   `yaml:"eval_time"`
		ExpSamples []sample `yaml:"exp_samples"`
	}
	type series struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	}
	var tests []exprTest
	covered := map[string]bool{}
	for _, q := range qs {
		if q.Kind != dashboards.KindPrometheus {
			continue
		}
		key := fmt.Sprintf("%s/%d/%s", q.Dashboard, q.PanelID, q.RefID)
		exp, ok := promtoolExpected[key]
		require.True(t, ok, "no expected result for %s (%s): add one to promtoolExpected", key, q.Panel)
		covered[key] = true
		expr, err := q.Query(vars)
		require.NoError(t, err)
		tests = append(tests, exprTest{Expr: expr, EvalTime: "10m", ExpSamples: exp})
	}
	for key := range promtoolExpected {
		require.True(t, covered[key], "expected result for %s, which no panel has", key)
	}

	in := make([]series, 0, len(promtoolSeries))
	for _, s := range promtoolSeries {
		in = append(in, series{s.series, s.values})
	}
	file := map[string]any{
		"evaluation_interval": "1m",
		"tests": []map[string]any{{
			"interval":         "1m",
			"input_series":     in,
			"promql_expr_test": tests,
		}},
	}
	raw, err := yaml.Marshal(file)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "dashboards_test.yaml")
	require.NoError(t, os.WriteFile(path, raw, 0o600))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, promtool, "test", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool test rules: %v\n%s\ntest file:\n%s", err, strings.TrimSpace(string(out)), raw)
	}
}
