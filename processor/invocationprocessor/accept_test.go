package invocationprocessor

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadatatest"
)

// nested returns a value of depth slices (maps when inMaps) around a
// string.
func nested(depth int, inMaps bool) pcommon.Value {
	v := pcommon.NewValueEmpty()
	cur := v
	for range depth {
		if inMaps {
			cur = cur.SetEmptyMap().PutEmpty("m")
		} else {
			cur = cur.SetEmptySlice().AppendEmpty()
		}
	}
	cur.SetStr("leaf")
	return v
}

// deepBatch is the canonical invocation with a value of the given depth
// in one place: a resource attribute, a span attribute the ledger does not
// read (gen_ai.input.messages, journalled as a fact attribute) or a link
// attribute.
func deepBatch(inv, where string, depth int, inMaps bool) ptrace.Traces {
	td := batch(scenario(inv, 0)...)
	rs := td.ResourceSpans().At(0)
	spans := rs.ScopeSpans().At(0).Spans()
	switch where {
	case "resource":
		nested(depth, inMaps).CopyTo(rs.Resource().Attributes().PutEmpty("deep"))
	case "span":
		nested(depth, inMaps).CopyTo(spans.At(1).Attributes().PutEmpty("gen_ai.input.messages"))
	case "link":
		nested(depth, inMaps).CopyTo(spans.At(4).Links().At(0).Attributes().PutEmpty("invocation.note"))
	}
	return td
}

// TestAcceptedValuesSurviveCrash is issue 34's first observation: a value
// nested 17 deep on an invocation whose final summary was made but not
// delivered, then a crash. Every depth up to journal.MaxValueDepth is
// acknowledged and given back after the restart, the summary re-sent with
// the resource as it came; one level deeper the batch is refused before it
// is acknowledged, with an error naming the attribute.
func TestAcceptedValuesSurviveCrash(t *testing.T) {
	for _, where := range []string{"resource", "span", "link"} {
		for _, depth := range []int{1, 15, 16, 17, 63, journal.MaxValueDepth} {
			for _, inMaps := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%d/maps=%v", where, depth, inMaps), func(t *testing.T) {
					mem, clk := newMemStorage(), newFakeClock()
					next := &flakySink{refuseSummaries: 1}
					cfg := createDefaultConfig().(*Config)
					id := testStorageID
					cfg.Storage = &id
					start := func() *invocationProcessor {
						p, err := newProcessor(settingsForTest(), cfg, next, clk, 2)
						require.NoError(t, err)
						require.NoError(t, p.startStore(context.Background(), hostWith{testStorageID: &memExtension{client: mem}}))
						return p
					}
					p := start()
					td := deepBatch("inv-deep", where, depth, inMaps)
					require.NoError(t, p.ConsumeTraces(context.Background(), td), "acknowledged")
					require.Empty(t, summarySpans(next.AllTraces()), "the final summary was made, not delivered")

					// kill: the processor is dropped without Shutdown.
					p2 := start()
					(&harness{t: t, p: p2, sink: &next.TracesSink, clock: clk}).quiesce()
					sums := summarySpans(next.AllTraces())
					require.Len(t, sums, 1, "the summary made before the crash is re-sent")
					assertStatus(t, sums[0], contract.StatusFinal, 1)
					assert.Equal(t, int64(150), intAttr(sums[0], contract.AttrUsageInputTokens))
					assert.Equal(t, int64(6), intAttr(sums[0], contract.AttrSpans))
					if where == "resource" {
						var res pcommon.Resource
						for _, got := range next.AllTraces() {
							forSpans(got, func(r pcommon.Resource, s ptrace.Span) {
								if s.Name() == contract.SpanNameSummary {
									res = r
								}
							})
						}
						got, ok := res.Attributes().Get("deep")
						require.True(t, ok)
						require.Equal(t, nested(depth, inMaps).AsRaw(), got.AsRaw(), "the resource as it came")
					}
					// Every stored span reads back: nothing is lost or tainted.
					for _, s := range p2.shards {
						s.mu.Lock()
						if inv, ok := s.invs[ledgerKey("", "inv-deep")]; ok {
							assert.Equal(t, int64(6), inv.Indexed)
						}
						assert.Empty(t, s.partition().tainted)
						assert.Zero(t, s.partition().taintAll)
						s.mu.Unlock()
					}
					require.NoError(t, p2.Shutdown(context.Background()))
				})
			}
		}
	}
}

// TestDeeperValueRefusedBeforeAck: one level beyond journal.MaxValueDepth
// in anything the journal stores, with storage or without, refuses the
// whole batch (permanent, naming the attribute, counted), stores nothing
// and passes nothing on; the same depth in an attribute the journal does
// not store (a span attribute outside invocation.* and gen_ai.*) or on a
// span of no invocation is accepted.
func TestDeeperValueRefusedBeforeAck(t *testing.T) {
	for _, stored := range []bool{false, true} {
		for _, where := range []string{"resource", "span", "link"} {
			t.Run(fmt.Sprintf("storage=%v/%s", stored, where), func(t *testing.T) {
				tt := componenttest.NewTelemetry()
				t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
				mem := newMemStorage()
				next := &flakySink{}
				cfg := createDefaultConfig().(*Config)
				if stored {
					id := testStorageID
					cfg.Storage = &id
				}
				p, err := newProcessor(metadatatest.NewSettings(tt), cfg, next, newFakeClock(), 2)
				require.NoError(t, err)
				if stored {
					require.NoError(t, p.startStore(context.Background(), hostWith{testStorageID: &memExtension{client: mem}}))
				}
				before := mem.snapshot()
				err = p.ConsumeTraces(context.Background(), deepBatch("inv-deep", where, journal.MaxValueDepth+1, false))
				require.Error(t, err)
				assert.True(t, consumererror.IsPermanent(err), "a retry would be refused again")
				key := map[string]string{"resource": `resource attribute "deep"`, "span": `span attribute "gen_ai.input.messages"`, "link": `link attribute "invocation.note"`}[where]
				assert.ErrorContains(t, err, key)
				assert.ErrorContains(t, err, `invocation.id "inv-deep"`)
				assert.ErrorContains(t, err, "deeper than 64 levels")
				assert.Empty(t, next.AllTraces(), "nothing passed on")
				assert.Equal(t, before, mem.snapshot(), "nothing stored")
				for _, s := range p.shards {
					assert.Empty(t, s.invs, "nothing indexed")
				}
				metadatatest.AssertEqualProcessorInvocationRefusedSpans(t, tt, []metricdata.DataPoint[int64]{
					{Value: 6, Attributes: attribute.NewSet(attribute.String("reason", refusedValueDepth))},
				}, metricdatatest.IgnoreTimestamp())

				// Not journalled: accepted.
				td := batch(scenario("inv-ok", 0)...)
				nested(200, false).CopyTo(td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(1).Attributes().PutEmpty("http.body"))
				nonMember := td.ResourceSpans().AppendEmpty()
				nested(200, true).CopyTo(nonMember.Resource().Attributes().PutEmpty("deep"))
				nonMember.ScopeSpans().AppendEmpty().Spans().AppendEmpty().SetName("not a member")
				require.NoError(t, p.ConsumeTraces(context.Background(), td))
				require.NoError(t, p.Shutdown(context.Background()))
			})
		}
	}
}
