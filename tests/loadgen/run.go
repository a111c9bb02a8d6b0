package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/testbin"
)

// pipeline names a collector pipeline the load generator runs against.
type pipeline string

const (
	// pipelineInvocation is OTLP in, the invocation processor, file and
	// OTLP out (invocation.yaml): every invocation gets a summary.
	pipelineInvocation pipeline = "invocation"
	// pipelinePassthrough is the same without the processor
	// (passthrough.yaml): the base.
	pipelinePassthrough pipeline = "passthrough"
	// pipelineEcho is passthrough.yaml sent the workload plus the summaries
	// an invocation run of the same round (or an earlier one) produced,
	// byte for byte, spread over the requests: the collector writes the
	// same output as the invocation pipeline without making it, so the
	// ratio of invocation to echo isolates the processor's own work
	// (indexing, retained state, building summaries instead of decoding
	// them) from the cost of exporting summaries.
	pipelineEcho pipeline = "passthrough+summaries"
	// pipelineStorage is the invocation pipeline with the ledger's state
	// in file_storage (storage.yaml), as the shipped configs keep it: the
	// durable path, compared with pipelineInvocation (memory only).
	pipelineStorage pipeline = "invocation+storage"
)

// summarises reports whether p's collector runs the invocation processor,
// so that every invocation's closing summary is awaited and checked.
func (p pipeline) summarises() bool { return p == pipelineInvocation || p == pipelineStorage }

// config is the pipeline whose collector config p runs.
func (p pipeline) config() pipeline {
	if p == pipelineEcho {
		return pipelinePassthrough
	}
	return p
}

// result is what one run measured.
type result struct {
	pipeline pipeline
	// spans counts the spans sent, duplicates included; requests the
	// export requests carrying them.
	spans, requests int
	// accepted is from the first send until the collector had accepted
	// the last request; backAll until every span (and, for the invocation
	// pipeline, every closing summary) had come back to the receiver.
	accepted, backAll time.Duration
	// latencies are, per invocation, from the send of the request
	// carrying its last span to the arrival of its first closing summary
	// (invocation pipeline only), sorted.
	latencies []time.Duration
	final     int
	// wrong lists the invocations whose summary is not final with the
	// workload's exact totals.
	wrong   []string
	pending int
	// pendingDelay is the invocation pipeline's pending_delay as the load
	// generator set it; "" when it measured a running collector.
	pendingDelay string
	// load is the machine's load average before and after the run.
	loadBefore, loadAfter string
	// storage is, for pipelineStorage, the storage directory after the
	// collector stopped: its files' sizes and the disk blocks they hold;
	// restart what starting it again on that directory measured.
	storage *dirSize
	restart *restartFigures
	// rssPeak is, with -collector, the collector process's peak resident
	// set (VmHWM) in bytes, read just before it stopped; 0 when not read.
	rssPeak int64
}

// spansPerSecond is the end-to-end throughput: spans sent over the time
// until all of them (and the summaries) were back.
func (r result) spansPerSecond() float64 { return float64(r.spans) / r.backAll.Seconds() }

func (r result) percentile(p float64) time.Duration {
	if len(r.latencies) == 0 {
		return 0
	}
	i := int(p*float64(len(r.latencies))+0.5) - 1
	return r.latencies[min(max(i, 0), len(r.latencies)-1)]
}

// send exports the n requests that next returns to the collector at otlp
// with workers concurrent calls, in order; it returns when each got its
// answer, with the time each request was sent. A goroutine takes the
// requests from next a few ahead of the workers, so that a streamed
// workload is generated while the earlier requests are in flight.
func send(ctx context.Context, otlp string, n int, next func() (ptraceotlp.ExportRequest, bool), workers int) ([]time.Time, error) {
	conn, err := grpc.NewClient(otlp, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	client := ptraceotlp.NewGRPCClient(conn)
	sentAt := make([]time.Time, n)
	type numbered struct {
		i   int
		req ptraceotlp.ExportRequest
	}
	ahead := make(chan numbered, 2*workers+2)
	stop := make(chan struct{})
	var gen sync.WaitGroup
	gen.Go(func() {
		defer close(ahead)
		for i := range n {
			req, ok := next()
			if !ok {
				return
			}
			select {
			case ahead <- numbered{i, req}:
			case <-stop:
				return
			}
		}
	})
	queue := make(chan numbered)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for q := range queue {
				sentAt[q.i] = time.Now()
				if _, err := client.Export(ctx, q.req, grpc.WaitForReady(true)); err != nil {
					errs <- fmt.Errorf("export request %d: %w", q.i, err)
					return
				}
			}
		})
	}
	var sendErr error
	count := 0
feed:
	for q := range ahead {
		select {
		case queue <- q:
			count++
		case sendErr = <-errs:
			break feed
		case <-ctx.Done():
			sendErr = ctx.Err()
			break feed
		}
	}
	close(queue)
	close(stop)
	wg.Wait()
	gen.Wait()
	if sendErr == nil {
		select {
		case sendErr = <-errs:
		default:
		}
	}
	if sendErr == nil && count != n {
		sendErr = fmt.Errorf("the workload gave %d requests, %d expected", count, n)
	}
	return sentAt, sendErr
}

// warmupSpanName names the span warmUp sends.
const warmupSpanName = "loadgen.warmup"

// warmUp sends a span of no invocation to the collector at otlp every
// second until it comes back to rec: the collector accepts and its
// exporter reaches the receiver (which may have started after the
// collector, whose connection then waits for its next retry).
func warmUp(ctx context.Context, otlp string, rec *receiver) error {
	conn, err := grpc.NewClient(otlp, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := ptraceotlp.NewGRPCClient(conn)
	td := ptrace.NewTraces()
	sp := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.SetName(warmupSpanName)
	sp.SetTraceID(pcommon.TraceID{0xa1, 1})
	sp.SetSpanID(pcommon.SpanID{0xa1, 1})
	req := ptraceotlp.NewExportRequestFromTraces(td)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		// An error means the collector is not up yet: the next tick tries
		// again.
		callCtx, cancel := context.WithTimeout(ctx, time.Second)
		_, _ = client.Export(callCtx, req, grpc.WaitForReady(true))
		cancel()
		select {
		case <-rec.warm:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("the collector at %s did not export back to %s (its LOADGEN_RECEIVER_ENDPOINT): %w", otlp, rec.addr, ctx.Err())
		case <-tick.C:
		}
	}
}

// measure sends w to the collector at otlp, which exports to rec, and
// waits until everything is back (or ctx ends).
func measure(ctx context.Context, p pipeline, otlp string, rec *receiver, w *workload, workers int) (result, error) {
	if err := warmUp(ctx, otlp, rec); err != nil {
		return result{}, err
	}
	res := result{pipeline: p, spans: w.sends, requests: w.nRequests, loadBefore: loadAverage()}
	feed, extra := w.requestFeed(), 0
	if p == pipelineEcho {
		if w.echo == nil || w.echo.requests == nil {
			return res, errors.New("no summaries to echo: the invocation pipeline runs first")
		}
		e := &workload{requests: w.echo.requests}
		feed, extra = e.requestFeed(), w.echo.spans
	}
	capture := p == pipelineInvocation && w.echo == nil
	rec.expect(w.want, w.spans, p.summarises(), extra, capture)
	start := time.Now()
	sentAt, err := send(ctx, otlp, w.nRequests, feed, workers)
	if err != nil {
		return res, err
	}
	res.accepted = time.Since(start)
	doneAt, err := rec.wait(ctx)
	if err != nil {
		spans, sums, _ := rec.progress()
		want := 0
		if p.summarises() {
			want = len(w.want)
		}
		return res, fmt.Errorf("%s: %d of %d spans and %d of %d summaries came back: %w", p, spans, w.spans, sums, want, err)
	}
	res.backAll = doneAt.Sub(start)
	res.loadAfter = loadAverage()
	_, _, res.pending = rec.progress()
	if !p.summarises() {
		return res, nil
	}
	if capture {
		w.setEcho(rec.captured)
	}
	got, notFinal := rec.results()
	res.latencies, res.final, res.wrong = judge(w.want, got, notFinal, sentAt)
	return res, nil
}

// judge compares each invocation's closing summary with what it must
// say: it returns the latencies from the send of the request carrying the
// invocation's last span to its summary's arrival (sorted), how many are
// final with exact totals and a line for each that is not.
func judge(want []expected, got []summary, notFinal map[int]closing, sentAt []time.Time) (latencies []time.Duration, final int, wrong []string) {
	latencies = make([]time.Duration, 0, len(want))
	for i, want := range want {
		s := got[i]
		latencies = append(latencies, time.Unix(0, s.at).Sub(sentAt[want.lastRequest]))
		if s.at != 0 && s.final && s.input == int64(want.input) && s.output == int64(want.output) &&
			s.afterIn == int64(want.afterIn) && s.afterOut == int64(want.afterOut) && s.spans == int64(want.spans) {
			final++
			continue
		}
		status := contract.StatusFinal
		var reasons []string
		if s.at == 0 {
			status = "none"
		} else if c, ok := notFinal[i]; ok {
			status, reasons = c.status, c.reasons
		}
		wrong = append(wrong, fmt.Sprintf("%s: %s %v input %d output %d after %d/%d spans %d, want final input %d output %d after %d/%d spans %d",
			want.invocationID(i), status, reasons, s.input, s.output, s.afterIn, s.afterOut, s.spans, want.input, want.output, want.afterIn, want.afterOut, want.spans))
	}
	slices.Sort(latencies)
	return latencies, final, wrong
}

// loadAverage returns the 1, 5 and 15 minute load averages, or "" where
// the system does not say.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// collectorRun starts the collector binary o.collector with the config
// of p (its log and traces file in dir), measures, and stops the
// collector. With o.profileDir it also saves the collector's profiles
// there, named after p and round.
func collectorRun(ctx context.Context, o options, dir string, p pipeline, round int, w *workload) (result, error) {
	rec, err := startReceiver("127.0.0.1:0")
	if err != nil {
		return result{}, err
	}
	defer rec.stop()
	addrs, err := testbin.FreeAddrs(3)
	if err != nil {
		return result{}, err
	}
	otlp, health := addrs[0], addrs[1]
	config := filepath.Join(dir, string(p)+".yaml")
	if err := os.WriteFile(config, configs[p.config()], 0o644); err != nil {
		return result{}, err
	}
	traces := filepath.Join(dir, string(p)+"-traces.json")
	env := []string{
		"LOADGEN_OTLP_ENDPOINT=" + otlp,
		"LOADGEN_RECEIVER_ENDPOINT=" + rec.addr,
		"LOADGEN_HEALTH_ENDPOINT=" + health,
		"LOADGEN_TRACES_FILE=" + traces,
	}
	if o.pendingDelay != nil {
		env = append(env, "LOADGEN_PENDING_DELAY="+o.pendingDelay.String())
	}
	storageDir := ""
	if p == pipelineStorage {
		// A fresh directory per run: every run starts from an empty store.
		storageDir = filepath.Join(dir, fmt.Sprintf("storage-round%d", round+1))
		if err := os.RemoveAll(storageDir); err != nil {
			return result{}, err
		}
		env = append(env, "LOADGEN_STORAGE_DIR="+storageDir, fmt.Sprintf("LOADGEN_FSYNC=%t", o.fsync))
	}
	args := []string{"--config", config}
	var prof *profiles
	if o.profileDir != "" {
		prof = &profiles{dir: o.profileDir, name: fmt.Sprintf("%s-round%d", p, round+1), endpoint: addrs[2]}
		extra := filepath.Join(dir, "profile.yaml")
		if err := os.WriteFile(extra, []byte(profileConfig(p)), 0o644); err != nil {
			return result{}, err
		}
		args = append(args, "--config", extra)
		env = append(env, prof.env()...)
	}
	if o.featureGates != "" {
		args = append(args, "--feature-gates="+o.featureGates)
	}
	proc, err := testbin.Start("otelcol-agentledger", filepath.Join(dir, string(p)+".log"), "", env, o.collector, args...)
	if err != nil {
		return result{}, err
	}
	stop := func() error {
		if err := proc.Stop(testbin.StopTimeout); err != nil {
			return fmt.Errorf("stop the collector: %w\n%s", err, proc.Tail(20))
		}
		return nil
	}
	if err := testbin.WaitReady(ctx, proc, "http://"+health+"/"); err != nil {
		return result{}, errors.Join(fmt.Errorf("%s collector not ready: %w\n%s", p, err, proc.Tail(20)), stop())
	}
	res, err := measure(ctx, p, otlp, rec, w, o.workers)
	res.pendingDelay = o.pendingDelayName()
	res.rssPeak = peakRSS(proc.PID())
	if err != nil {
		err = fmt.Errorf("%w\ncollector log:\n%s", err, proc.Tail(20))
	} else if prof != nil {
		err = prof.fetch(ctx)
	}
	err = errors.Join(err, stop())
	_ = os.Remove(traces)
	if storageDir != "" && err == nil {
		size, serr := measureDir(storageDir)
		res.storage = &size
		res.restart, err = restartOn(ctx, o, dir, w, env, args)
		err = errors.Join(serr, err)
		_ = os.RemoveAll(storageDir)
	}
	return res, err
}

// restartFigures are what restartOn measured of a collector started again
// on the storage a run left.
type restartFigures struct {
	// ready is from the start of the process until its health check
	// answers (the load of the stored state is part of Start); firstBatch
	// the first export request's round trip after it (the run's first
	// request again: duplicates of retained invocations).
	ready, firstBatch time.Duration
	// compacted is the storage directory after the collector ran
	// settle (its ledger compacting partitions on timer ticks) and was
	// started once more and stopped (file_storage compacts the file on
	// start).
	compacted dirSize
}

// restartSettle is how long restartOn lets the ledger compact.
const restartSettle = 6 * time.Second

// restartOn starts the collector again with the env and args of a storage
// run, on its storage directory, and measures its restart.
func restartOn(ctx context.Context, o options, dir string, w *workload, env, args []string) (*restartFigures, error) {
	var fig restartFigures
	otlp := ""
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "LOADGEN_OTLP_ENDPOINT="); ok {
			otlp = v
		}
	}
	health := ""
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "LOADGEN_HEALTH_ENDPOINT="); ok {
			health = v
		}
	}
	storageDir := ""
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "LOADGEN_STORAGE_DIR="); ok {
			storageDir = v
		}
	}
	// Profiles are of the run, not of its restarts.
	var plain []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--config" && i+1 < len(args) && strings.HasSuffix(args[i+1], "profile.yaml") {
			i++
			continue
		}
		plain = append(plain, args[i])
	}
	for pass := range 2 {
		began := time.Now()
		proc, err := testbin.Start("otelcol-agentledger", filepath.Join(dir, fmt.Sprintf("restart%d.log", pass+1)), "", env, o.collector, plain...)
		if err != nil {
			return nil, err
		}
		stop := func() error {
			if err := proc.Stop(testbin.StopTimeout); err != nil {
				return fmt.Errorf("stop the restarted collector: %w\n%s", err, proc.Tail(20))
			}
			return nil
		}
		if err := testbin.WaitReady(ctx, proc, "http://"+health+"/"); err != nil {
			return nil, errors.Join(fmt.Errorf("restarted collector not ready: %w\n%s", err, proc.Tail(20)), stop())
		}
		if pass == 0 {
			fig.ready = time.Since(began)
			t0 := time.Now()
			if _, err := send(ctx, otlp, 1, w.requestFeed(), 1); err != nil {
				return nil, errors.Join(err, stop())
			}
			fig.firstBatch = time.Since(t0)
			select {
			case <-time.After(restartSettle):
			case <-ctx.Done():
			}
		}
		if err := stop(); err != nil {
			return nil, err
		}
	}
	var err error
	fig.compacted, err = measureDir(storageDir)
	return &fig, err
}

// report prints r.
func report(out io.Writer, r result) {
	fmt.Fprintf(out, "%-12s %7d spans in %5d requests  accepted in %8v  all back in %8v  %8.0f spans/s  (load %s -> %s)\n",
		r.pipeline, r.spans, r.requests, r.accepted.Round(time.Millisecond), r.backAll.Round(time.Millisecond),
		r.spansPerSecond(), r.loadBefore, r.loadAfter)
	if !r.pipeline.summarises() {
		return
	}
	delay := r.pendingDelay
	if delay == "" {
		delay = "the running collector's"
	}
	fmt.Fprintf(out, "%-12s %7d invocations final with exact totals, %d wrong; %d pending summaries (pending_delay %s)\n",
		"", r.final, len(r.wrong), r.pending, delay)
	fmt.Fprintf(out, "%-12s finalize latency (last span sent -> summary back): p50 %v  p90 %v  p99 %v  max %v\n", "",
		r.percentile(0.50).Round(time.Microsecond), r.percentile(0.90).Round(time.Microsecond),
		r.percentile(0.99).Round(time.Microsecond), r.percentile(1).Round(time.Microsecond))
	if d := r.storage; d != nil {
		fmt.Fprintf(out, "%-12s storage directory after stop: %d files, %.1f MiB (%.1f MiB on disk), %.0f B per invocation (%.0f B on disk)\n", "",
			d.files, float64(d.bytes)/(1<<20), float64(d.blocks)/(1<<20),
			float64(d.bytes)/float64(len(r.latencies)), float64(d.blocks)/float64(len(r.latencies)))
	}
	if f := r.restart; f != nil {
		c := f.compacted
		fmt.Fprintf(out, "%-12s restart on it: ready in %v, first batch %v; after %v and a second start (compactions): %.1f MiB (%.1f MiB on disk), %.0f B per invocation (%.0f B on disk)\n", "",
			f.ready.Round(time.Millisecond), f.firstBatch.Round(time.Microsecond), restartSettle,
			float64(c.bytes)/(1<<20), float64(c.blocks)/(1<<20),
			float64(c.bytes)/float64(len(r.latencies)), float64(c.blocks)/float64(len(r.latencies)))
	}
	for i, w := range r.wrong {
		if i == 5 {
			fmt.Fprintf(out, "%-12s ... %d more\n", "", len(r.wrong)-i)
			break
		}
		fmt.Fprintf(out, "%-12s wrong: %s\n", "", w)
	}
}

// dirSize is what a directory holds: its regular files, their sizes and
// the disk blocks allocated to them (a file grown by truncation is sparse
// until written).
type dirSize struct {
	files         int
	bytes, blocks int64
}

func measureDir(dir string) (dirSize, error) {
	var d dirSize
	err := filepath.WalkDir(dir, func(path string, e os.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		d.files++
		d.bytes += fi.Size()
		d.blocks += allocated(fi)
		return nil
	})
	return d, err
}
