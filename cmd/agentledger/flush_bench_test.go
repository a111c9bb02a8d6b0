package main

import (
	"context"
	"io"
	"testing"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/internal/testbin"
)

// BenchmarkResultExport measures what the export before a result adds to
// it, on loopback to the real collector (AGENTLEDGER_COLLECTOR_BIN),
// with the drop-ins' own pipeline (OTLP over HTTP, the batch processor
// on its default schedule): each op is one prompt's spans as a drop-in
// ends them at a result (a root with a tool call and a background job
// still running), then, for "flushed", the ForceFlush the adapters wait
// for before they pass the result on. "plain" is the same without it:
// the result's latency as without the export before it. The difference
// is the latency a result gains.
func BenchmarkResultExport(b *testing.B) {
	col := testbin.StartLocalCollector(b)
	b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+col.Addrs.OTLPHTTP)
	cfg, err := readExportConfig(osEnviron)
	if err != nil {
		b.Fatal(err)
	}
	for _, flushed := range []bool{false, true} {
		name := "plain"
		if flushed {
			name = "flushed"
		}
		b.Run(name, func(b *testing.B) {
			tp, err := newPipeline(context.Background(), cfg, "bench", io.Discard)
			if err != nil {
				b.Fatal(err)
			}
			defer shutdownPipeline(tp, cfg, io.Discard)
			tracker := instrument.NewTracker(instrument.WithTracerProvider(tp))
			tracer := tp.Tracer("bench")
			var jobs []*instrument.Job
			b.ReportAllocs()
			for b.Loop() {
				ctx, inv := tracker.StartInvocation(context.Background(), "bench", "bench-session")
				tctx, tool := tracer.Start(ctx, "execute_tool Bash")
				_, job := tracker.StartBackground(tctx, "shell")
				tool.End()
				inv.End()
				jobs = append(jobs, job)
				if flushed {
					if err := tp.ForceFlush(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			for _, j := range jobs {
				j.EndWithoutFollowup(nil)
			}
		})
	}
}
