// Command demo is what `make demo` runs: it starts the otelcol-agentledger
// distribution on free loopback ports, runs the reference agent
// (examples/shellagent) through every scenario with its spans sent to the
// collector, waits for each invocation's summary, prints one row per
// invocation, and exits non-zero when a summary is missing or disagrees with
// what the agent counted in process.
//
// Without -view the collector runs collector-config/local.yaml and the
// summaries are read from its file exporter; everything started is stopped
// by PID at the end. Either way the demo prints the URL of the collector's
// invocation status page (the invocation_status extension). With -view it
// also starts Prometheus, runs collector-config/jaeger.yaml with view.yaml
// over it (the metrics, and the spans to the file; no Jaeger), runs the
// example PromQL queries it prints against Prometheus (showing what each
// returned), writes Grafana provisioning for the ports it chose into the
// work directory (grafana/), and leaves the collector and Prometheus
// running for the user to browse. With -view and -jaeger it also starts
// that Jaeger, runs jaeger.yaml as is and reads the summaries back from
// Jaeger; the status page links to a Jaeger UI only when
// AGENTLEDGER_JAEGER_UI_URL names one (a source-built Jaeger has none).
//
// Every address can be overridden with the environment variables the
// configs read (AGENTLEDGER_OTLP_GRPC_ENDPOINT, JAEGER_QUERY_HTTP_ENDPOINT,
// ...; see collector-config/*.yaml), plus PROMETHEUS_WEB_ENDPOINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/agentledger/agentledger/internal/testbin"
)

type options struct {
	collector  string
	agent      string
	view       bool
	jaeger     string
	prometheus string
	timeout    time.Duration
	scenario   string
	// workDir holds logs, the traces file and Prometheus's storage; empty
	// means a new directory under the system's temporary directory.
	workDir string
	// browse, when set, is called once every summary agreed, while the
	// collector still runs, with the invocation status page's URL and the
	// collector's OTLP/gRPC endpoint (tests look at the page with it).
	browse func(ctx context.Context, pageURL, otlpGRPC string, results []testbin.AgentInvocation) error
	// viewed, when set with view, is called with what runs once the help
	// is printed, before the processes are left running (or stopped, with
	// stopView).
	viewed func(ctx context.Context, v viewInfo) error
	// stopView stops Jaeger, Prometheus and the collector at the end of a
	// -view run too (tests).
	stopView bool
}

func main() {
	var o options
	flag.StringVar(&o.collector, "collector", "", "otelcol-agentledger binary (default: build it into .bin/)")
	flag.StringVar(&o.agent, "agent", "", "examples/shellagent binary (default: build it into the work directory)")
	flag.BoolVar(&o.view, "view", false, "also start Prometheus, use collector-config/jaeger.yaml with view.yaml, and leave them running")
	flag.StringVar(&o.jaeger, "jaeger", "", "with -view, also start this Jaeger v2 binary and use collector-config/jaeger.yaml as is")
	flag.StringVar(&o.prometheus, "prometheus", "", "Prometheus binary for -view (default /usr/bin/prometheus)")
	flag.DurationVar(&o.timeout, "timeout", 3*time.Minute, "how long to wait for the agent and for every summary")
	flag.StringVar(&o.scenario, "scenario", "", "run one shellagent scenario instead of all")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// stack is what the demo started; stop ends it by PID.
type stack struct {
	procs []*testbin.Process
}

func (s *stack) add(p *testbin.Process) {
	if p != nil {
		s.procs = append(s.procs, p)
	}
}

func (s *stack) stop(w io.Writer) {
	for _, p := range slices.Backward(s.procs) {
		if err := p.Stop(testbin.StopTimeout); err != nil {
			fmt.Fprintf(w, "stop %s: %v\n", p.Name, err)
		}
	}
}

func step(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "==> "+format+"\n", args...)
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func run(ctx context.Context, o options, w io.Writer) (err error) {
	root, err := testbin.RepoRoot()
	if err != nil {
		return err
	}
	work := o.workDir
	if work == "" {
		if work, err = os.MkdirTemp("", "agentledger-demo-"); err != nil {
			return fmt.Errorf("work directory: %w", err)
		}
	}
	step(w, "work directory %s", work)

	if o.collector == "" {
		o.collector = filepath.Join(root, ".bin", "otelcol-agentledger")
		step(w, "building the collector distribution into %s (first build takes minutes; packages are listed as they compile)", o.collector)
		if err := testbin.GoBuild(ctx, "./cmd/otelcol-agentledger", o.collector, os.Stderr); err != nil {
			return err
		}
	}
	agentBin := o.agent
	if agentBin == "" {
		agentBin = filepath.Join(work, "shellagent")
		step(w, "building examples/shellagent")
		if err := testbin.GoBuild(ctx, "./examples/shellagent", agentBin, os.Stderr); err != nil {
			return err
		}
	}

	addrs, err := testbin.NewCollectorAddrs(work)
	if err != nil {
		return err
	}
	addrs.OTLPGRPC = envOr("AGENTLEDGER_OTLP_GRPC_ENDPOINT", addrs.OTLPGRPC)
	addrs.OTLPHTTP = envOr("AGENTLEDGER_OTLP_HTTP_ENDPOINT", addrs.OTLPHTTP)
	addrs.Health = envOr("AGENTLEDGER_HEALTH_ENDPOINT", addrs.Health)
	if p := os.Getenv("AGENTLEDGER_TELEMETRY_PORT"); p != "" {
		addrs.Telemetry = "127.0.0.1:" + p
	}
	addrs.Prometheus = envOr("AGENTLEDGER_PROMETHEUS_ENDPOINT", addrs.Prometheus)
	addrs.TracesFile = envOr("AGENTLEDGER_TRACES_FILE", addrs.TracesFile)
	addrs.Status = envOr("AGENTLEDGER_STATUS_ENDPOINT", addrs.Status)

	var s stack
	defer func() {
		if !o.view || o.stopView || err != nil {
			s.stop(w)
		}
	}()
	readyCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	var jaeger testbin.JaegerAddrs
	var promAddr string
	configs := []string{"local.yaml"}
	withJaeger := o.view && o.jaeger != ""
	switch {
	case withJaeger:
		configs = []string{"jaeger.yaml"}
	case o.view:
		configs = []string{"jaeger.yaml", "view.yaml"}
	}
	if o.view {
		if jaeger, promAddr, err = startViewers(readyCtx, o, root, work, &addrs, &s, w); err != nil {
			return err
		}
	}
	var configPaths []string
	for _, c := range configs {
		configPaths = append(configPaths, filepath.Join(root, "collector-config", c))
	}
	step(w, "starting %s with collector-config/%s (OTLP gRPC %s)", filepath.Base(o.collector), strings.Join(configs, " and "), addrs.OTLPGRPC)
	col, err := testbin.StartCollectorConfigs(readyCtx, o.collector, configPaths, addrs, filepath.Join(work, "collector.log"))
	s.add(col)
	if err != nil {
		return err
	}
	if o.view {
		// Now that the collector is up, Prometheus can scrape it.
		if err := startPrometheus(readyCtx, o, root, work, addrs, promAddr, &s, w); err != nil {
			return err
		}
	}

	args := []string{"-otlp", addrs.OTLPGRPC}
	if o.scenario != "" {
		args = append(args, "-scenario", o.scenario)
	} else {
		args = append(args, "-all")
	}
	step(w, "running shellagent %s", strings.Join(args, " "))
	runCtx, cancelRun := context.WithTimeout(ctx, o.timeout)
	defer cancelRun()
	started := time.Now()
	results, err := testbin.RunAgent(runCtx, agentBin, os.Stderr, args...)
	if err != nil {
		return err
	}
	if len(results) == 0 {
		return errors.New("shellagent printed no invocations")
	}

	step(w, "waiting for %d invocation summaries (at most %v)", len(results), o.timeout)
	summaries, waitErr := waitSummaries(runCtx, withJaeger, addrs.TracesFile, jaeger.QueryHTTP, started, results)
	bad := report(w, results, summaries)
	var view viewInfo
	if o.view {
		view = viewInfo{Addrs: addrs, Jaeger: jaeger, Prometheus: promAddr, InvocationID: exampleInvocation(results)}
		if waitErr == nil {
			if err := waitPrometheus(runCtx, promAddr, len(results), w); err != nil {
				return err
			}
			step(w, "running the example queries against Prometheus")
			qctx, cancel := context.WithTimeout(runCtx, 30*time.Second)
			view.Queries = checkQueries(qctx, promAddr)
			cancel()
		}
		if view.GrafanaDir, err = writeGrafana(work, promAddr, jaeger.QueryHTTP); err != nil {
			return err
		}
	}
	pageURL := "http://" + addrs.Status + "/"
	timelineURL := pageURL + "invocations/" + url.PathEscape(backgroundInvocation(results))
	view.TimelineURL = timelineURL
	if o.browse != nil && waitErr == nil && bad == 0 {
		if err := o.browse(runCtx, pageURL, addrs.OTLPGRPC, results); err != nil {
			return fmt.Errorf("status page: %w", err)
		}
	}
	if o.view {
		printViewHelp(w, root, view, &s)
		if o.viewed != nil {
			if err := o.viewed(runCtx, view); err != nil {
				return err
			}
		}
	} else {
		fmt.Fprintf(w, "\ncollector log (debug exporter output): %s\nspans and summaries (OTLP JSON lines): %s\n", col.LogPath, addrs.TracesFile)
		fmt.Fprintf(w, "invocation status page: %s (stopped with the demo; make demo VIEW=1 leaves it up)\n", pageURL)
		fmt.Fprintf(w, "timeline of one background invocation: %s\n", timelineURL)
	}
	switch {
	case waitErr != nil:
		return fmt.Errorf("summaries: %w", waitErr)
	case bad > 0:
		return fmt.Errorf("%d of %d invocations have a missing or disagreeing summary", bad, len(results))
	}
	fmt.Fprintf(w, "\nall %d summaries agree with the agent's own counts\n", len(results))
	return nil
}

// exampleInvocation picks the invocation the help's examples name: one
// with a continuation (its traces are two), else the first.
func exampleInvocation(results []testbin.AgentInvocation) string {
	for _, r := range results {
		if r.Continuations > 0 {
			return r.InvocationID
		}
	}
	return results[0].InvocationID
}

// backgroundInvocation picks the invocation whose timeline the demo
// prints: the background scenario's, else one with a continuation.
func backgroundInvocation(results []testbin.AgentInvocation) string {
	for _, r := range results {
		if r.Scenario == "background" {
			return r.InvocationID
		}
	}
	return exampleInvocation(results)
}

// waitSummaries polls the file exporter output (or Jaeger, with fromJaeger) until
// every invocation the agent reported has a closing summary whose status is
// the one the agent expects.
func waitSummaries(ctx context.Context, fromJaeger bool, tracesFile, jaegerQuery string, since time.Time, results []testbin.AgentInvocation) (map[string]testbin.Summary, error) {
	var closed map[string]testbin.Summary
	err := testbin.Poll(ctx, 200*time.Millisecond, func() (bool, string, error) {
		var sums []testbin.Summary
		var err error
		if fromJaeger {
			sums, err = testbin.JaegerSummaries(ctx, jaegerQuery, since.Add(-time.Minute), time.Now().Add(time.Minute))
		} else {
			sums, err = testbin.ReadSummaries(tracesFile)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, "", err
		}
		closed = testbin.Closed(sums)
		var missing []string
		for _, r := range results {
			if s, ok := closed[r.InvocationID]; !ok || s.Status != r.Status {
				missing = append(missing, r.InvocationID)
			}
		}
		return len(missing) == 0, fmt.Sprintf("no matching summary yet for %s", strings.Join(missing, ", ")), nil
	})
	return closed, err
}

// report prints one row per invocation and returns how many are missing a
// summary or disagree with the agent.
func report(w io.Writer, results []testbin.AgentInvocation, closed map[string]testbin.Summary) int {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "invocation\tscenario\tstatus\tinput\toutput\tafter-result in\tafter-result out\tcontinuations\ttime to final\tanomalies\tcheck\t")
	bad := 0
	var problems []string
	for _, r := range results {
		s, ok := closed[r.InvocationID]
		if !ok {
			bad++
			fmt.Fprintf(tw, "%s\t%s\tno summary\t\t\t\t\t\t\t\tMISSING\t\n", r.InvocationID, r.Scenario)
			continue
		}
		check := "ok"
		if m := testbin.Mismatches(r, s); len(m) > 0 {
			bad++
			check = "DIFFERS"
			problems = append(problems, fmt.Sprintf("%s (%s): %s", r.InvocationID, r.Scenario, strings.Join(m, "; ")))
		}
		ttf := "-"
		if s.HasTimeToFinal {
			ttf = (time.Duration(s.TimeToFinalMS) * time.Millisecond).String()
		}
		// Anomalies (followup_interrupted:<job>, ...) are the summary's
		// notes on a count that is still exact; "-" when none.
		anomalies := "-"
		if len(s.Anomalies) > 0 {
			anomalies = strings.Join(s.Anomalies, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t\n", r.InvocationID, r.Scenario, s.Status,
			s.InputTokens, s.OutputTokens, s.AfterResultInputTokens, s.AfterResultOutputTokens, s.Continuations, ttf, anomalies, check)
	}
	_ = tw.Flush()
	for _, p := range problems {
		fmt.Fprintln(w, "  ", p)
	}
	return bad
}
