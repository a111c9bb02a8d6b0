package instrument

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/refmodel"
)

// This file is the SDK-settings matrix (issue 31): random SDK settings
// (span limits, samplers with and without Sampler, a batching processor
// whose queue drops, two pipelines running one invocation id) and a
// random workload of model calls with random usage. The invariant: final
// implies the totals the fake served, in the Ledger and in the collector's
// reading of the exported spans (the reference model of the rule,
// internal/refmodel, which the processor's differential tests hold the
// collector to), and the two answers agree.

// matrixSettings are one point of the matrix.
type matrixSettings struct {
	// Span limits; -1 is unlimited.
	attrCount, valueLen, linkCount, linkAttrs int
	// dropProb: the inner sampler drops each span with this probability,
	// whatever its parent (a per-span sampler); ratio: else a parent-based
	// ratio sampler (1 is AlwaysSample).
	dropProb, ratio float64
	// wrap installs Sampler around the inner sampler.
	wrap bool
	// batch exports through a batching processor with a queue of 2 behind
	// an ExportReporter, while the exporter is held.
	batch bool
	// two runs the invocation id in a second pipeline as well.
	two bool
}

func (m matrixSettings) String() string {
	return fmt.Sprintf("limits attrs %d value %d links %d link attrs %d, drop %.2f ratio %.2f, Sampler %v, batch %v, two pipelines %v",
		m.attrCount, m.valueLen, m.linkCount, m.linkAttrs, m.dropProb, m.ratio, m.wrap, m.batch, m.two)
}

// randomSettings draws a point of the matrix.
func randomSettings(r *rand.Rand) matrixSettings {
	pick := func(xs ...int) int { return xs[r.IntN(len(xs))] }
	m := matrixSettings{
		attrCount: pick(-1, -1, 0, 2, 5, 8, 10, 12, 13, 14, 16),
		valueLen:  pick(-1, -1, 0, 1, 4, 8, 12, 16, 31, 32, 33, 64),
		linkCount: pick(-1, -1, 0, 1),
		linkAttrs: pick(-1, -1, 0, 1),
		ratio:     1,
		wrap:      r.IntN(2) == 0,
		batch:     r.IntN(3) == 0,
		two:       r.IntN(3) == 0,
	}
	switch r.IntN(3) {
	case 0:
		m.dropProb = []float64{0.2, 0.5}[r.IntN(2)]
	case 1:
		m.ratio = []float64{0, 0.5, 1}[r.IntN(3)]
	}
	if r.IntN(3) == 0 {
		// A third of the points keep the SDK's own limits, so that final
		// (and its exact totals) is tried often.
		m.attrCount, m.valueLen, m.linkCount, m.linkAttrs = -1, -1, -1, -1
	}
	return m
}

// matrixPipeline is one pipeline of a matrix run.
type matrixPipeline struct {
	*pipeline
	exp  *tracetest.InMemoryExporter
	gate *gatedExporter
	// served is the usage the fake served for the pipeline's calls.
	served refmodel.Totals
}

func newMatrixPipeline(t *testing.T, m matrixSettings, r *rand.Rand) *matrixPipeline {
	t.Helper()
	lim := sdktrace.NewSpanLimits()
	lim.AttributeCountLimit, lim.AttributeValueLengthLimit = m.attrCount, m.valueLen
	lim.LinkCountLimit, lim.AttributePerLinkCountLimit = m.linkCount, m.linkAttrs
	var inner sdktrace.Sampler = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(m.ratio))
	if m.dropProb > 0 {
		inner = randomDrop{p: m.dropProb, r: rand.New(rand.NewPCG(r.Uint64(), r.Uint64()))}
	}
	if m.wrap {
		inner = Sampler(inner)
	}
	mp := &matrixPipeline{pipeline: &pipeline{clock: newManualClock()}, exp: tracetest.NewInMemoryExporter()}
	opts := []SpanProcessorOption{withClock(mp.clock), WithRemoteSettle(0)}
	var next sdktrace.SpanProcessor
	if m.batch {
		mp.gate = &gatedExporter{release: make(chan struct{}), mem: mp.exp}
		rep := NewExportReporter(mp.gate)
		next = sdktrace.NewBatchSpanProcessor(rep, sdktrace.WithMaxQueueSize(2), sdktrace.WithMaxExportBatchSize(1))
		opts = append(opts, WithExportReporter(rep))
	} else {
		next = sdktrace.NewSimpleSpanProcessor(mp.exp)
	}
	mp.sp = NewSpanProcessor(next, opts...)
	mp.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(mp.sp), sdktrace.WithRawSpanLimits(lim), sdktrace.WithSampler(inner))
	mp.tracker = NewTracker(WithTracerProvider(mp.tp))
	t.Cleanup(func() { _ = mp.tp.Shutdown(context.Background()) })
	return mp
}

// randomDrop drops each span with probability p.
type randomDrop struct {
	p float64
	r *rand.Rand
}

func (d randomDrop) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	res := sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample, Tracestate: trace.SpanContextFromContext(p.ParentContext).TraceState()}
	if d.r.Float64() < d.p {
		res.Decision = sdktrace.Drop
	}
	return res
}

func (d randomDrop) Description() string { return "randomDrop" }

// call makes one model call from ctx as a streaming client wrapper does
// (usage set at its end; a dropped call reported with NoteUnrecorded),
// with usage drawn from r.
func (mp *matrixPipeline) call(ctx context.Context, r *rand.Rand, name string, opts ...trace.SpanStartOption) {
	opts = append(opts, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		attribute.String(contract.AttrOperationName, contract.OpChat),
		attribute.String(contract.AttrRequestModel, "m"),
		attribute.String("server.address", "127.0.0.1"),
		attribute.Int("server.port", 4000),
	))
	_, s := mp.tp.Tracer("example.com/llm").Start(ctx, name, opts...)
	NoteUnrecorded(ctx, s, name)
	in, out, cr := r.Int64N(5000), r.Int64N(800), r.Int64N(3000)
	mp.served.Input += in
	mp.served.Output += out
	mp.served.CacheRead += cr
	mp.served.ModelCalls++
	s.SetAttributes(attribute.String(contract.AttrResponseModel, "m-2026"))
	s.SetAttributes(attribute.Int64(contract.AttrUsageInputTokens, in), attribute.Int64(contract.AttrUsageOutputTokens, out))
	s.SetAttributes(attribute.Int64(contract.AttrUsageCacheReadTokens, cr))
	s.End()
}

// workload runs one invocation of id in mp: model calls from every kind
// of context, a background job and the continuation its followup starts.
func (mp *matrixPipeline) workload(t *testing.T, r *rand.Rand, id string) {
	t.Helper()
	session := "session-" + id + "-x"
	ctx, inv, err := mp.tracker.StartInvocationWithID(context.Background(), id, "coder", session)
	if err != nil {
		t.Fatal(err)
	}
	tr := mp.tp.Tracer("example.com/agent")
	n := 1 + r.IntN(5)
	for i := range n {
		name := "chat " + strconv.Itoa(i)
		switch r.IntN(5) {
		case 0:
			mp.call(ctx, r, name)
		case 1:
			tctx, tool := tr.Start(ctx, "execute_tool shell")
			mp.call(tctx, r, name)
			tool.End()
		case 2:
			wctx, err := ContextWithInvocation(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			mp.call(wctx, r, name)
		case 3:
			tctx, tool := tr.Start(ctx, "execute_tool read")
			tool.End()
			mp.call(tctx, r, name, trace.WithNewRoot())
		case 4:
			tctx, tool := tr.Start(ctx, "execute_tool grep")
			tool.End()
			mp.call(tctx, r, name)
		}
	}
	var job *Job
	if r.IntN(2) == 0 {
		_, job = mp.tracker.StartBackground(ctx, "shell")
	}
	ectx, ended := tr.Start(ctx, "execute_tool edit")
	ended.End()
	rootSC := trace.SpanContextFromContext(ctx)
	inv.End()
	if job != nil {
		job.EndWithFollowup(nil)
		cctx, cont, err := mp.tracker.StartContinuation(context.Background(), "coder", session, job.Carrier())
		if err != nil {
			t.Fatal(err)
		}
		mp.call(cctx, r, "chat after")
		cont.End()
	}
	if mp.gate == nil {
		// Behind the held queue of 2 every late span would be lost
		// undeclared: a loss only the ExportReporter can tell (the
		// Ledger's export_lost), which the collector cannot know.
		mp.lateCalls(t, r, id, ectx, rootSC)
	}
	if mp.gate != nil {
		close(mp.gate.release)
	}
	if err := mp.tp.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// lateCalls makes model calls of invocation id once no turn of it is
// open (its root and continuation ended): from a worker's context that
// carries only the id, from the context of an ended span (ectx), as a new
// root from it, and under the root's context as another process would
// receive it (remote, sampled, with the baggage). No open span can count
// one the sampler drops: it is declared by a span of its own.
func (mp *matrixPipeline) lateCalls(t *testing.T, r *rand.Rand, id string, ectx context.Context, rootSC trace.SpanContext) {
	t.Helper()
	for i := range r.IntN(4) {
		name := "chat late " + strconv.Itoa(i)
		switch r.IntN(4) {
		case 0:
			wctx, err := ContextWithInvocation(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			mp.call(wctx, r, name)
		case 1:
			mp.call(ectx, r, name)
		case 2:
			mp.call(ectx, r, name, trace.WithNewRoot())
		case 3:
			wctx, err := ContextWithInvocation(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			mp.call(trace.ContextWithRemoteSpanContext(wctx, rootSC), r, name)
		}
	}
}

// collectorVerdict replays mp's exported spans into the reference model
// of the collector's rule.
func (mp *matrixPipeline) collectorVerdict(id string) refmodel.Verdict {
	now := time.Now()
	var arrivals []refmodel.Arrival
	for _, s := range mp.exp.GetSpans() {
		arrivals = append(arrivals, refmodel.Arrival{Span: refSpan(s), At: now})
	}
	cfg := refmodel.Config{MaxSpans: DefaultMaxSpansPerInvocation, UsageOperations: contract.DefaultUsageOperations}
	return refmodel.Evaluate(cfg, arrivals, id, now.Add(time.Hour))
}

// refSpan converts an exported span as OTLP carries it.
func refSpan(s tracetest.SpanStub) refmodel.Span {
	out := refmodel.Span{
		TraceID: refmodel.TraceID(s.SpanContext.TraceID()), SpanID: refmodel.SpanID(s.SpanContext.SpanID()),
		Name: s.Name, Error: s.Status.Code == codes.Error, Start: s.StartTime, End: s.EndTime,
		Attributes:        refAttrs(s.Attributes),
		DroppedAttributes: uint32(s.DroppedAttributes), DroppedLinks: uint32(s.DroppedLinks),
	}
	if s.Parent.IsValid() {
		out.ParentSpanID = refmodel.SpanID(s.Parent.SpanID())
	}
	for _, l := range s.Links {
		out.Links = append(out.Links, refmodel.Link{TraceID: refmodel.TraceID(l.SpanContext.TraceID()), SpanID: refmodel.SpanID(l.SpanContext.SpanID()),
			Attributes: refAttrs(l.Attributes), DroppedAttributes: uint32(l.DroppedAttributeCount)})
	}
	return out
}

func refAttrs(attrs []attribute.KeyValue) []refmodel.KeyValue {
	var out []refmodel.KeyValue
	for _, kv := range attrs {
		var v refmodel.Value
		switch kv.Value.Type() {
		case attribute.STRING:
			v = refmodel.Str(kv.Value.AsString())
		case attribute.INT64:
			v = refmodel.Int(kv.Value.AsInt64())
		case attribute.BOOL:
			v = refmodel.Bool(kv.Value.AsBool())
		case attribute.FLOAT64:
			v = refmodel.Double(kv.Value.AsFloat64())
		default:
			continue
		}
		out = append(out, refmodel.KeyValue{Key: string(kv.Key), Value: v})
	}
	return out
}

// checkMatrix runs one point of the matrix and checks the invariant.
// matrixFinals counts the pipelines the matrix saw final, and not, so a
// run shows it was not vacuous.
var matrixFinals [2]int

func checkMatrix(t *testing.T, seed uint64, m matrixSettings) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	id := NewInvocationID()
	pipes := []*matrixPipeline{newMatrixPipeline(t, m, r)}
	if m.two {
		pipes = append(pipes, newMatrixPipeline(t, m, r))
	}
	for _, mp := range pipes {
		mp.workload(t, r, id)
	}
	for i, mp := range pipes {
		s, known := mp.sp.Ledger().Summary(id)
		v := mp.collectorVerdict(id)
		got := refmodel.Totals{Input: s.Usage.InputTokens, Output: s.Usage.OutputTokens, CacheRead: s.Usage.CacheReadInputTokens, ModelCalls: s.Usage.ModelCalls}
		where := fmt.Sprintf("seed %d, %v, pipeline %d", seed, m, i+1)
		if known && s.Status == StatusFinal && got != mp.served {
			t.Fatalf("%s: ledger final with %+v, served %+v", where, got, mp.served)
		}
		// A span no count declares (a worker's call) that the held queue
		// dropped (which ones depends on when its goroutine takes the
		// first) is declared to the collector by the ExportReporter.
		if v.Final && v.Totals != mp.served {
			t.Fatalf("%s: collector final with %+v, served %+v (reasons %v)", where, v.Totals, mp.served, v.Reasons)
		}
		if v.Final {
			matrixFinals[0]++
		} else {
			matrixFinals[1]++
		}
		if (known && s.Status == StatusFinal) != v.Final {
			t.Fatalf("%s: ledger %s %v, collector final=%v %v", where, s.Status, s.Reasons, v.Final, v.Reasons)
		}
	}
}

// TestSDKSettingsMatrix runs random points of the matrix; the seed is
// printed, AGENTLEDGER_MATRIX_SEED replays one.
func TestSDKSettingsMatrix(t *testing.T) {
	base := uint64(time.Now().UnixNano())
	if s := os.Getenv("AGENTLEDGER_MATRIX_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		base = n
	}
	t.Logf("seed %d", base)
	runs := 300
	if testing.Short() {
		runs = 60
	}
	for i := range uint64(runs) {
		seed := base + i
		m := randomSettings(rand.New(rand.NewPCG(seed, 1)))
		checkMatrix(t, seed, m)
	}
	t.Logf("final %d, not final %d", matrixFinals[0], matrixFinals[1])
}

// FuzzSDKSettings fuzzes the matrix's settings and workload seed with the
// same invariant.
func FuzzSDKSettings(f *testing.F) {
	f.Add(uint64(1), int8(-1), int8(-1), int8(-1), int8(-1), uint8(0), uint8(100), false, false, false)
	f.Add(uint64(2), int8(13), int8(-1), int8(-1), int8(-1), uint8(0), uint8(100), true, false, false)
	f.Add(uint64(3), int8(-1), int8(8), int8(1), int8(0), uint8(50), uint8(100), true, true, true)
	f.Add(uint64(4), int8(-1), int8(31), int8(-1), int8(-1), uint8(0), uint8(50), false, false, true)
	f.Fuzz(func(t *testing.T, seed uint64, attrCount, valueLen, linkCount, linkAttrs int8, dropPct, ratioPct uint8, wrap, batch, two bool) {
		m := matrixSettings{
			attrCount: int(attrCount), valueLen: int(valueLen), linkCount: int(linkCount), linkAttrs: int(linkAttrs),
			dropProb: float64(dropPct%101) / 100, ratio: float64(ratioPct%101) / 100,
			wrap: wrap, batch: batch, two: two,
		}
		for _, lim := range []*int{&m.attrCount, &m.valueLen, &m.linkCount, &m.linkAttrs} {
			if *lim < -1 {
				*lim = -1
			}
		}
		checkMatrix(t, seed, m)
	})
}
