package invocationprocessor

import (
	"encoding/binary"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// storedEmissions returns the EvEmit events of the log records in mem that
// still hold their summary's bytes.
func storedEmissions(t testing.TB, mem *memStorage) []journal.Event {
	t.Helper()
	var out []journal.Event
	for key, raw := range mem.snapshot() {
		if !strings.HasPrefix(key, "l/") {
			continue
		}
		ops, _, err := journal.DecodeOps(journal.KindLog, raw)
		require.NoError(t, err)
		for _, op := range ops {
			for _, ev := range op.Events {
				if ev.Kind == journal.EvEmit && ev.Flags&journal.EmitSent == 0 {
					out = append(out, ev)
				}
			}
		}
	}
	return out
}

// requireSameSpan compares a summary span rebuilt from storage with the
// one the next consumer got live: the resource's attributes (a raw map's
// order is Go's map order, live and rebuilt), the scope, every field of
// the span, its links, and its attributes one by one, in order, each
// value's type and value (a double's bits).
func requireSameSpan(t *testing.T, wantRes pcommon.Resource, wantScope pcommon.InstrumentationScope, want ptrace.Span, gotRs ptrace.ResourceSpans) {
	t.Helper()
	require.Equal(t, wantRes.Attributes().AsRaw(), gotRs.Resource().Attributes().AsRaw(), "resource")
	require.Equal(t, wantScope.Name(), gotRs.ScopeSpans().At(0).Scope().Name(), "scope")
	got := gotRs.ScopeSpans().At(0).Spans().At(0)
	require.Equal(t, want.TraceID(), got.TraceID())
	require.Equal(t, want.SpanID(), got.SpanID())
	require.Equal(t, want.ParentSpanID(), got.ParentSpanID())
	require.Equal(t, want.Name(), got.Name())
	require.Equal(t, want.Kind(), got.Kind())
	require.Equal(t, want.Status().Code(), got.Status().Code())
	require.Equal(t, want.StartTimestamp(), got.StartTimestamp())
	require.Equal(t, want.EndTimestamp(), got.EndTimestamp())
	require.Equal(t, want.Links().Len(), got.Links().Len(), "links")
	for i, l := range want.Links().All() {
		require.Equal(t, l.TraceID(), got.Links().At(i).TraceID())
		require.Equal(t, l.SpanID(), got.Links().At(i).SpanID())
	}
	type kv struct {
		k string
		v pcommon.Value
	}
	var wants []kv
	for k, v := range want.Attributes().All() {
		wants = append(wants, kv{k, v})
	}
	require.Equal(t, len(wants), got.Attributes().Len(), "attributes %v, live %v", got.Attributes().AsRaw(), want.Attributes().AsRaw())
	i := 0
	for k, v := range got.Attributes().All() {
		w := wants[i]
		require.Equal(t, w.k, k, "attribute %d", i)
		require.Equal(t, w.v.Type(), v.Type(), "attribute %q", k)
		if v.Type() == pcommon.ValueTypeDouble {
			require.Equal(t, math.Float64bits(w.v.Double()), math.Float64bits(v.Double()), "attribute %q", k)
		} else {
			require.Equal(t, w.v.AsRaw(), v.AsRaw(), "attribute %q", k)
		}
		i++
	}
}

// Every summary the processor stores (as its fields) is, read back and
// built again, the span the next consumer got live: a summary re-sent
// after a restart is the same span.
func TestStoredSummaryIsTheLiveSpan(t *testing.T) {
	prices := func(c *Config) {
		c.Prices = map[string]Price{"claude-sonnet-4": {Input: 3, Output: 15, CacheRead: 0.3, CacheCreation: 3.75}}
	}
	tests := []struct {
		name string
		mod  func(*Config)
		run  func(h *harness)
	}{
		{
			name: "final_with_cost",
			mod:  prices,
			run: func(h *harness) {
				spans := scenario("inv-1", 0)
				spans[1].extra = map[string]any{contract.AttrResponseModel: "claude-sonnet-4"}
				spans[5].extra = map[string]any{contract.AttrResponseModel: "claude-sonnet-4"}
				h.consume(batch(spans...))
			},
		},
		{
			name: "pending_then_final",
			run: func(h *harness) {
				spans := scenario("inv-1", 0)
				h.consume(batch(spans[:4]...))
				h.consume(batch(spans[4:]...))
			},
		},
		{
			name: "incomplete_root_missing",
			mod:  func(c *Config) { c.OpenTimeout = time.Hour },
			run: func(h *harness) {
				h.consume(batch(scenario("inv-1", 0)[1:]...))
				h.advance(time.Hour)
			},
		},
		{
			name: "late_span_revision",
			run: func(h *harness) {
				h.consume(batch(scenario("inv-1", 0)...))
				h.consume(batch(sp{inv: "inv-1", name: "chat", trace: 2, id: 12, parent: 10, start: 23, end: 31,
					op: contract.OpChat, usage: tokens(1, 2)}))
			},
		},
		{
			name: "tenant_and_every_resource_value",
			mod:  resourceTenants,
			run: func(h *harness) {
				td := tenantBatch("acme", scenario("inv-1", 0)...)
				res := td.ResourceSpans().At(0).Resource().Attributes()
				res.PutInt("process.pid", 4242)
				res.PutDouble("ratio", 0.5)
				res.PutBool("debug", true)
				res.PutEmptyBytes("blob").FromRaw([]byte{0, 1, 2})
				res.PutEmpty("nothing")
				sl := res.PutEmptySlice("list")
				sl.AppendEmpty().SetStr("a")
				sl.AppendEmpty().SetInt(2)
				m := res.PutEmptyMap("nested")
				m.PutStr("k", "v")
				m.PutEmptySlice("empty")
				h.consume(td)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem, sink := newMemStorage(), new(consumertest.TracesSink)
			h := newStoredHarness(t, mem, newFakeClock(), sink, tt.mod)
			tt.run(h)

			type live struct {
				res   pcommon.Resource
				scope pcommon.InstrumentationScope
				span  ptrace.Span
			}
			sent := map[pcommon.SpanID]live{}
			for _, td := range sink.AllTraces() {
				for _, rs := range td.ResourceSpans().All() {
					for _, ss := range rs.ScopeSpans().All() {
						for _, s := range ss.Spans().All() {
							if s.Name() == contract.SpanNameSummary {
								sent[s.SpanID()] = live{rs.Resource(), ss.Scope(), s}
							}
						}
					}
				}
			}
			stored := storedEmissions(t, mem)
			require.NotEmpty(t, stored)
			require.Len(t, stored, len(sent), "every summary sent was stored")
			for _, ev := range stored {
				require.True(t, journal.IsSummaryFields(ev.Summary), "stored as its fields")
				sum, err := decodeSummary(&ev)
				require.NoError(t, err)
				require.Nil(t, sum.Restored)
				rs := summary.Build([]summary.Summary{sum}, h.p.trust.mark).ResourceSpans().At(0)
				l, ok := sent[rs.ScopeSpans().At(0).Spans().At(0).SpanID()]
				require.True(t, ok, "%s revision %d %s was not sent", ev.ID, ev.Revision, ev.Status)
				requireSameSpan(t, l.res, l.scope, l.span, rs)
			}
		})
	}
}

// A summary stored in the older form (the span itself) still reads, and
// is re-sent as it was stored, marked by the collector sending it.
func TestRestartResendsOlderFormSummary(t *testing.T) {
	mem, clk := crashWithUndelivered(t, scenario("inv-1", 0)...)
	before := &trust{collector: "older"}
	var fromFields summary.Summary
	damageStored(t, mem, journal.EvEmit, func(ev *journal.Event) {
		if ev.Flags&journal.EmitSent != 0 {
			return
		}
		sum, err := decodeSummary(ev)
		require.NoError(t, err)
		fromFields = sum
		// As a binary before the fields stored it.
		ev.Summary = encodeSummarySpan(summary.Build([]summary.Summary{sum}, before.mark).ResourceSpans().At(0))
		require.False(t, journal.IsSummaryFields(ev.Summary))
	})
	h, logs := restartObserved(t, mem, clk)
	require.Empty(t, logs.All(), "nothing unreadable")
	var rs ptrace.ResourceSpans
	for _, td := range h.sink.AllTraces() {
		for _, r := range td.ResourceSpans().All() {
			if r.ScopeSpans().At(0).Spans().At(0).Name() == contract.SpanNameSummary {
				rs = r
			}
		}
	}
	require.NotEqual(t, ptrace.ResourceSpans{}, rs, "the summary is re-sent")
	want := summary.Build([]summary.Summary{fromFields}, h.p.trust.mark).ResourceSpans().At(0)
	requireSameSpan(t, want.Resource(), want.ScopeSpans().At(0).Scope(), want.ScopeSpans().At(0).Spans().At(0), rs)
	h.shutdown()
}

// A binary older than the fields reads them with the older form's decoder
// (decodeSummarySpan, kept as it was): it fails on the span flags and so
// makes the summary again from its restored state
// (TestReplayRemakesUnreadableSummary), instead of misreading it.
func TestOlderReaderRefusesSummaryFields(t *testing.T) {
	mem, _ := crashWithUndelivered(t, scenario("inv-1", 0)...)
	stored := storedEmissions(t, mem)
	require.NotEmpty(t, stored)
	for _, ev := range stored {
		require.True(t, journal.IsSummaryFields(ev.Summary))
		_, err := decodeSummarySpan(&ev)
		require.ErrorIs(t, err, journal.ErrCorrupt)
		require.ErrorContains(t, err, "bad span flags")
	}
}

// A summary stored as its fields is a fraction of the span it replaces.
func TestStoredSummarySize(t *testing.T) {
	mem, _ := crashWithUndelivered(t, scenario("inv-1", 0)...)
	stored := storedEmissions(t, mem)
	require.NotEmpty(t, stored)
	mark := (&trust{collector: "collector"}).mark
	for _, ev := range stored {
		sum, err := decodeSummary(&ev)
		require.NoError(t, err)
		span := encodeSummarySpan(summary.Build([]summary.Summary{sum}, mark).ResourceSpans().At(0))
		t.Logf("%s %s: %d B as its fields, %d B as its span", ev.ID, ev.Status, len(ev.Summary), len(span))
		require.Less(t, 3*len(ev.Summary), len(span))
	}
}

// BenchmarkEncodeSummary measures storing one summary: form=span is how it
// was stored before (built with summary.Build, then encoded as a span),
// form=fields as it is now. The summaries are those BenchmarkStorage's
// batches make (640 invocations, 8-byte ids, retention 0);
// stored-B/summary is their mean stored size and log-B/invocation the
// log records' bytes per invocation with the summaries in that form (the
// same records, each summary's bytes and length prefix swapped).
func BenchmarkEncodeSummary(b *testing.B) {
	mem, sink := newMemStorage(), new(consumertest.TracesSink)
	h := newStoredHarness(b, mem, newFakeClock(), sink, func(c *Config) { c.Retention = 0 })
	batches := benchBatches(64)
	for _, td := range batches {
		h.consume(td)
	}
	invocations := 10 * len(batches)
	var sums []summary.Summary
	for _, ev := range storedEmissions(b, mem) {
		sum, err := decodeSummary(&ev)
		if err != nil {
			b.Fatal(err)
		}
		sums = append(sums, sum)
	}
	if len(sums) == 0 {
		b.Fatal("no summary stored")
	}
	logBytes := 0
	for key, v := range mem.snapshot() {
		if strings.HasPrefix(key, "l/") {
			logBytes += len(v)
		}
	}
	lp := func(n int) int { return len(binary.AppendUvarint(nil, uint64(n))) + n }
	withFields := 0
	for i := range sums {
		withFields += lp(len(encodeSummary(&sums[i])))
	}
	forms := []struct {
		name   string
		encode func(*summary.Summary) []byte
	}{
		{"span", func(s *summary.Summary) []byte {
			return encodeSummarySpan(summary.Build([]summary.Summary{*s}, h.p.trust.mark).ResourceSpans().At(0))
		}},
		{"fields", encodeSummary},
	}
	for _, form := range forms {
		b.Run("form="+form.name, func(b *testing.B) {
			var stored, withForm int
			for i := range sums {
				n := len(form.encode(&sums[i]))
				stored += n
				withForm += lp(n)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				form.encode(&sums[i%len(sums)])
				i++
			}
			b.ReportMetric(float64(stored)/float64(len(sums)), "stored-B/summary")
			b.ReportMetric(float64(logBytes-withFields+withForm)/float64(invocations), "log-B/invocation")
			b.ReportMetric(float64(len(sums))/float64(invocations), "summaries/invocation")
		})
	}
}

// A summary whose resource the journal cannot store (deeper than
// journal.MaxValueDepth, which the processor refuses before it makes a
// summary) is stored unreadable, so that a restart makes it again from
// the state, never stored with the value cut.
func TestSummaryTooDeepIsStoredUnreadable(t *testing.T) {
	var deep any = "leaf"
	for range journal.MaxValueDepth + 1 {
		deep = []any{deep}
	}
	sum := summary.Summary{ID: "inv-1", Status: contract.StatusFinal, Revision: 1, Resource: map[string]any{"deep": deep}}
	b := encodeSummary(&sum)
	_, err := decodeSummary(&journal.Event{ID: sum.ID, Status: sum.Status, Revision: sum.Revision, Summary: b})
	require.ErrorIs(t, err, journal.ErrCorrupt)

	sum.Resource = map[string]any{"deep": deep.([]any)[0]} // at the limit
	b = encodeSummary(&sum)
	got, err := decodeSummary(&journal.Event{ID: sum.ID, Status: sum.Status, Revision: sum.Revision, Summary: b})
	require.NoError(t, err)
	require.Equal(t, sum.Resource, got.Resource)
}
