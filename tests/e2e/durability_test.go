package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"gopkg.in/yaml.v3"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/testbin"
)

// The durability tests run collector-config/local.yaml (the invocation
// processor with its state in file_storage) and restart it on the same
// storage directory: after SIGKILL at random moments of a stream, and
// gracefully. Every completable invocation must get exactly one revision-1
// summary, final, with exact totals.

// owned is one span of the stream with the invocation it belongs to.
type owned struct {
	inv  string
	span handSpan
}

// durableInvocations returns n background invocations (6 spans over 2
// traces each) and the stream that delivers them: shuffled across
// invocations and traces, some spans twice, in batches of 1-5 spans.
func durableInvocations(r *rand.Rand, n int) (ids []string, batches [][]owned) {
	var all []owned
	for i := range n {
		id := fmt.Sprintf("durable-%02d", i)
		ids = append(ids, id)
		root, chat1, tool, job, cont, chat2 := backgroundInvocation(byte(2 * i))
		for _, s := range []handSpan{root, chat1, tool, job, cont, chat2} {
			all = append(all, owned{id, s})
			if r.IntN(6) == 0 {
				all = append(all, owned{id, s})
			}
		}
	}
	r.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	for len(all) > 0 {
		k := 1 + r.IntN(min(5, len(all)))
		batches = append(batches, all[:k])
		all = all[k:]
	}
	return ids, batches
}

func ownedBatch(t0 time.Time, spans []owned) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "e2e-agent")
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("github.com/agentledger/agentledger/tests/e2e")
	for _, o := range spans {
		o.span.appendTo(ss.Spans(), t0, o.inv)
	}
	return td
}

// otlpSink is an OTLP/gRPC receiver in the test: what it acknowledges it
// holds, so a collector's export to it is durable when it returns.
type otlpSink struct {
	ptraceotlp.UnimplementedGRPCServer
	mu  sync.Mutex
	got []ptrace.Traces
}

func (s *otlpSink) Export(_ context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	td := ptrace.NewTraces()
	req.Traces().CopyTo(td)
	s.mu.Lock()
	s.got = append(s.got, td)
	s.mu.Unlock()
	return ptraceotlp.NewExportResponse(), nil
}

func (s *otlpSink) summaries() []testbin.Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []testbin.Summary
	for _, td := range s.got {
		out = append(out, testbin.SummariesFromTraces(td)...)
	}
	return out
}

func startOTLPSink(t *testing.T) (*otlpSink, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	sink := &otlpSink{}
	ptraceotlp.RegisterGRPCServer(srv, sink)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return sink, l.Addr().String()
}

// localConfigExportingTo writes collector-config/local.yaml with its
// exporters replaced by one OTLP exporter to endpoint, without a queue or
// retries: the file exporter buffers its writes for a second, so a SIGKILL
// would lose what it had acknowledged, while the test's receiver holds
// what it acknowledges. Everything else (receiver, processors, storage)
// is local.yaml's.
func localConfigExportingTo(t *testing.T, endpoint string) string {
	t.Helper()
	raw, err := os.ReadFile(repoPath(t, "collector-config", "local.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["exporters"] = map[string]any{"otlp_grpc/sink": map[string]any{
		"endpoint":         endpoint,
		"compression":      "none",
		"tls":              map[string]any{"insecure": true},
		"sending_queue":    map[string]any{"enabled": false},
		"retry_on_failure": map[string]any{"enabled": false},
	}}
	service := cfg["service"].(map[string]any)
	service["pipelines"].(map[string]any)["traces"].(map[string]any)["exporters"] = []string{"otlp_grpc/sink"}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "local-otlp.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkExactlyOnce requires, for every id, exactly one distinct revision-1
// summary (a summary sent twice is the same span, with the same content),
// final, with the totals of backgroundInvocation, and no incomplete one.
func checkExactlyOnce(t *testing.T, ids []string, sums []testbin.Summary) {
	t.Helper()
	first := map[string]map[string]testbin.Summary{}
	for _, s := range sums {
		if s.Status == contract.StatusIncomplete {
			t.Errorf("%s: incomplete revision %d, reasons %v", s.InvocationID, s.Revision, s.IncompleteReasons)
		}
		if s.Status == contract.StatusPending || s.Revision != 1 {
			continue
		}
		if first[s.InvocationID] == nil {
			first[s.InvocationID] = map[string]testbin.Summary{}
		}
		if prev, ok := first[s.InvocationID][s.SpanID]; ok && !summaryEqual(prev, s) {
			t.Errorf("%s: summary %s sent twice with different content:\n%+v\n%+v", s.InvocationID, s.SpanID, prev, s)
		}
		first[s.InvocationID][s.SpanID] = s
	}
	for _, id := range ids {
		if len(first[id]) != 1 {
			t.Errorf("%s: %d distinct revision-1 summaries, want 1: %+v", id, len(first[id]), first[id])
			continue
		}
		for _, s := range first[id] {
			if s.Status != contract.StatusFinal || s.InputTokens != 400 || s.OutputTokens != 70 ||
				s.CacheReadTokens != 240 || s.CacheCreationTokens != 10 || s.ReasoningTokens != 5 ||
				s.AfterResultInputTokens != 300 || s.AfterResultOutputTokens != 50 ||
				s.ModelCalls != 2 || s.BackgroundJobs != 1 || s.Continuations != 1 || s.Spans != 6 || s.Traces != 2 {
				t.Errorf("%s: revision 1 is %s with %+v; want final 400/70 (cache 240/10, reasoning 5, after 300/50), 2 calls, 6 spans, 2 traces",
					id, s.Status, s)
			}
		}
	}
}

// TestCrashRestartExactlyOnce streams 24 invocations (shuffled across
// invocations and traces, partly duplicated) from two concurrent senders
// that retry every batch until it is acknowledged, and SIGKILLs the
// collector at several random moments of the stream, each time restarting
// it on the same config and storage directory.
func TestCrashRestartExactlyOnce(t *testing.T) {
	bin := collectorBin(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0xc4a54))
	ids, batches := durableInvocations(r, 24)
	sink, sinkAddr := startOTLPSink(t)
	config := localConfigExportingTo(t, sinkAddr)
	dir := t.TempDir()
	addrs, err := testbin.NewCollectorAddrs(dir)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"AGENTLEDGER_DEBUG_VERBOSITY=basic", "AGENTLEDGER_REMOTE_SETTLE=200ms"}
	var col atomic.Pointer[testbin.Process]
	start := func(n int) {
		ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
		defer cancel()
		p, err := testbin.StartCollector(ctx, bin, config, addrs, filepath.Join(dir, fmt.Sprintf("collector-%d.log", n)), env...)
		if p != nil {
			t.Cleanup(func() { stopAndReport(t, p) })
		}
		if err != nil {
			t.Fatal(err)
		}
		col.Store(p)
	}
	start(0)

	conn, err := grpc.NewClient(addrs.OTLPGRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := ptraceotlp.NewGRPCClient(conn)
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)

	// Two senders, each retrying its batch until the collector acknowledges
	// it (what a real exporter's retry does).
	var acked atomic.Int64
	stopSending := make(chan struct{})
	var wg sync.WaitGroup
	var retries atomic.Int64
	for w := range 2 {
		wg.Go(func() {
			for i := w; i < len(batches); i += 2 {
				req := ptraceotlp.NewExportRequestFromTraces(ownedBatch(t0, batches[i]))
				for {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_, err := client.Export(ctx, req)
					cancel()
					if err == nil {
						break
					}
					retries.Add(1)
					select {
					case <-stopSending:
						return
					case <-time.After(20 * time.Millisecond): // the collector is restarting
					}
				}
				acked.Add(1)
			}
		})
	}

	// Kill at four random points of the stream, at a random moment after
	// a random number of acknowledged batches (exports are in flight).
	points := []int64{}
	for range 4 {
		points = append(points, 1+r.Int64N(int64(len(batches)-1)))
	}
	kills := 0
	for i, at := range sortedInt64(points) {
		if err := testbin.Poll(context.Background(), time.Millisecond, func() (bool, string, error) {
			return acked.Load() >= at, "", nil
		}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(r.IntN(5)) * time.Millisecond) // land anywhere in the next exports
		if err := col.Load().Kill(); err != nil {
			t.Fatal(err)
		}
		kills++
		t.Logf("SIGKILL %d after %d of %d batches acknowledged", kills, acked.Load(), len(batches))
		start(i + 1)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(waitBudget):
		close(stopSending)
		t.Fatalf("senders did not finish: %d of %d batches acknowledged", acked.Load(), len(batches))
	}
	t.Logf("%d batches, %d kills, %d export retries", len(batches), kills, retries.Load())

	ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	err = testbin.Poll(ctx, 100*time.Millisecond, func() (bool, string, error) {
		closed := testbin.Closed(sink.summaries())
		for _, id := range ids {
			if _, ok := closed[id]; !ok {
				return false, fmt.Sprintf("no closing summary for %s yet (%d of %d closed)", id, len(closed), len(ids)), nil
			}
		}
		return true, "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := col.Load().Stop(testbin.StopTimeout); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, ids, sink.summaries())
}

func sortedInt64(v []int64) []int64 {
	out := append([]int64(nil), v...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// TestGracefulRestartKeepsOpenInvocations runs local.yaml as shipped (file
// exporter), sends the first half of each invocation, stops the collector
// with SIGTERM (no shutdown incompletes), starts it again on the same
// storage directory and sends the rest: every invocation closes final once,
// with exact totals.
func TestGracefulRestartKeepsOpenInvocations(t *testing.T) {
	bin := collectorBin(t)
	dir := t.TempDir()
	addrs, err := testbin.NewCollectorAddrs(dir)
	if err != nil {
		t.Fatal(err)
	}
	first := addrs
	first.TracesFile = filepath.Join(dir, "traces-0.json")
	col := startCollector(t, bin, "local.yaml", first, "AGENTLEDGER_DEBUG_VERBOSITY=basic")

	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	var ids []string
	var before, after []owned
	for i := range 8 {
		id := fmt.Sprintf("graceful-%d", i)
		ids = append(ids, id)
		root, chat1, tool, job, cont, chat2 := backgroundInvocation(byte(2 * i))
		for _, s := range []handSpan{root, chat1, tool, job} {
			before = append(before, owned{id, s})
		}
		for _, s := range []handSpan{cont, chat2} {
			after = append(after, owned{id, s})
		}
	}
	exportOTLP(t, addrs.OTLPGRPC, ownedBatch(t0, before[:10]), ownedBatch(t0, before[10:]))
	ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	// Every invocation's pending summary marks that the first half was
	// indexed.
	if err := testbin.Poll(ctx, 100*time.Millisecond, func() (bool, string, error) {
		sums, err := testbin.ReadSummaries(first.TracesFile)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, "", err
		}
		return len(sums) >= len(ids), fmt.Sprintf("%d pending summaries", len(sums)), nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := col.Stop(testbin.StopTimeout); err != nil {
		t.Fatal(err)
	}
	sums, err := testbin.ReadSummaries(first.TracesFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sums {
		if s.Status != contract.StatusPending {
			t.Errorf("before the restart %s got %s (reasons %v); a graceful stop with storage closes nothing", s.InvocationID, s.Status, s.IncompleteReasons)
		}
	}
	if entries, err := os.ReadDir(addrs.StorageDir); err != nil || len(entries) == 0 {
		t.Fatalf("storage directory %s: %v, %d entries", addrs.StorageDir, err, len(entries))
	}

	second := addrs
	second.TracesFile = filepath.Join(dir, "traces-1.json")
	col = startCollector(t, bin, "local.yaml", second, "AGENTLEDGER_DEBUG_VERBOSITY=basic")
	exportOTLP(t, addrs.OTLPGRPC, ownedBatch(t0, after))
	if err := testbin.Poll(ctx, 100*time.Millisecond, func() (bool, string, error) {
		sums, err := testbin.ReadSummaries(second.TracesFile)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, "", err
		}
		closed := testbin.Closed(sums)
		return len(closed) >= len(ids), fmt.Sprintf("%d closed", len(closed)), nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := col.Stop(testbin.StopTimeout); err != nil {
		t.Fatal(err)
	}
	after2, err := testbin.ReadSummaries(second.TracesFile)
	if err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, ids, append(sums, after2...))
}
