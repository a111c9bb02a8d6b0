package invocationprocessor

import (
	"context"
	"fmt"
	"testing"

	"github.com/open-telemetry/opentelemetry-collector-contrib/extension/storage/filestorage"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/internal/contract"
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
// batch on, mode=scan also reads every span's invocation.id, and
// mode=invocation is the processor. Compare the modes with benchstat -col
// /mode. One op is one batch of 60 spans that completes 10 invocations
// (retention 0, so ids recur as new invocations when the batches cycle).
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
	f := filestorage.NewFactory()
	cfg := f.CreateDefaultConfig().(*filestorage.Config)
	cfg.Directory = tb.TempDir()
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
