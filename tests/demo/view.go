package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/agentledger/agentledger/internal/testbin"
)

// jaegerRelease is the Jaeger v2 release built from the same sources as
// the v1.76.0 module tools/jaeger pins; its binaries and images embed the UI.
const jaegerRelease = "2.13.0"

// startViewers starts Jaeger (collector-config/jaeger-v2.yaml) and points
// the collector's Jaeger exporter at it. It also picks Prometheus's address;
// Prometheus itself starts after the collector.
func startViewers(ctx context.Context, o options, root, work string, addrs *testbin.CollectorAddrs, s *stack, w io.Writer) (testbin.JaegerAddrs, string, error) {
	if o.jaeger == "" {
		o.jaeger = filepath.Join(root, ".bin", "jaeger")
	}
	if o.prometheus == "" {
		o.prometheus = "/usr/bin/prometheus"
	}
	for _, bin := range []string{o.jaeger, o.prometheus} {
		if _, err := os.Stat(bin); err != nil {
			return testbin.JaegerAddrs{}, "", fmt.Errorf("%s missing (make jaeger prometheus): %w", bin, err)
		}
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

	promAddr, err := testbin.FreeAddr()
	if err != nil {
		return j, "", err
	}
	promAddr = envOr("PROMETHEUS_WEB_ENDPOINT", promAddr)

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

// printViewHelp tells the user where everything runs, what to look at, and
// how to stop it.
func printViewHelp(w io.Writer, root string, addrs testbin.CollectorAddrs, j testbin.JaegerAddrs, promAddr string, s *stack) {
	var pids []string
	fmt.Fprintln(w, "\nLeft running:")
	for _, p := range s.procs {
		fmt.Fprintf(w, "  %-20s pid %-7d log %s\n", p.Name, p.PID(), p.LogPath)
		pids = append(pids, fmt.Sprint(p.PID()))
	}
	fmt.Fprintf(w, `
Invocation status page (open and recently closed invocations, what each waits on)
  http://%[12]s/
  http://%[12]s/v1/invocations?status=pending&older_than=10m
  http://%[12]s/v1/invocations/<invocation id>
  http://%[12]s/v1/sessions/<session id>      (owes_work)

Jaeger (HTTP API; this source build has no UI, see below)
  http://%[1]s/api/v3/services
  http://%[1]s/api/traces?service=<service>&operation=invocation.summary&lookback=1h
  http://%[1]s/api/v3/traces/<trace id>      (keeps span links with their invocation.link attribute)

Prometheus  http://%[2]s/graph
  sum by (gen_ai_request_model, gen_ai_token_type) (agentledger_model_tokens_total)
  sum by (gen_ai_agent_name, gen_ai_token_type) (agentledger_invocation_tokens_total)
  sum by (gen_ai_token_type) (agentledger_invocation_after_result_tokens_total)
  sum by (invocation_status) (agentledger_invocations_total)
  histogram_quantile(0.95, sum by (le) (rate(agentledger_invocation_time_to_final_milliseconds_bucket[5m])))
  otelcol_processor_invocation_open_invocations
  (all metrics: docs/metrics.md)

Send your own agent's spans to the collector: OTLP gRPC %[3]s, OTLP HTTP http://%[4]s

The Jaeger UI: the release binaries and images of Jaeger v%[5]s embed it. Stop
the source build (kill %[6]d) and run the release with the same config:
  %[7]s ./jaeger --config %[8]s
or
  docker run --rm --network host %[9]s \
    -v %[10]s:/cfg jaegertracing/jaeger:%[5]s --config /cfg/jaeger-v2.yaml
then open http://%[1]s/search; the status page's trace links point there (release tarballs:
https://github.com/jaegertracing/jaeger/releases/tag/v%[5]s).

Stop everything: kill %[11]s
`, j.QueryHTTP, promAddr, addrs.OTLPGRPC, addrs.OTLPHTTP, jaegerRelease, jaegerPID(s),
		strings.Join(j.Env(), " "), filepath.Join(root, "collector-config", "jaeger-v2.yaml"),
		dockerEnv(j.Env()), filepath.Join(root, "collector-config"), strings.Join(pids, " "), addrs.Status)
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
