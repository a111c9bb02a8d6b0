package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/internal/testbin"
)

// tiny is a workload small enough for every `make test`, with jobs,
// duplicates and a shuffle so that every path of the processor is taken.
var tiny = workloadConfig{invocations: 40, jobs: 0.5, duplicates: 0.1, window: 60, batch: 37, seed: 7}

// referenceWorkload builds the workload of cfg the way the load
// generator did before it streamed: every span in memory, the end order
// shuffled in place within the window, the duplicates drawn over the
// whole order, then batched. It returns the spans, the send order (span
// indexes, duplicates included) and each invocation's record.
func referenceWorkload(cfg workloadConfig) ([]span, []int, []expected) {
	s := newStream(cfg)
	var spans []span
	want := make([]expected, cfg.invocations)
	for i := range cfg.invocations {
		job := s.gen.Float64() < cfg.jobs
		want[i] = genInvocation(s.gen, i, s.base.Add(time.Duration(i)*time.Millisecond), job, func(sp span) { spans = append(spans, sp) })
	}
	order := make([]int, len(spans))
	for i := range order {
		order[i] = i
	}
	if cfg.window > 1 {
		for i := range order {
			j := i + s.shuf.IntN(min(cfg.window, len(order)-i))
			order[i], order[j] = order[j], order[i]
		}
	}
	later := make(map[int][]int)
	for pos, si := range order {
		if s.dup.Float64() < cfg.duplicates {
			at := pos + 1 + s.dup.IntN(max(cfg.window, 1))
			later[at] = append(later[at], si)
		}
	}
	var sends []int
	for pos := 0; pos <= len(order) || len(later) > 0; pos++ {
		sends = append(sends, later[pos]...)
		delete(later, pos)
		if pos < len(order) {
			sends = append(sends, order[pos])
		}
	}
	seen := make([]bool, len(spans))
	for n, si := range sends {
		if !seen[si] {
			seen[si] = true
			want[spans[si].inv].lastRequest = int32(n / cfg.batch)
		}
	}
	return spans, sends, want
}

// TestWorkload checks the generated workload against itself: every span
// is sent, some twice, in an order that differs from the end order, and
// each invocation's expected totals are those of its spans.
func TestWorkload(t *testing.T) {
	spans, sends, want := referenceWorkload(tiny)
	sent := make([]int, len(spans))
	for _, s := range sends {
		sent[s]++
	}
	dups := 0
	for i, n := range sent {
		if n == 0 {
			t.Fatalf("span %d (%s) is never sent", i, spans[i].name)
		}
		dups += n - 1
	}
	if dups == 0 || len(sends) != len(spans)+dups {
		t.Errorf("%d sends of %d spans with %d duplicates", len(sends), len(spans), dups)
	}
	if isSorted(sends[:len(spans)]) {
		t.Error("the send order is the end order: nothing shuffled")
	}
	type totals struct {
		spans         int
		input, output int64
		mask          uint16
	}
	sums := make([]totals, len(want))
	for _, s := range spans {
		inv := &sums[s.inv]
		inv.spans++
		i, slot, ok := spanSlot(s.id)
		if !ok || i != s.inv || inv.mask&(1<<(slot-1)) != 0 {
			t.Fatalf("span %v of invocation %d: slot %d of invocation %d (ok %t), or a slot taken twice", s.id, s.inv, slot, i, ok)
		}
		inv.mask |= 1 << (slot - 1)
		for _, a := range s.attrs {
			switch a.key {
			case "gen_ai.usage.input_tokens":
				inv.input += a.num
			case "gen_ai.usage.output_tokens":
				inv.output += a.num
			}
		}
	}
	jobs := 0
	for i, want := range want {
		got := sums[i]
		if got.spans != int(want.spans) || got.input != int64(want.input) || got.output != int64(want.output) || got.mask != want.mask {
			t.Errorf("invocation %d: spans %d input %d output %d mask %b, want %+v", i, got.spans, got.input, got.output, got.mask, want)
		}
		if id, low, ok := parseInvocationID(want.invocationID(i)); !ok || id != i || low != want.idLow {
			t.Errorf("invocation %d: its id %s reads back as %d %x %t", i, want.invocationID(i), id, low, ok)
		}
		if want.spans == 14 {
			jobs++
			if want.afterIn == 0 || want.afterOut == 0 {
				t.Errorf("invocation %d has a continuation but no after-result usage: %+v", i, want)
			}
		} else if want.spans != 11 {
			t.Errorf("invocation %d has %d spans, want 11 or 14", i, want.spans)
		}
	}
	if jobs == 0 || jobs == len(want) {
		t.Errorf("%d of %d invocations have a job", jobs, len(want))
	}
	if _, n, w := referenceWorkload(tiny); len(n) != len(sends) || w[3] != want[3] {
		t.Error("the same seed made another workload")
	}
}

// TestStreamedWorkloadIsTheReference: the streamed workload (planned,
// then generated again request by request) sends the reference's spans,
// duplicates included, in the reference's order, batched the same way,
// with the same record per invocation; for several windows, the first
// smaller than an invocation and one larger than the workload.
func TestStreamedWorkloadIsTheReference(t *testing.T) {
	for _, window := range []int{0, 1, 5, 60, 100000} {
		cfg := tiny
		cfg.window = window
		spans, sends, want := referenceWorkload(cfg)
		w := newStreamedWorkload(cfg)
		if w.spans != len(spans) || w.sends != len(sends) || w.nRequests != (len(sends)+cfg.batch-1)/cfg.batch {
			t.Fatalf("window %d: %d spans %d sends %d requests, the reference %d %d %d", window, w.spans, w.sends, w.nRequests,
				len(spans), len(sends), (len(sends)+cfg.batch-1)/cfg.batch)
		}
		if !slices.Equal(w.want, want) {
			t.Errorf("window %d: the records differ from the reference's", window)
		}
		type key struct {
			trace pcommon.TraceID
			id    pcommon.SpanID
		}
		counts := map[key]int{}
		n := 0
		next := w.requestFeed()
		for r := 0; ; r++ {
			req, ok := next()
			if !ok {
				break
			}
			for _, sp := range req.Traces().ResourceSpans().At(0).ScopeSpans().At(0).Spans().All() {
				if n >= len(sends) {
					t.Fatalf("window %d: more than the reference's %d sends", window, len(sends))
				}
				ref := spans[sends[n]]
				if sp.SpanID() != ref.id || sp.TraceID() != ref.trace || n/cfg.batch != r {
					t.Fatalf("window %d: send %d (request %d) is %v, the reference's %v (request %d)", window, n, r, sp.SpanID(), ref.id, n/cfg.batch)
				}
				counts[key{sp.TraceID(), sp.SpanID()}]++
				n++
			}
		}
		if n != len(sends) {
			t.Fatalf("window %d: %d sends, the reference %d", window, n, len(sends))
		}
		// The same multiset, asserted apart from the order.
		for _, si := range sends {
			counts[key{spans[si].trace, spans[si].id}]--
		}
		for k, c := range counts {
			if c != 0 {
				t.Fatalf("window %d: span %v sent %+d times more than in the reference", window, k.id, c)
			}
		}
	}
}

// TestLoadgenRunsTheCollector runs the load generator as `-collector`
// does, with a tiny workload, against the real binary: both pipelines,
// every invocation final with its exact totals, and a ratio printed. It
// keeps the load generator from rotting; the figures come from the full
// workload (docs/performance.md).
func TestLoadgenRunsTheCollector(t *testing.T) {
	bin := testbin.Require(t, testbin.EnvCollectorBin, "make build", ".bin/otelcol-agentledger")
	var out bytes.Buffer
	profiles := t.TempDir()
	o := options{collector: bin, rounds: 1, workers: 2, timeout: 2 * time.Minute, workDir: t.TempDir(), profileDir: profiles, workload: tiny}
	err := run(context.Background(), o, &out)
	t.Logf("loadgen output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"40 invocations final with exact totals, 0 wrong", "finalize latency", "passthrough", "invocation / passthrough throughput = x", "invocation / passthrough+summaries = x",
		"invocation pipeline: pending_delay 5s (the processor's default)", "pending summaries (pending_delay 5s (the processor's default))"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	for _, p := range []pipeline{pipelineInvocation, pipelinePassthrough, pipelineEcho} {
		for _, kind := range []string{"cpu", "allocs", "mutex"} {
			name := filepath.Join(profiles, string(p)+"-round1."+kind+".pprof")
			if fi, err := os.Stat(name); err != nil || fi.Size() == 0 {
				t.Errorf("no %s profile of the %s run: %v", kind, p, err)
			}
		}
	}
}

// TestLoadgenStorage runs the storage pipeline beside the others: every
// invocation final with its totals with file_storage too, its ratios, its
// storage directory's size, and a restart on that directory measured.
func TestLoadgenStorage(t *testing.T) {
	bin := testbin.Require(t, testbin.EnvCollectorBin, "make build", ".bin/otelcol-agentledger")
	var out bytes.Buffer
	o := options{collector: bin, rounds: 1, workers: 2, timeout: 2 * time.Minute, workDir: t.TempDir(), storage: true, workload: tiny}
	err := run(context.Background(), o, &out)
	t.Logf("loadgen output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"storage pipeline: file_storage, fsync false", "invocation+storage ", "storage directory after stop: 1 files",
		"restart on it: ready in", "invocation+storage / invocation (memory) = x"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Count(out.String(), "40 invocations final with exact totals, 0 wrong") != 2 {
		t.Error("not every invocation was final with its totals in both invocation pipelines")
	}
}

// TestStorageFlagsNeedCollector: -storage and -fsync are refused without
// -collector, and -fsync without -storage.
func TestStorageFlagsNeedCollector(t *testing.T) {
	for _, o := range []options{{workers: 1, storage: true, workload: tiny}, {workers: 1, collector: "x", fsync: true, workload: tiny}} {
		if err := run(context.Background(), o, io.Discard); err == nil || !strings.Contains(err.Error(), "-fsync") {
			t.Errorf("%+v: err = %v", o, err)
		}
	}
}

// TestLoadgenPendingDelay runs the collector with -pending-delay: the
// delay reaches the invocation processor (invocation.yaml reads
// LOADGEN_PENDING_DELAY), every invocation is still final with its exact
// totals, and the output says which delay was used.
func TestLoadgenPendingDelay(t *testing.T) {
	bin := testbin.Require(t, testbin.EnvCollectorBin, "make build", ".bin/otelcol-agentledger")
	var out bytes.Buffer
	o := options{collector: bin, rounds: 1, workers: 2, timeout: 2 * time.Minute, workDir: t.TempDir(), pendingDelay: ptr(time.Second), workload: tiny}
	err := run(context.Background(), o, &out)
	t.Logf("loadgen output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"invocation pipeline: pending_delay 1s", "40 invocations final with exact totals, 0 wrong", "pending summaries (pending_delay 1s)", "round 1 (pending_delay 1s): invocation / passthrough"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q", want)
		}
	}
}

// TestPendingDelayNeedsCollector: against a running collector the load
// generator cannot set the delay, so the flag is refused rather than
// ignored.
func TestPendingDelayNeedsCollector(t *testing.T) {
	err := run(context.Background(), options{workers: 1, pendingDelay: ptr(time.Second), workload: tiny}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "-pending-delay needs -collector") {
		t.Fatalf("err = %v", err)
	}
}

// TestLoadgenAgainstRunningCollector measures a collector started apart
// with the shipped config, as the README shows.
func TestLoadgenAgainstRunningCollector(t *testing.T) {
	bin := testbin.Require(t, testbin.EnvCollectorBin, "make build", ".bin/otelcol-agentledger")
	addrs, err := testbin.FreeAddrs(3)
	if err != nil {
		t.Fatal(err)
	}
	otlp, listen, health := addrs[0], addrs[1], addrs[2]
	dir := t.TempDir()
	proc := testbin.StartT(t, "otelcol-agentledger", []string{
		"LOADGEN_OTLP_ENDPOINT=" + otlp,
		"LOADGEN_RECEIVER_ENDPOINT=" + listen,
		"LOADGEN_HEALTH_ENDPOINT=" + health,
		"LOADGEN_TRACES_FILE=" + filepath.Join(dir, "traces.json"),
	}, bin, "--config", "invocation.yaml")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := testbin.WaitReady(ctx, proc, "http://"+health+"/"); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	o := options{otlp: otlp, listen: listen, pipeline: string(pipelineInvocation), workers: 2, timeout: time.Minute, workload: tiny}
	err = run(ctx, o, &out)
	t.Logf("loadgen output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "40 invocations final with exact totals, 0 wrong") {
		t.Error("not every invocation was final with its totals")
	}
	if fi, err := os.Stat(filepath.Join(dir, "traces.json")); err != nil || fi.Size() == 0 {
		t.Errorf("the file exporter wrote nothing: %v", err)
	}
}

// TestEchoCarriesEverySummaryOnce checks the echo requests: each is its
// workload request followed by its share of the captured summaries, every
// summary in exactly one, in their order.
func TestEchoCarriesEverySummaryOnce(t *testing.T) {
	w := newWorkload(tiny)
	captured := ptrace.NewTraces()
	for i := range 7 {
		ss := captured.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
		for j := range 2 {
			ss.Spans().AppendEmpty().SetSpanID(pcommon.SpanID{byte(i), byte(j), 1})
		}
	}
	w.setEcho(&captured)
	if w.echo.spans != 14 || len(w.echo.requests) != len(w.requests) {
		t.Fatalf("%d summary spans in %d requests, want 14 in %d", w.echo.spans, len(w.echo.requests), len(w.requests))
	}
	var got []pcommon.SpanID
	for i, req := range w.echo.requests {
		want := w.requests[i].Traces().ResourceSpans().Len()
		rss := req.Traces().ResourceSpans()
		if rss.Len() < want || req.Traces().SpanCount() < w.requests[i].Traces().SpanCount() {
			t.Fatalf("request %d lost workload spans", i)
		}
		for k := want; k < rss.Len(); k++ {
			for _, sp := range rss.At(k).ScopeSpans().At(0).Spans().All() {
				got = append(got, sp.SpanID())
			}
		}
	}
	if len(got) != 14 {
		t.Fatalf("%d summaries in the requests, want 14", len(got))
	}
	for n, id := range got {
		if want := (pcommon.SpanID{byte(n / 2), byte(n % 2), 1}); id != want {
			t.Fatalf("summary %d is %v, want %v", n, id, want)
		}
	}
}

func isSorted(xs []int) bool {
	for i := 1; i < len(xs); i++ {
		if xs[i] < xs[i-1] {
			return false
		}
	}
	return true
}

func ptr[T any](v T) *T { return &v }
