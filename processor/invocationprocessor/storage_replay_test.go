package invocationprocessor

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
)

// damageStored rewrites, in every stored log record, the events of kind
// with damage, keeping the records' checksums valid (the damage is in
// what was written, not in the bytes on disk), and returns the keys it
// changed.
func damageStored(t *testing.T, mem *memStorage, kind byte, damage func(ev *journal.Event)) []string {
	t.Helper()
	data := mem.snapshot()
	var changed []string
	for key, raw := range data {
		if !strings.HasPrefix(key, "l/") {
			continue
		}
		ops, _, err := journal.DecodeOps(journal.KindLog, raw)
		require.NoError(t, err)
		hit := false
		for i := range ops {
			for j := range ops[i].Events {
				if ev := &ops[i].Events[j]; ev.Kind == kind {
					damage(ev)
					hit = true
				}
			}
		}
		if hit {
			data[key] = journal.EncodeOps(journal.KindLog, ops)
			changed = append(changed, key)
		}
	}
	require.NotEmpty(t, changed)
	mem.restore(data)
	return changed
}

// crashWithUndelivered runs the canonical invocation to its final summary,
// which the next consumer refuses, and returns the storage a kill leaves.
func crashWithUndelivered(t *testing.T, spans ...sp) (*memStorage, *fakeClock) {
	mem, clk := newMemStorage(), newFakeClock()
	next := &flakySink{refuseSummaries: 1}
	cfg := createDefaultConfig().(*Config)
	id := testStorageID
	cfg.Storage = &id
	p, err := newProcessor(settingsForTest(), cfg, next, clk, 1)
	require.NoError(t, err)
	require.NoError(t, p.startStore(context.Background(), hostWith{testStorageID: &memExtension{client: mem}}))
	require.NoError(t, p.ConsumeTraces(context.Background(), batch(spans...)))
	require.Empty(t, summarySpans(next.AllTraces()))
	return mem, clk
}

func restartObserved(t *testing.T, mem *memStorage, clk *fakeClock) (*harness, *observer.ObservedLogs) {
	core, logs := observer.New(zap.ErrorLevel)
	set := settingsForTest()
	set.Logger = zap.New(core)
	sink := new(consumertest.TracesSink)
	h := newStoredHarnessWith(t, set, mem, clk, sink, nil)
	h.quiesce()
	return h, logs
}

// Issue 34, observation 1's other half: replay dropped a stored summary
// it could not read and still re-applied the decision, so the decision
// was never made again. Now the summary is made again from the restored
// state, and the log names the record.
func TestReplayRemakesUnreadableSummary(t *testing.T) {
	mem, clk := crashWithUndelivered(t, scenario("inv-1", 0)...)
	keys := damageStored(t, mem, journal.EvEmit, func(ev *journal.Event) {
		if ev.Flags&journal.EmitSent == 0 {
			ev.Summary = ev.Summary[:len(ev.Summary)/2]
		}
	})
	h, logs := restartObserved(t, mem, clk)
	sums := h.of("inv-1")
	require.Len(t, sums, 1, "the final summary is sent after the restart")
	assertStatus(t, sums[0], contract.StatusFinal, 1)
	assert.Equal(t, int64(150), intAttr(sums[0], contract.AttrUsageInputTokens))
	assert.Equal(t, int64(15), intAttr(sums[0], contract.AttrUsageOutputTokens))
	assert.Equal(t, int64(6), intAttr(sums[0], contract.AttrSpans))
	found := false
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "summary of invocation inv-1 in record "+keys[0]) && strings.Contains(e.Message, "made again") {
			found = true
		}
	}
	assert.True(t, found, "the log names the invocation and the record: %v", logs.All())
	h.shutdown()
}

// A stored span that cannot be read back makes its open invocation
// incomplete with storage_lost (never final, even when the rest arrives;
// at open_timeout here, as the lost span's obligation stays open), and
// the log names the record.
func TestReplayUnreadableSpanClosesIncomplete(t *testing.T) {
	s := scenario("inv-1", 0)
	mem, clk := crashWithUndelivered(t, s[:4]...) // pending, undelivered
	n := 0
	keys := damageStored(t, mem, journal.EvFact, func(ev *journal.Event) {
		if n++; n == 2 { // the chat span
			ev.Fact = append(ev.Fact[:len(ev.Fact)-1:len(ev.Fact)-1], 0xff, 0xff)
		}
	})
	h, logs := restartObserved(t, mem, clk)
	h.consume(batch(s[4:]...))        // the continuation: all but the lost span
	h.advance(h.p.config.OpenTimeout) // the lost chat span never comes again
	sums := h.of("inv-1")
	require.NotEmpty(t, sums)
	last := sums[len(sums)-1]
	assert.Equal(t, contract.StatusIncomplete, strAttr(last, contract.AttrStatus))
	assert.Contains(t, strsAttr(last, contract.AttrIncompleteReasons), reasonStorageLost)
	for _, s := range sums {
		assert.NotEqual(t, contract.StatusFinal, strAttr(s, contract.AttrStatus), "never final once a span is lost")
	}
	found := false
	for _, e := range logs.All() {
		if strings.Contains(e.Message, "span of invocation inv-1 in record "+keys[0]) && strings.Contains(e.Message, reasonStorageLost) {
			found = true
		}
	}
	assert.True(t, found, "the log names the invocation, the record and the reason: %v", logs.All())
	h.shutdown()
}

// A journalled span leaves out its invocation.id (the event's key holds
// it); records written before, which stored it, replay the same. Both
// forms restart an open invocation that then closes final with the
// canonical totals.
func TestReplayReadsSpansWithAndWithoutTheirID(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(map[bool]string{false: "left out", true: "stored as before"}[old], func(t *testing.T) {
			s := scenario("inv-1", 0)
			mem, clk := crashWithUndelivered(t, s[:4]...) // pending, undelivered
			reader, err := newProcessor(settingsForTest(), createDefaultConfig().(*Config), consumertest.NewNop(), clk, 1)
			require.NoError(t, err)
			defer reader.tel.Shutdown()
			rules := &reader.rules
			grew := 0
			damageStored(t, mem, journal.EvFact, func(ev *journal.Event) {
				sp := ptrace.NewSpan()
				d := journal.Decoder{B: ev.Fact, ID: ev.ID}
				d.Span(sp)
				require.NoError(t, d.Err)
				v, ok := sp.Attributes().Get(contract.AttrInvocationID)
				require.True(t, ok)
				require.Equal(t, "inv-1", v.Str())
				if !old {
					return
				}
				var e journal.Encoder
				e.Span(sp, journal.FactAttr, journal.LinkAttr)
				if len(e.B) > len(ev.Fact) {
					grew++
				}
				// The ledger reads the same facts from both forms.
				var was, now spanFacts
				decodeFacts(&journal.Decoder{B: ev.Fact, ID: ev.ID}, &now, rules)
				decodeFacts(&journal.Decoder{B: e.B}, &was, rules)
				require.Equal(t, was, now)
				ev.Fact = e.B
			})
			if old {
				require.Positive(t, grew, "the facts were stored without the id")
			}
			h, _ := restartObserved(t, mem, clk)
			h.consume(batch(s[4:]...))
			sums := h.of("inv-1")
			require.NotEmpty(t, sums)
			last := sums[len(sums)-1]
			assertStatus(t, last, contract.StatusFinal, 1)
			assert.Equal(t, int64(150), intAttr(last, contract.AttrUsageInputTokens))
			assert.Equal(t, int64(15), intAttr(last, contract.AttrUsageOutputTokens))
			assert.Equal(t, int64(6), intAttr(last, contract.AttrSpans))
			h.shutdown()
		})
	}
}
