package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentledger/agentledger/dashboards"
	"github.com/agentledger/agentledger/internal/testbin"
)

// agentService is the service.name of examples/shellagent's spans, the
// service Jaeger stores them under.
const agentService = "shellagent"

// promQueries are the queries the demo prints and checks. Every one is an
// instant query over what Prometheus holds when the demo ends: the demo's
// series appear in Prometheus with all their observations already in the
// first sample, so rate() or increase() over any window sees no increase
// (0, and histogram_quantile of all-zero buckets is NaN). The quantile is
// therefore taken of the cumulative buckets (since the collector started);
// with a collector that runs on, rate over a window gives recent quantiles.
var promQueries = []string{
	`sum by (gen_ai_request_model, gen_ai_token_type) (agentledger_model_tokens_total)`,
	`sum by (gen_ai_agent_name, gen_ai_token_type) (agentledger_invocation_tokens_total)`,
	`sum by (gen_ai_token_type) (agentledger_invocation_after_result_tokens_total)`,
	`sum by (invocation_status) (agentledger_invocations_total)`,
	`histogram_quantile(0.95, sum by (le) (agentledger_invocation_time_to_final_milliseconds_bucket))`,
	`otelcol_processor_invocation_open_invocations`,
}

// queryResult is what one of promQueries returned: "3 series", one
// value, or "no data".
type queryResult struct {
	Expr   string
	Result string
	OK     bool
}

// checkQueries runs promQueries until every one returns a finite value
// (the collector's internal telemetry is scraped separately from its
// token metrics) or ctx ends, and returns the last results.
func checkQueries(ctx context.Context, promAddr string) []queryResult {
	var res []queryResult
	_ = testbin.Poll(ctx, 500*time.Millisecond, func() (bool, string, error) {
		res = res[:0]
		var missing []string
		for _, q := range promQueries {
			r := queryResult{Expr: q, Result: "no data"}
			s, err := testbin.PromQuery(ctx, promAddr, q)
			switch {
			case err != nil:
				r.Result = err.Error()
			case len(s) == 1 && !math.IsNaN(s[0].Value) && !math.IsInf(s[0].Value, 0):
				r.Result, r.OK = fmt.Sprintf("%g", s[0].Value), true
			case len(s) > 1:
				r.Result, r.OK = fmt.Sprintf("%d series", len(s)), true
			}
			if !r.OK {
				missing = append(missing, q)
			}
			res = append(res, r)
		}
		return len(missing) == 0, "no data yet: " + strings.Join(missing, "; "), nil
	})
	return res
}

// jaegerTagSearch is Jaeger's /api/traces URL for every trace of the
// agent's service with a span tagged invocation.id=id (an invocation's
// continuations are traces of their own, linked to it).
func jaegerTagSearch(queryAddr, id string) string {
	q := url.Values{
		"service":  {agentService},
		"tags":     {fmt.Sprintf(`{"invocation.id":%q}`, id)},
		"lookback": {"1h"},
		"limit":    {"20"},
	}
	return "http://" + queryAddr + "/api/traces?" + q.Encode()
}

// writeGrafana writes Grafana provisioning for the ports the demo chose
// into work/grafana and returns that directory. Without a Jaeger (empty
// jaegerQuery) its data source names Jaeger's default query address. The work directory is made
// readable to others so that Grafana in a container, which runs as its
// own user, can read the files.
func writeGrafana(work, promAddr, jaegerQuery string) (string, error) {
	dir := filepath.Join(work, "grafana")
	if jaegerQuery == "" {
		jaegerQuery = "127.0.0.1:16686"
	}
	if err := dashboards.WriteProvisioning(dir, "http://"+promAddr, "http://"+jaegerQuery); err != nil {
		return "", fmt.Errorf("grafana provisioning: %w", err)
	}
	if err := os.Chmod(work, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// jaegerRelease is the Jaeger v2 release built from the same sources as
// the v1.76.0 module tools/jaeger pins; its binaries and images embed the UI.
const jaegerRelease = "2.13.0"

// startViewers picks Prometheus's address (Prometheus itself starts after
// the collector) and, with o.jaeger, starts that Jaeger
// (collector-config/jaeger-v2.yaml) and points the collector's Jaeger
// exporter at it.
func startViewers(ctx context.Context, o options, root, work string, addrs *testbin.CollectorAddrs, s *stack, w io.Writer) (testbin.JaegerAddrs, string, error) {
	if o.prometheus == "" {
		o.prometheus = "/usr/bin/prometheus"
	}
	bins := map[string]string{o.prometheus: "make prometheus"}
	if o.jaeger != "" {
		bins[o.jaeger] = "make jaeger"
	}
	for bin, target := range bins {
		if _, err := os.Stat(bin); err != nil {
			return testbin.JaegerAddrs{}, "", fmt.Errorf("%s missing (%s): %w", bin, target, err)
		}
	}
	promAddr, err := testbin.FreeAddr()
	if err != nil {
		return testbin.JaegerAddrs{}, "", err
	}
	promAddr = envOr("PROMETHEUS_WEB_ENDPOINT", promAddr)
	if o.jaeger == "" {
		return testbin.JaegerAddrs{}, promAddr, nil
	}

	j, err := testbin.NewJaegerAddrs()
	if err != nil {
		return j, "", err
	}
	j.OTLPGRPC = envOr("JAEGER_OTLP_GRPC_ENDPOINT", j.OTLPGRPC)
	j.OTLPHTTP = envOr("JAEGER_OTLP_HTTP_ENDPOINT", j.OTLPHTTP)
	j.QueryHTTP = envOr("JAEGER_QUERY_HTTP_ENDPOINT", j.QueryHTTP)
	j.QueryGRPC = envOr("JAEGER_QUERY_GRPC_ENDPOINT", j.QueryGRPC)
	addrs.JaegerOTLP = j.OTLPGRPC

	step(w, "starting Jaeger with collector-config/jaeger-v2.yaml (query %s)", j.QueryHTTP)
	p, err := testbin.StartJaeger(ctx, o.jaeger, filepath.Join(root, "collector-config", "jaeger-v2.yaml"), j,
		filepath.Join(work, "jaeger.log"))
	s.add(p)
	return j, promAddr, err
}

func startPrometheus(ctx context.Context, o options, root, work string, addrs testbin.CollectorAddrs, promAddr string, s *stack, w io.Writer) error {
	if o.prometheus == "" {
		o.prometheus = "/usr/bin/prometheus"
	}
	step(w, "starting Prometheus on %s scraping %s and %s", promAddr, addrs.Prometheus, addrs.Telemetry)
	dir := filepath.Join(work, "prometheus")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("prometheus directory: %w", err)
	}
	p, err := testbin.StartPrometheus(ctx, o.prometheus, filepath.Join(root, "collector-config", "prometheus.yml"),
		addrs, promAddr, dir, filepath.Join(work, "prometheus.log"))
	s.add(p)
	return err
}

// viewInfo is what the demo left running with -view, for printViewHelp
// and for tests (options.viewed).
type viewInfo struct {
	Addrs        testbin.CollectorAddrs
	Jaeger       testbin.JaegerAddrs
	Prometheus   string
	GrafanaDir   string
	InvocationID string // one invocation of the run, for the examples
	// TimelineURL is the status page of one background invocation: its
	// spans from all its traces on one axis.
	TimelineURL string
	Queries     []queryResult
}

// printViewHelp tells the user where everything runs, what to look at, and
// how to stop it.
func printViewHelp(w io.Writer, root string, v viewInfo, s *stack) {
	addrs := v.Addrs
	var pids []string
	fmt.Fprintln(w, "\nLeft running:")
	for _, p := range s.procs {
		fmt.Fprintf(w, "  %-20s pid %-7d log %s\n", p.Name, p.PID(), p.LogPath)
		pids = append(pids, fmt.Sprint(p.PID()))
	}
	fmt.Fprintf(w, `
Invocation status page (open and recently closed invocations, what each waits on)
  http://%[1]s/
  one background invocation on one time axis (its job past the result, the
  continuation it woke, the tokens after the result):
  %[2]s
  http://%[1]s/v1/invocations?status=pending&older_than=10m
  http://%[1]s/v1/invocations/<invocation id>
  http://%[1]s/v1/sessions/<session id>      (owes_work)

%[3]sPrometheus  http://%[4]s/graph  (what each query returned as the demo ended after "=")
%[5]s  (the quantile is over the cumulative buckets: the demo's series reach
  Prometheus with every observation in their first sample, so rate() over
  any window is 0; on a collector that keeps running use
  histogram_quantile(0.95, sum by (le) (rate(agentledger_invocation_time_to_final_milliseconds_bucket[5m])))
  all metrics: docs/metrics.md)

Grafana provisioning for these ports (data sources and both dashboards): %[6]s
  docker run --rm --network host -e GF_PATHS_PROVISIONING=%[6]s/provisioning \
    -v %[6]s:%[6]s:ro grafana/grafana
  then http://127.0.0.1:3000/ (admin/admin), folder AgentLedger; a Grafana of your
  own reads it with GF_PATHS_PROVISIONING=%[6]s/provisioning

Send your own agent's spans to the collector: OTLP gRPC %[7]s, OTLP HTTP http://%[8]s

%[9]sStop everything: kill %[10]s
`, addrs.Status, v.TimelineURL, jaegerSection(v), v.Prometheus, queryLines(v.Queries), v.GrafanaDir,
		addrs.OTLPGRPC, addrs.OTLPHTTP, jaegerUISection(root, v, s), strings.Join(pids, " "))
}

// jaegerSection is the help's Jaeger API part, with a Jaeger.
func jaegerSection(v viewInfo) string {
	j := v.Jaeger
	if j.QueryHTTP == "" {
		return "Spans and summaries (OTLP JSON lines; no Jaeger: make demo VIEW=1 JAEGER=1 adds one)\n  " +
			v.Addrs.TracesFile + "\n\n"
	}
	return fmt.Sprintf(`Jaeger (HTTP API; this source build has no UI, see below)
  http://%[1]s/api/v3/services
  http://%[1]s/api/traces?service=%[2]s&operation=invocation.summary&lookback=1h
  one invocation's traces (its own and its continuations'), by the invocation.id tag, here %[3]s:
  %[4]s
  http://%[1]s/api/v3/traces/<trace id>      (keeps span links with their invocation.link attribute)

`, j.QueryHTTP, agentService, v.InvocationID, jaegerTagSearch(j.QueryHTTP, v.InvocationID))
}

// jaegerUISection tells how to get the Jaeger UI, with a source-built
// Jaeger (which has none).
func jaegerUISection(root string, v viewInfo, s *stack) string {
	j := v.Jaeger
	if j.QueryHTTP == "" {
		return ""
	}
	return fmt.Sprintf(`The Jaeger UI: the release binaries and images of Jaeger v%[2]s embed it. Stop
the source build (kill %[3]d) and run the release with the same config:
  %[4]s ./jaeger --config %[5]s
or
  docker run --rm --network host %[6]s \
    -v %[7]s:/cfg jaegertracing/jaeger:%[2]s --config /cfg/jaeger-v2.yaml
then open http://%[1]s/search (release tarballs:
https://github.com/jaegertracing/jaeger/releases/tag/v%[2]s). To find one invocation
there: Service %[8]s, Tags invocation.id=%[9]s, Find Traces. The status page links
its traces there when the demo runs with AGENTLEDGER_JAEGER_UI_URL=http://%[1]s
(unset, its links go to its own timeline).

`, j.QueryHTTP, jaegerRelease, jaegerPID(s), strings.Join(j.Env(), " "),
		filepath.Join(root, "collector-config", "jaeger-v2.yaml"), dockerEnv(j.Env()), filepath.Join(root, "collector-config"),
		agentService, v.InvocationID)
}

func queryLines(res []queryResult) string {
	var b strings.Builder
	for _, r := range res {
		fmt.Fprintf(&b, "  %s\n      = %s\n", r.Expr, r.Result)
	}
	return b.String()
}

func jaegerPID(s *stack) int {
	for _, p := range s.procs {
		if p.Name == "jaeger" {
			return p.PID()
		}
	}
	return 0
}

func dockerEnv(env []string) string {
	var b strings.Builder
	for i, kv := range env {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("-e " + kv)
	}
	return b.String()
}

// waitPrometheus waits until Prometheus has scraped the closing of every
// invocation, then prints the token totals it holds.
func waitPrometheus(ctx context.Context, promAddr string, invocations int, w io.Writer) error {
	step(w, "waiting for Prometheus to scrape the invocation metrics")
	const closed = `sum(agentledger_invocations_total)`
	err := testbin.Poll(ctx, 500*time.Millisecond, func() (bool, string, error) {
		s, err := testbin.PromQuery(ctx, promAddr, closed)
		if err != nil {
			return false, "", err
		}
		if len(s) != 1 {
			return false, closed + " has no data yet", nil
		}
		return s[0].Value >= float64(invocations), fmt.Sprintf("%s = %v", closed, s[0].Value), nil
	})
	if err != nil {
		return fmt.Errorf("prometheus: %w", err)
	}
	s, err := testbin.PromQuery(ctx, promAddr, `sum by (gen_ai_token_type) (agentledger_invocation_tokens_total)`)
	if err != nil {
		return err
	}
	slices.SortFunc(s, func(a, b testbin.Sample) int {
		return strings.Compare(a.Labels["gen_ai_token_type"], b.Labels["gen_ai_token_type"])
	})
	fmt.Fprint(w, "Prometheus token totals:")
	for _, x := range s {
		fmt.Fprintf(w, " %s=%v", x.Labels["gen_ai_token_type"], x.Value)
	}
	fmt.Fprintln(w)
	return nil
}
