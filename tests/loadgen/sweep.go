package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// sweepSpec is what -sweep asks for: every combination of its sizes, job
// shares and export workers is one row of the table.
type sweepSpec struct {
	invocations []int
	jobs        []float64
	workers     []int
}

// parseSweep reads -sweep's value, space-separated key=list pairs such as
// "invocations=10000,100000 jobs=0,0.25,1 workers=1,8". A key left out
// takes its single value from def (the -invocations, -jobs and -workers
// flags).
func parseSweep(s string, def sweepSpec) (sweepSpec, error) {
	spec := def
	seen := map[string]bool{}
	for _, field := range strings.Fields(s) {
		key, list, ok := strings.Cut(field, "=")
		if !ok || list == "" {
			return sweepSpec{}, fmt.Errorf("-sweep: %q is not key=v1,v2,...", field)
		}
		if seen[key] {
			return sweepSpec{}, fmt.Errorf("-sweep: %s given twice", key)
		}
		seen[key] = true
		values := strings.Split(list, ",")
		switch key {
		case "invocations", "workers":
			var ns []int
			for _, v := range values {
				n, err := strconv.Atoi(v)
				if err != nil || n <= 0 {
					return sweepSpec{}, fmt.Errorf("-sweep: %s %q is not a positive integer", key, v)
				}
				ns = append(ns, n)
			}
			if key == "invocations" {
				spec.invocations = ns
			} else {
				spec.workers = ns
			}
		case "jobs":
			spec.jobs = nil
			for _, v := range values {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil || f < 0 || f > 1 {
					return sweepSpec{}, fmt.Errorf("-sweep: jobs %q is not a share between 0 and 1", v)
				}
				spec.jobs = append(spec.jobs, f)
			}
		default:
			return sweepSpec{}, fmt.Errorf("-sweep: unknown key %q (invocations, jobs, workers)", key)
		}
	}
	if len(spec.invocations) == 0 || len(spec.jobs) == 0 || len(spec.workers) == 0 {
		return sweepSpec{}, errors.New("-sweep: no invocations, jobs or workers to sweep")
	}
	return spec, nil
}

// sweepRow is one measured combination of a pipeline that summarises,
// against the pass-through run of the same workload and workers.
type sweepRow struct {
	pipeline    pipeline
	invocations int
	jobs        float64
	workers     int
	spans       int
	// spansPerSecond is the row's pipeline; passthrough the pass-through
	// run's, on the same workload with the same workers.
	spansPerSecond, passthrough float64
	p99                         time.Duration
	// rssPeak and passRSSPeak are the collectors' VmHWM in bytes (0: not
	// read).
	rssPeak, passRSSPeak int64
	final, wrong         int
	// load is the 1-minute load average before the pass-through run and
	// after the row's run.
	loadBefore, loadAfter string
	elapsed               time.Duration
}

// sweepHeader is the table's head, in Markdown so that it pastes into
// docs/performance.md as printed.
const sweepHeader = "| invocations | jobs | workers | pipeline | spans | spans/s | pass-through spans/s | ratio | p99 last span → final | RSS peak | pass-through RSS peak | final & exact | load 1m | row took |\n" +
	"|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n"

// format writes r as one line of the table.
func (r sweepRow) format(out io.Writer) {
	ratio := "-"
	if r.passthrough > 0 {
		ratio = fmt.Sprintf("x%.2f", r.spansPerSecond/r.passthrough)
	}
	correct := fmt.Sprintf("%d/%d", r.final, r.invocations)
	if r.wrong > 0 || r.final != r.invocations {
		correct += fmt.Sprintf(" **%d wrong**", r.wrong)
	}
	fmt.Fprintf(out, "| %d | %g%% | %d | %s | %d | %.0f | %.0f | %s | %v | %s | %s | %s | %s → %s | %v |\n",
		r.invocations, r.jobs*100, r.workers, r.pipeline, r.spans, r.spansPerSecond, r.passthrough, ratio,
		r.p99.Round(time.Millisecond), mib(r.rssPeak), mib(r.passRSSPeak), correct,
		firstField(r.loadBefore), firstField(r.loadAfter), r.elapsed.Round(time.Second))
}

func mib(b int64) string {
	if b <= 0 {
		return "?"
	}
	return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
}

func firstField(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return "?"
}

// peakRSS reads the high-water mark of the resident set (VmHWM) of
// process pid from /proc, in bytes; 0 where the system does not say.
func peakRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	return parseVmHWM(b)
}

// parseVmHWM finds "VmHWM:  1234 kB" in a /proc/<pid>/status.
func parseVmHWM(status []byte) int64 { return parseMeminfoField(status, "VmHWM:") }

// parseMeminfoField finds "<field>  1234 kB" in a /proc status or
// meminfo file and returns it in bytes; 0 when absent or not in kB.
func parseMeminfoField(b []byte, field string) int64 {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), field)
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0
		}
		return n << 10
	}
	return 0
}

// workloadBytesPerInvocation is about what the load generator holds per
// invocation of a sweep's workload while it runs: the workload is
// streamed (a window of spans and one batch at a time), so what grows
// with the size is an expected record (32 B) and a summary record
// (56 B) per invocation, the latencies (8 B), and the garbage collector's
// headroom over them. Measured: 296 MiB peak resident (VmHWM) for a
// sweep of 1,000,000 invocations with 25% jobs, 2026-12-06; 384 B an
// invocation covers that with room.
const workloadBytesPerInvocation = 384

// fitsInMemory says why a sweep of at most n invocations does not fit in
// available bytes of memory (three quarters of it at most), or nil.
func fitsInMemory(n int, available int64) error {
	need := int64(n) * workloadBytesPerInvocation
	if available > 0 && need > available/4*3 {
		return fmt.Errorf("-sweep: %d invocations need about %.1f MiB in the load generator (%d B each: a record of what each invocation's summary must say and of what came back), more than three quarters of the %.1f MiB available",
			n, float64(need)/(1<<20), workloadBytesPerInvocation, float64(available)/(1<<20))
	}
	return nil
}

// memAvailable reads MemAvailable from /proc/meminfo in bytes; 0 where
// the system does not say.
func memAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	return parseMeminfoField(b, "MemAvailable:")
}

// runSweep measures every combination of spec, each against a
// pass-through run of the same workload with the same workers, and
// prints the table, one row as each combination ends. The workloads are
// streamed: each run generates its spans again from the seed, and only
// the per-invocation records stay in memory. It fails, after the
// whole table, when a summary was missing, not final or wrong.
func runSweep(ctx context.Context, o options, spec sweepSpec, dir string, out io.Writer) error {
	if err := fitsInMemory(slices.Max(spec.invocations), memAvailable()); err != nil {
		return err
	}
	pipelines := []pipeline{pipelineInvocation}
	if o.storage {
		pipelines = append(pipelines, pipelineStorage)
	}
	fmt.Fprintf(out, "sweep: invocations %v, jobs %v, workers %v; pipelines passthrough (base), %v; pending_delay %v\n",
		spec.invocations, spec.jobs, spec.workers, pipelines, o.pendingDelayName())
	var table bytes.Buffer
	table.WriteString(sweepHeader)
	var failed []string
	round := 0
	for _, n := range spec.invocations {
		for _, jobs := range spec.jobs {
			cfg := o.workload
			cfg.invocations, cfg.jobs = n, jobs
			built := time.Now()
			w := newStreamedWorkload(cfg)
			// An empty echo: the sweep has no passthrough+summaries run,
			// so the invocation runs do not capture their summaries.
			w.echo = &echoRequests{}
			fmt.Fprintf(out, "workload: %d invocations, jobs %g, %d spans (%d sends) in %d requests, planned (streamed) in %v\n",
				n, jobs, w.spans, w.sends, w.nRequests, time.Since(built).Round(time.Millisecond))
			for _, workers := range spec.workers {
				ro := o
				ro.workers = workers
				began := time.Now()
				run := func(p pipeline) (result, error) {
					rctx, cancel := context.WithTimeout(ctx, o.timeout)
					defer cancel()
					res, err := collectorRun(rctx, ro, dir, p, round, w)
					if err != nil {
						return res, fmt.Errorf("%d invocations, jobs %g, workers %d: %w", n, jobs, workers, err)
					}
					report(out, res)
					return res, nil
				}
				pass, err := run(pipelinePassthrough)
				if err != nil {
					return err
				}
				for _, p := range pipelines {
					res, err := run(p)
					if err != nil {
						return err
					}
					row := sweepRow{pipeline: p, invocations: n, jobs: jobs, workers: workers, spans: res.spans,
						spansPerSecond: res.spansPerSecond(), passthrough: pass.spansPerSecond(), p99: res.percentile(0.99),
						rssPeak: res.rssPeak, passRSSPeak: pass.rssPeak, final: res.final, wrong: len(res.wrong),
						loadBefore: pass.loadBefore, loadAfter: res.loadAfter, elapsed: time.Since(began)}
					var line bytes.Buffer
					row.format(&line)
					table.Write(line.Bytes())
					fmt.Fprintf(out, "row: %s", line.String())
					if err := verdict(res); err != nil {
						failed = append(failed, fmt.Sprintf("%d invocations, jobs %g, workers %d: %v", n, jobs, workers, err))
					}
				}
				round++
			}
		}
	}
	fmt.Fprintf(out, "load generator peak RSS (VmHWM, itself): %s\n", mib(peakRSS(os.Getpid())))
	fmt.Fprintf(out, "\n%s", table.String())
	if len(failed) > 0 {
		return errors.New(strings.Join(failed, "\n"))
	}
	return nil
}
