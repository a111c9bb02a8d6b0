package invocationprocessor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
)

// v0.6 rule 7: an invocation whose obligations are met when it is loaded
// is closed at load, once.
func TestLoadClosesInvocationWhoseObligationsAreMet(t *testing.T) {
	for _, remote := range []bool{false, true} {
		name := "local"
		if remote {
			name = "remote"
		}
		t.Run(name, func(t *testing.T) {
			mem := newMemStorage()
			clk := newFakeClock()
			sink := new(consumertest.TracesSink)
			s := scenario("inv-1", 0)
			s[5].remote = remote
			h := newStoredHarness(t, mem, clk, sink, nil)
			h.consume(batch(s[0], s[1], s[2], s[3]))
			h.shutdown()
			require.Len(t, h.of("inv-1"), 1) // pending

			// The continuation's facts are in the journal, but no decision
			// on them is (a record written by a reader that read them
			// otherwise, or before the decision was made).
			appendFacts(t, h.p, mem, clk.Now().UnixNano(), "inv-1", s[4], s[5])

			clk.Advance(time.Minute)
			h2 := newStoredHarness(t, mem, clk, sink, nil)
			h2.advance(0)
			if remote {
				assert.Len(t, h2.of("inv-1"), 1, "a remote subtree settles from the load on")
				h2.advance(2 * time.Second)
			}
			sums := h2.of("inv-1")
			require.Len(t, sums, 2)
			assert.Equal(t, contract.StatusFinal, strAttr(sums[1], contract.AttrStatus))
			assert.Equal(t, int64(150), intAttr(sums[1], contract.AttrUsageInputTokens))
			h2.advance(time.Minute)
			h2.shutdown()
			require.Len(t, h2.of("inv-1"), 2, "exactly once")

			// And a further restart does not close it again.
			h3 := newStoredHarness(t, mem, clk, sink, nil)
			h3.advance(time.Second)
			h3.shutdown()
			require.Len(t, h3.of("inv-1"), 2)
		})
	}
}

// appendFacts writes a log record holding the spans' facts, and nothing
// else, to the partition of the invocation, as the next record of a
// processor that was shut down.
func appendFacts(t *testing.T, p *invocationProcessor, mem *memStorage, now int64, id string, spans ...sp) {
	t.Helper()
	s := p.shards[p.shardOf(id)]
	ps := s.partition()
	td := batch(spans...)
	res := td.ResourceSpans().At(0).Resource()
	op := journal.Op{Seq: ps.nextSeq, Time: now}
	var enc journal.Encoder
	enc.Attrs(res.Attributes(), nil, 0)
	op.Resources = append(op.Resources, append([]byte(nil), enc.B...))
	forSpans(td, func(_ pcommon.Resource, span ptrace.Span) {
		enc.B = enc.B[:0]
		enc.Span(span, journal.FactAttr, journal.LinkAttr)
		op.Events = append(op.Events, journal.Event{Kind: journal.EvFact, ID: id, Res: 1, Fact: append([]byte(nil), enc.B...)})
	})
	require.NoError(t, mem.Set(t.Context(), journal.LogKey(ps.part, op.Seq), journal.EncodeOps(journal.KindLog, []journal.Op{op})))
}
