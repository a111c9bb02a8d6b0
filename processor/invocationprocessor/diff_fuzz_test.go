package invocationprocessor

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/refmodel"
)

// Timing of FuzzDifferential's processors: the program's clock moves by at
// most ~8 s a step; everything left open closes at open_timeout at the
// end, well within retention.
const (
	dfRemoteSettle = time.Second
	dfOpenTimeout  = 30 * time.Second
	dfRetention    = time.Hour
)

// dfView is what crash equivalence compares of an invocation's latest
// summary.
type dfView struct {
	status    string
	totals    refmodel.Totals
	reasons   string
	anomalies string
	// resource is the summary's resource attributes as the next consumer
	// got them (the root's, as it came: What the processor accepts).
	resource string
}

func dfViewOf(res pcommon.Resource, s ptrace.Span) dfView {
	reasons := strsAttr(s, contract.AttrIncompleteReasons)
	slices.Sort(reasons)
	return dfView{status: strAttr(s, contract.AttrStatus), totals: dfTotals(s), reasons: strings.Join(reasons, ","),
		anomalies: strings.Join(dfModelAnomalies(s), ","), resource: fmt.Sprint(res.Attributes().AsRaw())}
}

// dfModelAnomalies returns a summary's followup_interrupted (CONTRACT.md
// v0.7) and usage_mismatch (v0.8) anomalies, sorted: the kinds of anomaly
// the model computes.
func dfModelAnomalies(s ptrace.Span) []string {
	var out []string
	for _, a := range strsAttr(s, contract.AttrAnomalies) {
		if strings.HasPrefix(a, contract.AnomalyFollowupInterrupted+":") || strings.HasPrefix(a, contract.AnomalyUsageMismatch+":") {
			out = append(out, a)
		}
	}
	slices.Sort(out)
	return out
}

func dfTotals(s ptrace.Span) refmodel.Totals {
	return refmodel.Totals{
		Input: intAttr(s, contract.AttrUsageInputTokens), Output: intAttr(s, contract.AttrUsageOutputTokens),
		CacheRead: intAttr(s, contract.AttrUsageCacheReadTokens), CacheCreation: intAttr(s, contract.AttrUsageCacheCreateTokens),
		Reasoning: intAttr(s, contract.AttrUsageReasoningTokens), ModelCalls: intAttr(s, contract.AttrModelCalls),
	}
}

// dfRun drives one processor (and its restarts) through a program and
// checks every summary against the reference model.
type dfRun struct {
	t        *testing.T
	prog     dfProgram
	restarts bool
	// compactions counts restarts, every other of which compacts first.
	compactions int
	cfg         refmodel.Config
	ignore      map[string]bool
	failures    *[]string

	mem  *memStorage
	clk  *fakeClock
	sink *consumertest.TracesSink
	h    *harness

	batches   [][]dfIn
	current   []dfIn
	committed []refmodel.Arrival
	seen      int
	firsts    map[string]map[string]bool // revision-1 summary span IDs
}

func (r *dfRun) mod(c *Config) {
	c.Summaries.Collector = testCollector
	c.RemoteSettle = dfRemoteSettle
	c.OpenTimeout = dfOpenTimeout
	c.Retention = dfRetention
	c.MaxOpenInvocations = r.prog.maxOpen
	c.MaxSpansPerInvocation = r.prog.maxSpans
}

func (r *dfRun) start() {
	r.h = newStoredHarness(r.t, r.mem, r.clk, r.sink, r.mod)
	r.h.quiesce() // what load closed
	r.check(r.committed, "load")
}

// fail reports a failure of a class, unless DIFFFUZZ_IGNORE names it (so
// that a fuzz run can look past a known bug for the next one).
func (r *dfRun) fail(class, format string, args ...any) {
	r.t.Helper()
	for _, c := range strings.Split(class, "+") {
		if r.ignore[c] {
			return
		}
	}
	msg := fmt.Sprintf("[%s] ", class) + fmt.Sprintf(format, args...)
	if r.failures != nil {
		*r.failures = append(*r.failures, msg)
		return
	}
	r.t.Fatal(msg)
}

// check reads the summaries emitted since the last check, given the
// spans the processor may have seen (acknowledged ones and the batch in
// flight).
func (r *dfRun) check(arrivals []refmodel.Arrival, when string) {
	r.t.Helper()
	sums := summarySpans(r.sink.AllTraces())
	now := r.clk.Now()
	for _, s := range sums[r.seen:] {
		id := strAttr(s, contract.AttrInvocationID)
		st := strAttr(s, contract.AttrStatus)
		if st != contract.StatusPending && intAttr(s, contract.AttrRevision) == 1 {
			if r.firsts[id] == nil {
				r.firsts[id] = map[string]bool{}
			}
			key := s.SpanID().String()
			if !r.restarts && r.firsts[id][key] {
				// Without restarts nothing is re-sent: the same span again
				// is a second revision 1 (a summary's span ID may be
				// derived from its id and revision).
				key += fmt.Sprint(len(r.firsts[id]))
			}
			r.firsts[id][key] = true
			if len(r.firsts[id]) > 1 {
				r.fail("second_revision1", "%s (%s): %s got %d distinct revision-1 summaries", when, r.mode(), id, len(r.firsts[id]))
			}
		}
		if st != contract.StatusFinal {
			continue
		}
		v := refmodel.Evaluate(r.cfg, arrivals, id, now)
		if !v.Final {
			kinds := slices.Sorted(func(yield func(string) bool) {
				for k := range v.Reasons {
					if !yield(k) {
						return
					}
				}
			})
			r.fail(strings.Join(kinds, "+"), "%s (%s): %s final (revision %d, input %d) although the model finds %v",
				when, r.mode(), id, intAttr(s, contract.AttrRevision), intAttr(s, contract.AttrUsageInputTokens), v.Reasons)
			continue
		}
		if got := dfTotals(s); got != v.Totals {
			r.fail("totals", "%s (%s): %s final with %+v, model %+v", when, r.mode(), id, got, v.Totals)
		}
		// The model's anomalies are required ones, never cut (issue 34).
		if got := dfModelAnomalies(s); !slices.Equal(got, v.Anomalies) {
			r.fail("anomalies", "%s (%s): %s final with anomalies %q, model %q", when, r.mode(), id, got, v.Anomalies)
		}
	}
	r.seen = len(sums)
	r.checkBounds(when)
}

func (r *dfRun) mode() string {
	if r.restarts {
		return "with restarts"
	}
	return "without restarts"
}

// checkBounds inspects the shards: max_open_invocations across them, and
// max_spans_per_invocation (arrived and named span IDs) per invocation.
func (r *dfRun) checkBounds(when string) {
	open := 0
	for _, s := range r.h.p.shards {
		s.mu.Lock()
		open += s.open.n
		for id, inv := range s.invs {
			if n := len(inv.Spans); n > r.prog.maxSpans {
				r.fail("bounds_spans", "%s: %s holds %d span entries, max_spans_per_invocation %d", when, id, n, r.prog.maxSpans)
			}
			if n := inv.CompactedSpans(); n > r.prog.maxSpans {
				r.fail("bounds_spans", "%s: %s holds %d closed span entries, max_spans_per_invocation %d", when, id, n, r.prog.maxSpans)
			}
		}
		s.mu.Unlock()
	}
	if open > r.prog.maxOpen {
		r.fail("bounds_open", "%s: %d open invocations, max_open_invocations %d", when, open, r.prog.maxOpen)
	}
}

func (r *dfRun) traces(spans []dfIn) ptrace.Traces {
	td, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces(dfJSON(spans))
	require.NoError(r.t, err)
	return td
}

// deliver sends one batch; failWrite makes its storage write fail (the
// batch is then not acknowledged).
func (r *dfRun) deliver(spans []dfIn, failWrite bool) {
	r.t.Helper()
	inflight := slices.Clone(r.committed)
	for _, s := range spans {
		inflight = append(inflight, refmodel.Arrival{Span: s.Span, At: r.clk.Now()})
	}
	if failWrite {
		r.mem.setFailWrites(true)
	}
	err := r.h.p.ConsumeTraces(context.Background(), r.traces(spans))
	r.mem.setFailWrites(false)
	if err != nil && consumererror.IsPermanent(err) {
		// Refused before it was acknowledged (What the processor
		// accepts): only a batch holding a value deeper than the journal
		// stores may be, in both runs alike; it is not committed.
		if !dfTooDeep(spans) {
			r.fail("refused", "a batch without an unstorable value was refused: %v", err)
		}
		r.check(r.committed, "refused batch")
		return
	}
	if failWrite {
		// A batch the processor had nothing to write for (no span it
		// indexes: non-members, spans of forgotten invocations) is
		// acknowledged although writes fail; one it indexed must not be.
		if err == nil && r.indexesAny(spans) {
			r.fail("ack_failed_write", "a batch whose write failed was acknowledged")
		}
	} else {
		require.NoError(r.t, err)
		r.h.quiesce()
	}
	r.check(inflight, "batch")
	if err == nil {
		r.committed = inflight
	}
}

// indexesAny reports whether the reference model makes any of spans a
// member of an invocation the processor still indexes (some span with an
// invocation.id string). It is the conservative test: spans of
// invocations the processor forgot are counted too, so a batch of only
// those may be reported (none is in the seeds).
func (r *dfRun) indexesAny(spans []dfIn) bool {
	return len(refmodel.Invocations(spansAt(spans))) > 0 && !r.onlyForgotten(spans)
}

// onlyForgotten reports whether every member span of the batch belongs to
// an invocation whose first summary was already emitted and whose record
// the processor may have dropped (the fingerprint path writes nothing).
func (r *dfRun) onlyForgotten(spans []dfIn) bool {
	for _, id := range refmodel.Invocations(spansAt(spans)) {
		if len(r.firsts[id]) == 0 {
			return false
		}
	}
	return true
}

func spansAt(spans []dfIn) []refmodel.Arrival {
	out := make([]refmodel.Arrival, len(spans))
	for i, s := range spans {
		out[i] = refmodel.Arrival{Span: s.Span}
	}
	return out
}

func (r *dfRun) flush() {
	if len(r.current) > 0 {
		r.batches = append(r.batches, r.current)
		r.deliver(r.current, false)
		r.current = nil
	}
}

func (r *dfRun) advance(d time.Duration) {
	r.t.Helper()
	require.NoError(r.t, r.h.p.tick(context.Background(), r.clk.Advance(d)))
	r.h.quiesce()
	r.check(r.committed, "timer")
}

// restart restarts the processor at a batch boundary. Without restarts
// the same batches are delivered once each.
func (r *dfRun) restart(mode int) {
	if !r.restarts {
		r.flush()
		return
	}
	// Every other restart first compacts every partition, so that the
	// load reads closed invocations from their records (evClosed) as well
	// as from their spans.
	if r.compactions++; r.compactions%2 == 0 {
		r.flush()
		r.h.compactAll()
	}
	switch mode {
	case dfGraceful:
		r.flush()
		r.h.shutdown()
		r.start()
	case dfCrashAcked:
		r.flush()
		r.start() // the old processor is dropped without Shutdown
	case dfCrashLostAck:
		b := r.current
		r.flush()
		r.start()
		if len(b) > 0 {
			r.deliver(b, false) // the sender never saw the acknowledgement
		}
	case dfCrashMidBatch:
		b := r.current
		r.current = nil
		if len(b) > 0 {
			r.batches = append(r.batches, b)
			r.deliver(b, true)
		}
		r.start()
		if len(b) > 0 {
			r.deliver(b, false) // the sender retries the failed batch
		}
	}
}

// run executes the program and returns the latest summary of each
// invocation at the end.
func (r *dfRun) run() map[string]dfView {
	r.mem, r.clk, r.sink = newMemStorage(), newFakeClock(), new(consumertest.TracesSink)
	r.firsts = map[string]map[string]bool{}
	r.cfg = refmodel.Config{MaxSpans: r.prog.maxSpans, UsageOperations: contract.DefaultUsageOperations, RemoteSettle: dfRemoteSettle}
	r.start()
	for _, st := range r.prog.steps {
		switch st.op {
		case dfOpSpan:
			r.current = append(r.current, st.span)
		case dfOpFlush:
			r.flush()
		case dfOpAdvance:
			r.flush()
			r.advance(time.Duration(st.arg) * 250 * time.Millisecond)
		case dfOpRestart:
			r.restart(st.arg % 4)
		case dfOpResend:
			r.flush()
			if len(r.batches) > 0 {
				r.deliver(r.batches[st.arg%len(r.batches)], false)
			}
		}
	}
	r.flush()
	r.advance(dfRemoteSettle)
	r.advance(dfOpenTimeout)
	latest := map[string]dfView{}
	for _, td := range r.sink.AllTraces() {
		forSpans(td, func(res pcommon.Resource, s ptrace.Span) {
			if s.Name() == contract.SpanNameSummary {
				latest[strAttr(s, contract.AttrInvocationID)] = dfViewOf(res, s)
			}
		})
	}
	r.h.shutdown()
	return latest
}

func dfIgnored() map[string]bool {
	out := map[string]bool{}
	for _, c := range strings.Split(os.Getenv("DIFFFUZZ_IGNORE"), ",") {
		if c != "" {
			out[c] = true
		}
	}
	return out
}

// FuzzDifferential feeds arbitrary span graphs of a few invocations
// (parentage with cycles, self-parents and cross-trace parents; links to
// any trace and span, duplicated, to themselves; every rule attribute in
// every OTLP type and repeated) in random batches, duplicated and
// reordered, to the processor with storage, restarting it gracefully and
// abruptly at batch boundaries, and to refmodel, a reading of the
// contract that shares no code with it. It checks that no summary is
// final unless the model proves it at that moment, with the model's
// totals and followup_interrupted (v0.7) and usage_mismatch (v0.8)
// anomalies; that no invocation gets two revision-1 summaries; that the
// latest summaries after the restarts equal those of the same input
// without restarts; and that state stays within max_open_invocations and
// max_spans_per_invocation. The byte format is in
// diff_fuzz_format_test.go; seeds are built from scenarios with
// dfScenario. DIFFFUZZ_IGNORE (comma-separated failure classes: a
// reason kind, totals, anomalies, second_revision1, crash_equivalence,
// bounds_spans, bounds_open) lets a fuzz run look past known bugs.
func FuzzDifferential(f *testing.F) {
	for _, seed := range dfSeeds() {
		f.Add(seed.bytes())
	}
	ignore := dfIgnored()
	f.Fuzz(func(t *testing.T, data []byte) {
		prog, ok := decodeDf(data)
		if !ok {
			return
		}
		base := &dfRun{t: t, prog: prog, ignore: ignore}
		plain := base.run()
		restarted := (&dfRun{t: t, prog: prog, restarts: true, ignore: ignore}).run()
		base.compare(plain, restarted)
	})
}

// compare checks crash equivalence. A difference is classed with the
// reason kinds the model finds for the invocation, so that
// DIFFFUZZ_IGNORE of a known bug also passes over its crash differences.
// withoutSettling drops the remote_settling entries of a joined reason
// list.
func withoutSettling(reasons string) string {
	var keep []string
	for _, r := range strings.Split(reasons, ",") {
		if !strings.HasPrefix(r, contract.ReasonRemoteSettling+":") {
			keep = append(keep, r)
		}
	}
	return strings.Join(keep, ",")
}

func (r *dfRun) compare(plain, restarted map[string]dfView) {
	ids := map[string]bool{}
	for id := range plain {
		ids[id] = true
	}
	for id := range restarted {
		ids[id] = true
	}
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for id := range ids {
			if !yield(id) {
				return
			}
		}
	}) {
		got, inRestarted := restarted[id]
		want, inPlain := plain[id]
		// A restart counts as an arrival for remote_settle (rearm): a
		// summary made while a remote subtree settles after the restart
		// (at open_timeout, say) lists remote_settling where the same
		// input without a restart had settled. That is the one reason
		// allowed to differ (CONTRACT.md v0.6 rule 7).
		got.reasons, want.reasons = withoutSettling(got.reasons), withoutSettling(want.reasons)
		if got == want && inRestarted == inPlain {
			continue
		}
		class := "crash_equivalence"
		for kind := range refmodel.Evaluate(r.cfg, r.committed, id, r.clk.Now()).Reasons {
			class += "+" + kind
		}
		r.fail(class, "%s: latest summary with restarts %+v (%v), without %+v (%v)", id, got, inRestarted, want, inPlain)
	}
}
