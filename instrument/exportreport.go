package instrument

import (
	"context"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/ledger"
)

// ExportReporter is a SpanExporter that tells a SpanProcessor's Ledger
// which spans the export pipeline lost: spans the Ledger counted that a
// batching processor dropped from its full queue, or whose export
// failed. The collector can never see them, so the Ledger makes their
// invocation incomplete with export_lost:queue or export_lost:failed
// (revising a final summary), and counts them in
// agentledger.instrument.export_lost_spans. Without it, the in-process
// answer and the collector's can disagree for good with nothing to say
// so.
//
// Wrap the exporter the pipeline's batching processor exports to, and
// give the reporter to the SpanProcessor:
//
//	r := instrument.NewExportReporter(exporter)
//	sp := instrument.NewSpanProcessor(sdktrace.NewBatchSpanProcessor(r), instrument.WithExportReporter(r))
//
// The collector is told too: for each invocation that lost spans, the
// reporter exports straight to the exporter an unrecorded-span
// declaration named "export_lost <reason>", which it reads as never final.
//
// A failed export is reported when the exporter returns its error. A span
// the queue dropped is reported at the next ForceFlush or Shutdown of the
// provider (every span handed on before it must then have been exported),
// or earlier, once later spans were exported in two batches and
// exportLag more spans were handed on after it.
type ExportReporter struct {
	next sdktrace.SpanExporter

	// exportMu serializes the exports to next: the batching processor's
	// and the declarations of lost spans (declareLost), so that next is
	// never called concurrently, as the SDK promises exporters.
	exportMu sync.Mutex
	// res is the resource of the latest exported span, for the
	// declarations; guarded by exportMu.
	res *resource.Resource

	// mu guards the fields below.
	mu sync.Mutex
	// pending holds the spans handed to the next processor and not yet
	// exported, by trace and span ID, with their invocation and the order
	// they were handed on in; at most maxPendingExports.
	pending map[exportKey]pendingExport
	// seq numbers the spans handed on; prevMin is the lowest number in
	// the previous exported batch.
	seq, prevMin uint64
	// lost is the attached SpanProcessor's report, nil before.
	lost func(id string, l lostExports)
}

// lostExports is what was lost of one invocation: n spans, for reason
// detail.
type lostExports struct {
	detail string
	n      int64
}

// lostSet gathers the lost spans of one export or sweep by invocation.
type lostSet map[string]lostExports

func (s lostSet) add(id, detail string) {
	e := s[id]
	e.detail, e.n = detail, e.n+1
	s[id] = e
}

type exportKey struct {
	trace trace.TraceID
	span  trace.SpanID
}

type pendingExport struct {
	id  string
	seq uint64
}

// Bounds of the ExportReporter: the spans it waits for at once, and how
// many spans must be handed on after a span skipped by two batches before
// it is reported lost without a flush.
const (
	maxPendingExports = 1 << 16
	exportLag         = 4096
)

var _ sdktrace.SpanExporter = (*ExportReporter)(nil)

// NewExportReporter returns an ExportReporter that exports to next.
func NewExportReporter(next sdktrace.SpanExporter) *ExportReporter {
	return &ExportReporter{next: next, pending: make(map[exportKey]pendingExport), prevMin: math.MaxUint64}
}

// WithExportReporter gives the SpanProcessor the ExportReporter its
// pipeline exports through, so that its Ledger learns of the spans the
// export loses (a nil r is ignored). One reporter serves one
// SpanProcessor.
func WithExportReporter(r *ExportReporter) SpanProcessorOption {
	return spanProcessorOption(func(c *config) {
		if r != nil {
			c.reporter = r
		}
	})
}

// attach makes r report to l, counting the lost spans in lostSpans.
func (r *ExportReporter) attach(l *ledger.Ledger, meter metric.Meter) {
	lostSpans, _ := meter.Int64Counter("agentledger.instrument.export_lost_spans",
		metric.WithDescription("Spans the Ledger counted that the export pipeline lost (full queue, failed export)."),
		metric.WithUnit("{span}"))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lost = func(id string, l2 lostExports) {
		lostSpans.Add(context.Background(), l2.n, metric.WithAttributes(attribute.String("reason", l2.detail)))
		l.ExportLost(id, l2.detail)
	}
}

// handed records a span of invocation id handed to the next processor.
func (r *ExportReporter) handed(sc trace.SpanContext, id string) {
	r.mu.Lock()
	if len(r.pending) >= maxPendingExports {
		lost := r.lost
		r.mu.Unlock()
		// Its export can no longer be confirmed.
		if lost != nil {
			lost(id, lostExports{detail: "untracked", n: 1})
		}
		return
	}
	r.seq++
	r.pending[exportKey{sc.TraceID(), sc.SpanID()}] = pendingExport{id: id, seq: r.seq}
	r.mu.Unlock()
}

// ExportSpans implements sdktrace.SpanExporter: it exports spans, then
// reports them lost when the export failed, and reports the spans that
// later batches skipped.
func (r *ExportReporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	r.exportMu.Lock()
	if len(spans) > 0 {
		r.res = spans[0].Resource()
	}
	err := r.next.ExportSpans(ctx, spans)
	r.exportMu.Unlock()
	lost := make(lostSet)
	r.mu.Lock()
	batchMin := uint64(math.MaxUint64)
	for _, s := range spans {
		sc := s.SpanContext()
		k := exportKey{sc.TraceID(), sc.SpanID()}
		e, ok := r.pending[k]
		if !ok {
			continue
		}
		delete(r.pending, k)
		batchMin = min(batchMin, e.seq)
		if err != nil {
			lost.add(e.id, "failed")
		}
	}
	if err == nil && batchMin != math.MaxUint64 {
		for k, e := range r.pending {
			if e.seq < r.prevMin && e.seq+exportLag < r.seq {
				delete(r.pending, k)
				lost.add(e.id, "queue")
			}
		}
		r.prevMin = batchMin
	}
	report := r.lost
	r.mu.Unlock()
	r.report(report, lost)
	return err
}

// mark returns the number of the latest span handed on.
func (r *ExportReporter) mark() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seq
}

// sweep reports lost every span handed on up to mark that is still not
// exported: the pipeline flushed since, so the queue dropped it.
func (r *ExportReporter) sweep(mark uint64) {
	lost := make(lostSet)
	r.mu.Lock()
	for k, e := range r.pending {
		if e.seq <= mark {
			delete(r.pending, k)
			lost.add(e.id, "queue")
		}
	}
	report := r.lost
	r.mu.Unlock()
	r.report(report, lost)
}

func (r *ExportReporter) report(report func(id string, l lostExports), lost lostSet) {
	if report == nil {
		return
	}
	for id, l := range lost {
		report(id, l)
	}
	r.declareLost(lost)
}

// declareLost exports, straight to next, an unrecorded-span declaration
// (declaration.go) named "export_lost <reason>" for each invocation that
// lost spans, so that the collector, which can never see them, is never
// final without them either (not_sampled:export_lost <reason>; a final
// it emitted is revised). A declaration whose export fails is lost too:
// the Ledger already says export_lost.
func (r *ExportReporter) declareLost(lost lostSet) {
	if len(lost) == 0 {
		return
	}
	r.exportMu.Lock()
	defer r.exportMu.Unlock()
	now := time.Now()
	decls := make([]sdktrace.ReadOnlySpan, 0, len(lost))
	for id, l := range lost {
		decls = append(decls, declarationSpan(id, contract.ReasonExportLost+" "+l.detail, r.res, now))
	}
	ctx, cancel := context.WithTimeout(context.Background(), declareLostTimeout)
	defer cancel()
	_ = r.next.ExportSpans(ctx, decls)
}

// declareLostTimeout bounds the export of the declarations of lost
// spans.
const declareLostTimeout = 10 * time.Second

// Shutdown implements sdktrace.SpanExporter.
func (r *ExportReporter) Shutdown(ctx context.Context) error { return r.next.Shutdown(ctx) }
