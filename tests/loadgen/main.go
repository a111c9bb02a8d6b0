// Command loadgen sends a realistic agent workload over OTLP/gRPC to the
// otelcol-agentledger collector and measures it: spans per second end to
// end, and for the invocation pipeline the finalize latency (from the send
// of an invocation's last span to the arrival of its closing summary) and
// whether every summary is final with the workload's exact totals.
//
// The workload is 10,000 invocations by default (a root, five model calls
// with usage, five tool calls; a quarter also start a background job
// followed up by a continuation in its own trace, with one more model
// call after the result): about 117,000 spans, sent in the order they
// end, shuffled within a window, 2% of them twice, in batches of 500 by
// four concurrent exporters.
//
// The collector exports everything it outputs back to the load
// generator's OTLP/gRPC receiver (and to a file). With -collector the load
// generator runs the binary itself, three times back to back per round:
// the invocation pipeline (invocation.yaml), the pass-through pipeline
// (passthrough.yaml, the same without the processor), and the
// pass-through pipeline sent the workload plus the summaries the first
// invocation run produced (passthrough+summaries: the same output as the
// invocation pipeline, without making it), and prints the ratios of the
// invocation throughput to the two others. The first is the issue's
// figure; the second isolates the processor's own work from the cost of
// exporting its summaries. -pending-delay sets the invocation pipeline's
// pending_delay (default: the processor's, 5s: a pending summary only for
// an invocation still open 5s after its root arrived, or at once when it
// owes a background job's work; 0s: a pending as soon as the root
// arrives), and the output says which delay was used.
// With -storage every round also runs the invocation pipeline with the
// ledger's state in file_storage (storage.yaml, as the shipped configs
// keep it; -fsync sets its fsync), prints its ratios to memory mode and
// pass-through, its storage directory's size, and what a restart on that
// directory costs (time until ready, the first batch after it, the size
// once the ledger and file_storage compacted).
// With -sweep, instead of rounds, it measures every combination of
// sizes, job shares and export workers (-sweep "invocations=10000,100000
// jobs=0,0.25,1 workers=1,8"), each against a pass-through run of the
// same workload with the same workers, and prints a Markdown table, a row
// per combination: spans/s, ratio to pass-through, p99 last span ->
// final, each collector's peak resident set (VmHWM of the process it
// started) and the count final with exact totals (with -storage, a row
// for the storage pipeline too). The sweep streams its workloads: each
// run generates the spans again from -seed, a window and a batch at a
// time, and what stays in memory is a fixed-size record per invocation
// (what its summary must say, what came back), so 1,000,000 invocations
// take a few hundred MiB.
// With -profile, contrib's pprof extension in the collector saves each
// run's CPU, allocation and mutex profiles:
//
//	go -C tests run ./loadgen -collector ../.bin/otelcol-agentledger
//	go -C tests run ./loadgen -collector ../.bin/otelcol-agentledger -pending-delay 1s
//	go -C tests run ./loadgen -collector ../.bin/otelcol-agentledger -storage -rounds 3
//	go -C tests run ./loadgen -collector ../.bin/otelcol-agentledger -profile /tmp/prof
//	go -C tests run ./loadgen -collector ../.bin/otelcol-agentledger -sweep "invocations=10000,100000 jobs=0,0.25,1 workers=1,8"
//
// Without -collector it measures a collector already running with one of
// those configs, started with LOADGEN_RECEIVER_ENDPOINT set to -listen:
//
//	LOADGEN_RECEIVER_ENDPOINT=127.0.0.1:4320 .bin/otelcol-agentledger --config tests/loadgen/invocation.yaml &
//	go -C tests run ./loadgen -otlp 127.0.0.1:4317 -listen 127.0.0.1:4320 -pipeline invocation
//
// It exits non-zero when a run fails or a summary is missing, not final or
// wrong.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"
)

var (
	//go:embed invocation.yaml
	invocationConfig []byte
	//go:embed passthrough.yaml
	passthroughConfig []byte
	//go:embed storage.yaml
	storageConfig []byte

	configs = map[pipeline][]byte{pipelineInvocation: invocationConfig, pipelinePassthrough: passthroughConfig, pipelineStorage: storageConfig}
)

type options struct {
	collector string
	rounds    int
	otlp      string
	listen    string
	pipeline  string
	workers   int
	timeout   time.Duration
	workDir   string
	// profileDir, with collector, is where each run's profiles go ("":
	// none); featureGates is passed to the collector's --feature-gates.
	profileDir   string
	featureGates string
	// pendingDelay, with collector, is the invocation pipeline's
	// pending_delay (LOADGEN_PENDING_DELAY in invocation.yaml); nil
	// leaves the processor's default.
	pendingDelay *time.Duration
	// storage, with collector, adds the storage pipeline (storage.yaml)
	// to every round; fsync sets its file_storage's fsync.
	storage, fsync bool
	// sweep, with collector, is -sweep's value: a table of runs instead
	// of rounds ("": none).
	sweep    string
	workload workloadConfig
}

func main() {
	var o options
	flag.StringVar(&o.collector, "collector", "", "otelcol-agentledger binary to run with both pipelines, back to back (default: measure a running collector)")
	flag.IntVar(&o.rounds, "rounds", 1, "with -collector: pairs of runs, alternating which pipeline goes first")
	flag.StringVar(&o.otlp, "otlp", "127.0.0.1:4317", "without -collector: the running collector's OTLP/gRPC endpoint")
	flag.StringVar(&o.listen, "listen", "127.0.0.1:4320", "without -collector: where to receive what the collector exports (its LOADGEN_RECEIVER_ENDPOINT)")
	flag.StringVar(&o.pipeline, "pipeline", string(pipelineInvocation), "without -collector: the running collector's pipeline, invocation, invocation+storage or passthrough")
	flag.IntVar(&o.workers, "workers", 4, "concurrent export calls")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "longest wait for a run")
	flag.StringVar(&o.workDir, "dir", "", "with -collector: directory for the configs, logs and traces files (default: a new temporary one)")
	flag.StringVar(&o.profileDir, "profile", "", "with -collector: run contrib's pprof extension in the collector and save each run's CPU profile (its whole life), allocations and mutex contention into this directory as <pipeline>-round<N>.{cpu,allocs,mutex}.pprof")
	flag.Func("pending-delay", "with -collector: the invocation processor's pending_delay (default: the processor's, "+processorPendingDelay+"; 0s: a pending summary as soon as the root arrives with obligations open)", func(s string) error {
		d, err := time.ParseDuration(s)
		o.pendingDelay = &d
		return err
	})
	flag.BoolVar(&o.storage, "storage", false, "with -collector: also run the invocation pipeline with file_storage (storage.yaml) in every round, and print its ratios to memory mode and pass-through and its storage directory's size")
	flag.BoolVar(&o.fsync, "fsync", false, "with -storage: file_storage with fsync: true")
	flag.StringVar(&o.featureGates, "feature-gates", "", "with -collector: the collector's --feature-gates, e.g. +pdata.useProtoPooling")
	flag.StringVar(&o.sweep, "sweep", "", "with -collector: measure every combination of space-separated key=list pairs, e.g. \"invocations=10000,100000,1000000 jobs=0,0.25,1 workers=1,8\" (a key left out takes -invocations, -jobs or -workers), each against a pass-through run of the same workload and workers, and print a table: spans/s, ratio, p99 last span -> final, collector RSS peak, final & exact count")
	flag.IntVar(&o.workload.invocations, "invocations", 10000, "invocations to send")
	flag.Float64Var(&o.workload.jobs, "jobs", 0.25, "share of invocations with a background job and a continuation")
	flag.Float64Var(&o.workload.duplicates, "duplicates", 0.02, "share of spans sent twice")
	flag.IntVar(&o.workload.window, "window", 2000, "spans within which the order is shuffled")
	flag.IntVar(&o.workload.batch, "batch", 500, "spans per export request")
	flag.Uint64Var(&o.workload.seed, "seed", 1, "seed of the workload")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// run generates the workload and measures it as o says, printing to out.
func run(ctx context.Context, o options, out io.Writer) error {
	if o.workload.invocations <= 0 || o.workload.batch <= 0 || o.workers <= 0 {
		return errors.New("-invocations, -batch and -workers must be positive")
	}
	if o.pendingDelay != nil && *o.pendingDelay < 0 {
		return errors.New("-pending-delay must not be negative")
	}
	if o.pendingDelay != nil && o.collector == "" {
		return errors.New("-pending-delay needs -collector: start a running collector with LOADGEN_PENDING_DELAY instead")
	}
	if (o.storage || o.fsync) && o.collector == "" {
		return errors.New("-storage and -fsync need -collector: start a running collector with storage.yaml instead")
	}
	if o.fsync && !o.storage {
		return errors.New("-fsync needs -storage")
	}
	var spec sweepSpec
	if o.sweep != "" {
		if o.collector == "" {
			return errors.New("-sweep needs -collector")
		}
		var err error
		if spec, err = parseSweep(o.sweep, sweepSpec{invocations: []int{o.workload.invocations}, jobs: []float64{o.workload.jobs}, workers: []int{o.workers}}); err != nil {
			return err
		}
	}
	if o.sweep != "" && o.profileDir != "" {
		return errors.New("-sweep does not take -profile")
	}
	var w *workload
	if o.sweep == "" {
		w = newWorkload(o.workload)
		fmt.Fprintf(out, "workload: %d invocations, %d spans (%d sends with duplicates) in %d requests of up to %d\n",
			len(w.want), w.spans, w.sends, w.nRequests, o.workload.batch)
	}

	if o.collector == "" {
		rec, err := startReceiver(o.listen)
		if err != nil {
			return err
		}
		defer rec.stop()
		p := pipeline(o.pipeline)
		if _, ok := configs[p]; !ok {
			return fmt.Errorf("unknown -pipeline %q", o.pipeline)
		}
		ctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		res, err := measure(ctx, p, o.otlp, rec, w, o.workers)
		if err != nil {
			return err
		}
		report(out, res)
		return verdict(res)
	}

	fmt.Fprintf(out, "invocation pipeline: pending_delay %v\n", o.pendingDelayName())
	if o.storage {
		fmt.Fprintf(out, "storage pipeline: file_storage, fsync %t\n", o.fsync)
	}
	if o.profileDir != "" {
		if err := os.MkdirAll(o.profileDir, 0o755); err != nil {
			return err
		}
	}
	dir := o.workDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "loadgen-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	if o.sweep != "" {
		return runSweep(ctx, o, spec, dir, out)
	}
	var ratios, isolated, durable, durablePass []float64
	for round := range max(o.rounds, 1) {
		// The invocation run of the first round comes first: the echo
		// runs send its summaries.
		order := []pipeline{pipelineInvocation, pipelinePassthrough, pipelineEcho}
		if o.storage {
			order = []pipeline{pipelineInvocation, pipelineStorage, pipelinePassthrough, pipelineEcho}
		}
		if round%2 == 1 {
			slices.Reverse(order)
		}
		byPipeline := map[pipeline]result{}
		for _, p := range order {
			ctx, cancel := context.WithTimeout(ctx, o.timeout)
			res, err := collectorRun(ctx, o, dir, p, round, w)
			cancel()
			if err != nil {
				return err
			}
			report(out, res)
			if err := verdict(res); err != nil {
				return err
			}
			byPipeline[p] = res
		}
		inv := byPipeline[pipelineInvocation].spansPerSecond()
		pass := byPipeline[pipelinePassthrough].spansPerSecond()
		ratio := inv / pass
		ratios = append(ratios, ratio)
		iso := inv / byPipeline[pipelineEcho].spansPerSecond()
		isolated = append(isolated, iso)
		fmt.Fprintf(out, "round %d (pending_delay %v): invocation / passthrough throughput = x%.2f; invocation / passthrough+summaries = x%.2f\n", round+1, o.pendingDelayName(), ratio, iso)
		if o.storage {
			st := byPipeline[pipelineStorage]
			durable = append(durable, st.spansPerSecond()/inv)
			durablePass = append(durablePass, st.spansPerSecond()/pass)
			fmt.Fprintf(out, "round %d (fsync %t): invocation+storage / invocation (memory) = x%.2f; invocation+storage / passthrough = x%.2f; p99 last span -> final %v (memory %v)\n",
				round+1, o.fsync, durable[round], durablePass[round],
				st.percentile(0.99).Round(time.Microsecond), byPipeline[pipelineInvocation].percentile(0.99).Round(time.Microsecond))
		}
	}
	if len(ratios) > 1 {
		medians := []struct {
			name   string
			ratios []float64
		}{{"invocation / passthrough", ratios}, {"invocation / passthrough+summaries", isolated}}
		if o.storage {
			medians = append(medians, struct {
				name   string
				ratios []float64
			}{"invocation+storage / invocation (memory)", durable}, struct {
				name   string
				ratios []float64
			}{"invocation+storage / passthrough", durablePass})
		}
		for _, r := range medians {
			slices.Sort(r.ratios)
			fmt.Fprintf(out, "%s, median of %d rounds (pending_delay %v): x%.2f (min x%.2f, max x%.2f)\n", r.name, len(r.ratios), o.pendingDelayName(), r.ratios[len(r.ratios)/2], r.ratios[0], r.ratios[len(r.ratios)-1])
		}
	}
	return nil
}

// verdict fails a run whose summaries are not all final with exact
// totals.
func verdict(r result) error {
	if len(r.wrong) > 0 {
		return fmt.Errorf("%s: %d invocations not final with the workload's totals, first: %s", r.pipeline, len(r.wrong), r.wrong[0])
	}
	return nil
}

// processorPendingDelay is the invocation processor's default
// pending_delay, which invocation.yaml and storage.yaml repeat for an
// unset LOADGEN_PENDING_DELAY.
const processorPendingDelay = "5s"

// pendingDelayName is the invocation pipeline's pending_delay as the
// output names it.
func (o options) pendingDelayName() string {
	if o.pendingDelay == nil {
		return processorPendingDelay + " (the processor's default)"
	}
	return o.pendingDelay.String()
}
