package invocationprocessor

import (
	"context"
	"errors"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadatatest"
)

// FuzzDecodeOps feeds arbitrary bytes to the record decoder: it returns
// ops or an error wrapping errCorrupt, never panics, and what it accepts
// encodes back to something it reads the same way.
func FuzzDecodeOps(f *testing.F) {
	s := scenario("inv-1", 0)
	f.Add(journal.EncodeOps(journal.KindLog, []journal.Op{{Seq: 1, Time: 5, Resources: [][]byte{{1, 24, 1, 1, 'a'}},
		Events: []journal.Event{{Kind: journal.EvFact, ID: "inv-1", Res: 1, Fact: func() []byte {
			e := journal.Encoder{}
			e.Span(batch(s[0]).ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0), journal.FactAttr, journal.LinkAttr)
			return e.B
		}()}, {Kind: journal.EvForget, ID: "inv-1"}, {Kind: journal.EvTaintAll, Until: 9}}}}))
	f.Add([]byte{journal.Version, journal.KindLog, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		ops, _, err := journal.DecodeOps(journal.KindLog, data)
		if err != nil {
			require.True(t, errors.Is(err, journal.ErrCorrupt), "%v", err)
			return
		}
		for _, op := range ops {
			for _, ev := range op.Events {
				if ev.Kind == journal.EvFact {
					d := journal.Decoder{B: ev.Fact}
					d.Span(ptrace.NewSpan())
				}
			}
		}
		again, _, err := journal.DecodeOps(journal.KindLog, journal.EncodeOps(journal.KindLog, ops))
		require.NoError(t, err)
		require.Equal(t, len(ops), len(again))
	})
}

// FuzzStoredStateDamage damages the stored state of a half-delivered
// invocation (one value, at fuzzed positions, or truncated), restarts on
// it, delivers the rest and lets every timer fire. It must never panic;
// unreadable state must be counted and must never let the damaged
// invocation be final; undamaged state must give the exact final.
func FuzzStoredStateDamage(f *testing.F) {
	f.Add(uint8(0), uint16(10), uint8(0x01), uint16(0))
	f.Add(uint8(1), uint16(3), uint8(0x80), uint16(0))
	f.Add(uint8(2), uint16(0), uint8(0), uint16(7))
	f.Add(uint8(3), uint16(50), uint8(0xff), uint16(0))
	f.Fuzz(func(t *testing.T, which uint8, pos uint16, xor uint8, cut uint16) {
		mem := newMemStorage()
		clk := newFakeClock()
		sink := new(consumertest.TracesSink)
		s := scenario("inv-1", 0)
		h := newStoredHarness(t, mem, clk, sink, nil)
		h.consume(batch(s[0], s[1]))
		h.consume(batch(s[2], s[3]))
		if which%2 == 1 {
			h.p.store.compactMin = 1
			h.advance(time.Millisecond) // fold into a snapshot
		}
		h.shutdown()

		data := mem.snapshot()
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		key := keys[int(which)%len(keys)]
		v := data[key]
		if len(v) > 0 {
			v[int(pos)%len(v)] ^= xor
			if cut > 0 {
				v = v[:len(v)-int(cut)%len(v)]
			}
		}
		data[key] = v
		mem.restore(data)

		tt := componenttest.NewTelemetry()
		defer func() { require.NoError(t, tt.Shutdown(context.Background())) }()
		h2 := newStoredHarnessWith(t, metadatatest.NewSettings(tt), mem, clk, sink, nil)
		h2.consume(batch(s[4], s[5]))
		h2.advance(5 * time.Hour)
		errs := storageErrors(t, tt)
		damaged := errs[opDecode] > 0 || errs[opRead] > 0

		var finals []ptrace.Span
		for _, sum := range h2.of("inv-1") {
			if strAttr(sum, contract.AttrStatus) == contract.StatusFinal {
				finals = append(finals, sum)
			}
		}
		if damaged {
			require.Empty(t, finals, "final from damaged state (%s)", key)
			return
		}
		// Undetected means unchanged (or not needed: a stale key).
		require.NotEmpty(t, finals, "%s: no final without detected damage; errors %v", key, errs)
		require.Equal(t, int64(150), intAttr(finals[0], contract.AttrUsageInputTokens))
		require.Equal(t, int64(6), intAttr(finals[0], contract.AttrSpans))
	})
}
