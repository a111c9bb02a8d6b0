package invocationprocessor

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/extension/storage/filestorage"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/ledgerrule"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// benchBatches makes n batches of 10 complete invocations (60 spans) each,
// with distinct ids, delivered children first so obligations are tracked
// before they are discharged.
func benchBatches(n int) []ptrace.Traces {
	out := make([]ptrace.Traces, n)
	for i := range out {
		var spans []sp
		for j := range 10 {
			s := scenario(fmt.Sprintf("inv-%d-%d", i, j), uint64((i*10+j)*100))
			for k := len(s) - 1; k >= 0; k-- {
				spans = append(spans, s[k])
			}
		}
		out[i] = batch(spans...)
	}
	return out
}

// BenchmarkConsumeTraces measures the processor against a pass-through
// consumer in the same run: mode=passthrough (the baseline) hands each
// batch on, mode=scan also reads every span's invocation.id,
// mode=invocation is the processor (retention 0, so ids recur as new
// invocations when the batches cycle), and mode=retained the processor
// with the default retention (closed invocations compacted and kept until
// a timer forgets them). Compare the modes with benchstat -col /mode. One
// op is one batch of 60 spans that completes 10 invocations.
func BenchmarkConsumeTraces(b *testing.B) {
	batches := benchBatches(64)
	spans := batches[0].SpanCount()
	ctx := context.Background()

	b.Run("mode=passthrough", func(b *testing.B) {
		next := consumertest.NewNop()
		pass, err := consumer.NewTraces(func(ctx context.Context, td ptrace.Traces) error {
			return next.ConsumeTraces(ctx, td)
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			if err := pass.ConsumeTraces(ctx, batches[i%len(batches)]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*spans), "ns/span")
	})

	// scan is a pass-through that reads every span's invocation.id: the
	// least any attribute-reading processor pays.
	b.Run("mode=scan", func(b *testing.B) {
		next := consumertest.NewNop()
		found := 0
		scan, err := consumer.NewTraces(func(ctx context.Context, td ptrace.Traces) error {
			forSpans(td, func(_ pcommon.Resource, s ptrace.Span) {
				if v, ok := s.Attributes().Get(contract.AttrInvocationID); ok && v.Str() != "" {
					found++
				}
			})
			return next.ConsumeTraces(ctx, td)
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			if err := scan.ConsumeTraces(ctx, batches[i%len(batches)]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*spans), "ns/span")
		if found != b.N*spans {
			b.Fatalf("scanned %d spans, want %d", found, b.N*spans)
		}
	})

	b.Run("mode=invocation", func(b *testing.B) {
		cfg := createDefaultConfig().(*Config)
		cfg.Retention = 0
		p, err := newProcessor(settingsForTest(), cfg, consumertest.NewNop(), newFakeClock(), 0)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			if err := p.ConsumeTraces(ctx, batches[i%len(batches)]); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*spans), "ns/span")
		if err := p.Shutdown(ctx); err != nil {
			b.Fatal(err)
		}
	})

	// retained keeps closed invocations for the default retention, as a
	// deployed collector does: each is compacted when it closes and
	// forgotten by a later tick. The fake clock moves a 32nd of the
	// retention per batch and timers fire every 16 batches, so an id
	// recurs only once its invocation is forgotten.
	b.Run("mode=retained", func(b *testing.B) {
		cfg := createDefaultConfig().(*Config)
		clk := newFakeClock()
		p, err := newProcessor(settingsForTest(), cfg, consumertest.NewNop(), clk, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			if err := p.ConsumeTraces(ctx, batches[i%len(batches)]); err != nil {
				b.Fatal(err)
			}
			clk.Advance(cfg.Retention / 32)
			if i%16 == 15 {
				if err := p.tick(ctx, clk.Now()); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*spans), "ns/span")
		b.StopTimer()
		if err := p.Shutdown(ctx); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkPendingDelay measures what a pending summary costs where spans
// merely arrive out of order: each batch brings the roots of 10
// invocations and, for the 10 whose roots came in the previous batch,
// every other span (children first), so each invocation is open with its
// root for one batch and closes final with the next. With delay=0s each
// opening emits a pending summary; with the default (5s) none is due
// before the close. One op is one batch of 60 spans that completes 10
// invocations (retention 0).
func BenchmarkPendingDelay(b *testing.B) {
	const groups = 64
	parts := make([][2][]sp, groups) // per group: roots, the rest
	for i := range parts {
		for j := range 10 {
			s := scenario(fmt.Sprintf("inv-%d-%d", i, j), uint64((i*10+j)*100))
			parts[i][0] = append(parts[i][0], s[0])
			for k := len(s) - 1; k >= 1; k-- {
				parts[i][1] = append(parts[i][1], s[k])
			}
		}
	}
	batches := make([]ptrace.Traces, groups)
	for i := range batches {
		batches[i] = batch(append(append([]sp(nil), parts[i][1]...), parts[(i+1)%groups][0]...)...)
	}
	ctx := context.Background()
	for _, delay := range []time.Duration{0, defaultPendingDelay} {
		b.Run("delay="+delay.String(), func(b *testing.B) {
			cfg := createDefaultConfig().(*Config)
			cfg.Retention = 0
			cfg.PendingDelay = delay
			// The workload does what it says: two batches open 20
			// invocations with their roots, each a pending at 0s, none at
			// 5s.
			sink := new(consumertest.TracesSink)
			check, err := newProcessor(settingsForTest(), cfg, sink, newFakeClock(), 0)
			if err != nil {
				b.Fatal(err)
			}
			for _, td := range batches[:2] {
				if err := check.ConsumeTraces(ctx, td); err != nil {
					b.Fatal(err)
				}
			}
			pending := 0
			for _, s := range summarySpans(sink.AllTraces()) {
				if strAttr(s, contract.AttrStatus) == contract.StatusPending {
					pending++
				}
			}
			if want := map[bool]int{true: 20, false: 0}[delay == 0]; pending != want {
				b.Fatalf("%d pending summaries, want %d", pending, want)
			}

			p, err := newProcessor(settingsForTest(), cfg, consumertest.NewNop(), newFakeClock(), 0)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if err := p.ConsumeTraces(ctx, batches[i%len(batches)]); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if err := p.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkStorage measures the cost of durability in the same run:
// mode=memory is the processor without storage, mode=storage the same with
// contrib's file_storage (bbolt in a temporary directory, fsync off as in
// the shipped configs), every batch written before it is acknowledged.
// One op is one batch of 60 spans that completes 10 invocations
// (retention 0); B/op and allocs/op include the storage extension's.
func BenchmarkStorage(b *testing.B) {
	batches := benchBatches(64)
	spans := batches[0].SpanCount()
	ctx := context.Background()
	for _, mode := range []string{"memory", "storage"} {
		b.Run("mode="+mode, func(b *testing.B) {
			cfg := createDefaultConfig().(*Config)
			cfg.Retention = 0
			var host component.Host = componenttest.NewNopHost()
			if mode == "storage" {
				ext := startFileStorage(b)
				id := component.MustNewIDWithName("file_storage", "bench")
				cfg.Storage = &id
				host = hostWith{id: ext}
			}
			p, err := newProcessor(settingsForTest(), cfg, consumertest.NewNop(), newFakeClock(), 0)
			if err != nil {
				b.Fatal(err)
			}
			if p.store != nil {
				if err := p.startStore(ctx, host); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if err := p.ConsumeTraces(ctx, batches[i%len(batches)]); err != nil {
					b.Fatal(err)
				}
				if i%16 == 15 && p.store != nil {
					// Timers and compaction as the timer goroutine runs them.
					if err := p.tick(ctx, p.clock.Now()); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*spans), "ns/span")
			b.StopTimer()
			if err := p.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// startFileStorage starts contrib's file_storage extension on a temporary
// directory.
func startFileStorage(tb testing.TB) storage.Extension {
	tb.Helper()
	return startFileStorageIn(tb, tb.TempDir())
}

// startFileStorageIn starts file_storage on dir.
func startFileStorageIn(tb testing.TB, dir string) storage.Extension {
	tb.Helper()
	f := filestorage.NewFactory()
	cfg := f.CreateDefaultConfig().(*filestorage.Config)
	cfg.Directory = dir
	cfg.Compaction.Directory = cfg.Directory
	ext, err := f.Create(context.Background(), extensiontest.NewNopSettings(f.Type()), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if err := ext.Start(context.Background(), componenttest.NewNopHost()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ext.Shutdown(context.Background()) })
	return ext.(storage.Extension)
}

// openBatch makes one batch of invocations that each stay open: a root
// declaring 11 children, 5 chat spans with usage and 5 execute_tool spans
// arrive (11 of 12 spans); the sixth chat never does. The batch carries
// one agent resource, as an SDK's exporter sends it.
func openBatch(first, n int) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	res := rs.Resource().Attributes()
	res.PutStr("service.name", "agent")
	res.PutStr("service.version", "1.4.2")
	res.PutStr("host.name", "worker-7")
	res.PutInt("process.pid", 4242)
	res.PutStr("telemetry.sdk.language", "go")
	res.PutStr("telemetry.sdk.name", "opentelemetry")
	ss := rs.ScopeSpans().AppendEmpty()
	for i := first; i < first+n; i++ {
		base := uint64(i) * 16
		inv := fmt.Sprintf("open-%d", i)
		spans := []sp{{inv: inv, name: "invoke_agent coder", trace: base + 1, id: base + 1, start: 0, end: 60, role: contract.RoleRoot, children: int64(11),
			extra: map[string]any{contract.AttrConversationID: "conv-1", contract.AttrAgentName: "coder", contract.AttrOperationName: contract.OpInvokeAgent}}}
		for k := range uint64(5) {
			spans = append(spans,
				sp{inv: inv, name: "chat", trace: base + 1, id: base + 2 + 2*k, parent: base + 1, start: int64(1 + 2*k), end: int64(2 + 2*k), children: int64(0), op: contract.OpChat, usage: tokens(100, 10)},
				sp{inv: inv, name: "execute_tool shell", trace: base + 1, id: base + 3 + 2*k, parent: base + 1, start: int64(2 + 2*k), end: int64(3 + 2*k), children: int64(0), op: contract.OpExecuteTool})
		}
		for _, s := range spans {
			s.fill(ss.Spans().AppendEmpty())
		}
	}
	return td
}

// received returns td as an OTLP receiver hands it on: encoded to protobuf
// and decoded, so that each string is its own allocation of the batch.
func received(b *testing.B, td ptrace.Traces) ptrace.Traces {
	buf, err := (&ptrace.ProtoMarshaler{}).MarshalTraces(td)
	if err != nil {
		b.Fatal(err)
	}
	if td, err = (&ptrace.ProtoUnmarshaler{}).UnmarshalTraces(buf); err != nil {
		b.Fatal(err)
	}
	return td
}

// heapInUse is the live heap after two collections.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkOpenInvocations measures the memory an open invocation holds:
// one op loads 100,000 invocations that stay open (11 of their 12 spans
// arrived, see openBatch) into a new processor, and B/open is the live
// heap after GC that the processor holds per open invocation
// (runtime.MemStats, the batches themselves freed). mode=spanids is the
// baseline: a map from each invocation id to its arrived span IDs, the
// least that deduplication needs; mode=invocation is the processor
// (default configuration, the open timeout never reached). Each batch
// goes through the OTLP protobuf encoding first, so that its strings (ids,
// span names) are allocated per batch as a receiver allocates them, not
// the test's shared constants.
func BenchmarkOpenInvocations(b *testing.B) {
	const open, perBatch = 100_000, 100
	ctx := context.Background()
	for _, mode := range []string{"spanids", "invocation"} {
		b.Run("mode="+mode, func(b *testing.B) {
			b.ReportAllocs()
			var perOpen float64
			for b.Loop() {
				b.StopTimer()
				before := heapInUse()
				b.StartTimer()
				var keep any
				switch mode {
				case "spanids":
					ids := make(map[string][]pcommon.SpanID)
					for i := 0; i < open; i += perBatch {
						forSpans(received(b, openBatch(i, perBatch)), func(_ pcommon.Resource, s ptrace.Span) {
							id, _ := s.Attributes().Get(contract.AttrInvocationID)
							ids[id.Str()] = append(ids[id.Str()], s.SpanID())
						})
					}
					keep = ids
				case "invocation":
					cfg := createDefaultConfig().(*Config)
					cfg.MaxOpenInvocations = open
					p, err := newProcessor(settingsForTest(), cfg, consumertest.NewNop(), newFakeClock(), 0)
					if err != nil {
						b.Fatal(err)
					}
					for i := 0; i < open; i += perBatch {
						if err := p.ConsumeTraces(ctx, received(b, openBatch(i, perBatch))); err != nil {
							b.Fatal(err)
						}
					}
					if n := p.bounds.open.Load(); n != open {
						b.Fatalf("%d open invocations, want %d", n, open)
					}
					keep = p
				}
				b.StopTimer()
				perOpen = float64(heapInUse()-before) / open
				runtime.KeepAlive(keep)
				b.StartTimer()
			}
			b.ReportMetric(perOpen, "B/open")
		})
	}
}

// BenchmarkRetainedInvocations measures what a closed invocation costs
// while it is retained (default retention, 15 minutes, so a deployed
// collector holds every invocation of the last quarter hour): one op loads
// 50,000 invocations that each close final (scenario: 6 spans, 2 traces,
// a background job and a continuation) into a new processor. B/closed is
// the live heap after GC per retained invocation, and gc-ns the wall time
// of one full collection with them live (mostly marking the retained
// state; the rest of the test binary's heap is small). Each batch goes
// through the OTLP protobuf encoding first, so that its strings are
// allocated as a receiver allocates them (not the test's constants).
func BenchmarkRetainedInvocations(b *testing.B) {
	const closed, perBatch = 50_000, 100
	ctx := context.Background()
	b.ReportAllocs()
	var perClosed, gcNS float64
	for b.Loop() {
		b.StopTimer()
		before := heapInUse()
		b.StartTimer()
		cfg := createDefaultConfig().(*Config)
		cfg.MaxOpenInvocations = closed
		p, err := newProcessor(settingsForTest(), cfg, consumertest.NewNop(), newFakeClock(), 0)
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < closed; i += perBatch {
			var spans []sp
			for j := i; j < i+perBatch; j++ {
				spans = append(spans, scenario(fmt.Sprintf("closed-%d", j), uint64(j)*100)...)
			}
			td := batch(spans...)
			buf, err := (&ptrace.ProtoMarshaler{}).MarshalTraces(td)
			if err != nil {
				b.Fatal(err)
			}
			if td, err = (&ptrace.ProtoUnmarshaler{}).UnmarshalTraces(buf); err != nil {
				b.Fatal(err)
			}
			if err := p.ConsumeTraces(ctx, td); err != nil {
				b.Fatal(err)
			}
		}
		if n := p.bounds.closed.Load(); n != closed {
			b.Fatalf("%d closed invocations retained, want %d", n, closed)
		}
		b.StopTimer()
		perClosed = float64(heapInUse()-before) / closed
		start := time.Now()
		runtime.GC()
		gcNS = float64(time.Since(start).Nanoseconds())
		runtime.KeepAlive(p)
		b.StartTimer()
	}
	b.ReportMetric(perClosed, "B/closed")
	b.ReportMetric(gcNS, "gc-ns")
}

// BenchmarkBuildTraces measures turning summaries into the batch sent to
// the next consumer, on its own: one op is one send of 10 final summaries
// of one agent resource, each with a continuation link (as
// BenchmarkConsumeTraces makes them). ns/summary is the time per summary.
func BenchmarkBuildTraces(b *testing.B) {
	resource := map[string]any{"service.name": "agent"}
	sums := make([]summary.Summary, 10)
	for i := range sums {
		sums[i] = summary.Summary{
			ID: fmt.Sprintf("inv-%d", i), Status: contract.StatusFinal, Revision: 1,
			TraceID: tid(uint64(i)), ParentID: sid(uint64(i)), Start: 1, End: 2,
			ConversationID: "conv-1", AgentName: "coder", Resource: resource,
			Links: []summary.SpanRef{{TraceID: tid(uint64(i) + 1), SpanID: sid(uint64(i) + 1)}},
			Usage: ledgerrule.Usage{Input: 150, Output: 15}, AfterIn: 50, AfterOut: 5,
			ModelCalls: 2, BackgroundJobs: 1, Continuations: 1, Spans: 6, Traces: 2,
			HasTimeToFinal: true, TimeToFinalMS: 20_000,
		}
	}
	t := &trust{collector: "bench"}
	b.ReportAllocs()
	for b.Loop() {
		if td := summary.Build(sums, t.mark); td.SpanCount() != len(sums) {
			b.Fatalf("%d spans, want %d", td.SpanCount(), len(sums))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(sums)), "ns/summary")
}

// BenchmarkRestart measures a restart on file_storage: mode=empty loads an
// empty store, mode=loaded one holding 100,000 open invocations (11 of 12
// spans arrived, as BenchmarkOpenInvocations) and 100,000 retained closed
// ones (the 6-span scenario), every partition compacted. One op is one
// Start's load; first-batch-ns is the first ConsumeTraces after it (a
// batch of 10 new invocations), stored-B/inv the storage file's size per
// invocation held. Compare the modes with benchstat -col /mode.
func BenchmarkRestart(b *testing.B) {
	const open, closed, perBatch = 100_000, 100_000, 100
	ctx := context.Background()
	first := benchBatches(1)[0]
	for _, mode := range []string{"empty", "loaded"} {
		b.Run("mode="+mode, func(b *testing.B) {
			dir := b.TempDir()
			ext := startFileStorageIn(b, dir)
			id := component.MustNewIDWithName("file_storage", "bench")
			host := hostWith{id: ext}
			cfg := createDefaultConfig().(*Config)
			cfg.Storage = &id
			clk := newFakeClock()
			start := func() *invocationProcessor {
				p, err := newProcessor(settingsForTest(), cfg, consumertest.NewNop(), clk, 0)
				if err != nil {
					b.Fatal(err)
				}
				if err := p.startStore(ctx, host); err != nil {
					b.Fatal(err)
				}
				return p
			}
			if mode == "loaded" {
				p := start()
				for i := 0; i < open; i += perBatch {
					if err := p.ConsumeTraces(ctx, openBatch(i, perBatch)); err != nil {
						b.Fatal(err)
					}
				}
				for i := 0; i < closed; i += perBatch {
					var spans []sp
					for j := range perBatch {
						spans = append(spans, scenario(fmt.Sprintf("closed-%d", i+j), uint64((i+j)*100))...)
					}
					if err := p.ConsumeTraces(ctx, batch(spans...)); err != nil {
						b.Fatal(err)
					}
				}
				for range 2 {
					for _, s := range p.shards {
						p.store.cmu.Lock()
						err := p.compactLocked(ctx, s, clk.Now().UnixNano())
						p.store.cmu.Unlock()
						if err != nil {
							b.Fatal(err)
						}
					}
				}
				if err := p.Shutdown(ctx); err != nil {
					b.Fatal(err)
				}
			}
			var firstNs time.Duration
			b.ResetTimer()
			for b.Loop() {
				p := start()
				b.StopTimer()
				t0 := time.Now()
				if err := p.ConsumeTraces(ctx, first); err != nil {
					b.Fatal(err)
				}
				firstNs += time.Since(t0)
				if err := p.Shutdown(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(firstNs.Nanoseconds())/float64(b.N), "first-batch-ns")
			if mode == "loaded" {
				var size int64
				entries, _ := os.ReadDir(dir)
				for _, e := range entries {
					if fi, err := e.Info(); err == nil && !e.IsDir() {
						size += fi.Size()
					}
				}
				b.ReportMetric(float64(size)/float64(open+closed), "stored-B/inv")
			}
		})
	}
}
