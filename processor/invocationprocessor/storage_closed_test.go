package invocationprocessor

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
)

// TestClosedRecordCoversEveryField fails when invocation gains a field:
// encodeClosed and decodeClosed must then store it (index aside, which
// the shard rebuilds, rare: the timeline, the status page's view, which a
// restored invocation reports as omitted, and writtenOff; and keptOwing;
// a restart forgets these two so that the invocation reads as owing:
// owes.go).
func TestClosedRecordCoversEveryField(t *testing.T) {
	require.Equal(t, 20, reflect.TypeOf(invocation{}).NumField(),
		"invocation changed: store the new field in encodeClosed and decodeClosed")
}

// closedInvocations runs n scenarios to their final with the default
// retention and returns the processor's closed invocations.
func closedInvocations(t *testing.T, h *harness, n int) []*invocation {
	for i := range n {
		h.consume(batch(scenario(fmt.Sprintf("inv-%d", i), uint64(i*100))...))
	}
	var out []*invocation
	for _, s := range h.p.shards {
		for inv := s.closed.head; inv != nil; inv = inv.index.next {
			out = append(out, inv)
		}
	}
	require.Len(t, out, n)
	return out
}

// TestClosedRecordRoundTrip: a closed invocation decoded from its record
// encodes to the same record and makes the same summary.
func TestClosedRecordRoundTrip(t *testing.T) {
	h := newStoredHarness(t, newMemStorage(), newFakeClock(), new(consumertest.TracesSink), nil)
	defer h.shutdown()
	now := h.p.clock.Now().UnixNano()
	for _, inv := range closedInvocations(t, h, 20) {
		rec := encodeClosed(nil, inv)
		back, err := decodeClosed(inv.ID, rec)
		require.NoError(t, err)
		back.Resource = inv.Resource
		assert.True(t, bytes.Equal(rec, encodeClosed(nil, back)), "%s: re-encoded record differs", inv.ID)
		want := inv.snapshot(inv.status(now, &h.p.rules), inv.Revision, now, &h.p.rules)
		got := back.snapshot(back.status(now, &h.p.rules), back.Revision, now, &h.p.rules)
		assert.Equal(t, want, got, inv.ID)
		assert.Less(t, len(rec), 400, "%s: a closed record of a 6-span invocation", inv.ID)
	}
}

// TestCompactedClosedInvocationsRevise: closed invocations compacted into
// records before a restart take late spans after it as they do without
// the restart: the same revisions, with the late span's usage, final.
func TestCompactedClosedInvocationsRevise(t *testing.T) {
	late := sp{inv: "inv-3", name: "chat", trace: 301, id: 399, parent: 301, start: 3, end: 4, children: int64(0), op: contract.OpChat, usage: tokens(7, 1)}
	run := func(restart bool) []map[string]any {
		mem, clk, sink := newMemStorage(), newFakeClock(), new(consumertest.TracesSink)
		h := newStoredHarness(t, mem, clk, sink, nil)
		closedInvocations(t, h, 10)
		if restart {
			h.compactAll()
			_, stored := mem.size()
			t.Logf("stored after compaction: %d bytes for 10 closed invocations", stored)
			h.shutdown()
			h = newStoredHarness(t, mem, clk, sink, nil)
		}
		defer h.shutdown()
		h.consume(batch(late))
		h.consume(batch(late, scenario("inv-3", 300)[1])) // duplicates
		h.advance(time.Second)
		var out []map[string]any
		for _, s := range h.of("inv-3") {
			out = append(out, s.Attributes().AsRaw())
		}
		return out
	}
	want, got := run(false), run(true)
	require.Len(t, want, 2)
	assert.Equal(t, int64(2), want[1][contract.AttrRevision])
	assert.Equal(t, contract.StatusFinal, want[1][contract.AttrStatus])
	assert.Equal(t, int64(157), want[1][contract.AttrUsageInputTokens])
	assert.Equal(t, want, got)
}

// FuzzDecodeClosed feeds arbitrary bytes to the closed record decoder: an
// error wraps errCorrupt; what decodes re-encodes and makes a summary
// without panicking.
func FuzzDecodeClosed(f *testing.F) {
	h := newStoredHarness(f, newMemStorage(), newFakeClock(), new(consumertest.TracesSink), nil)
	for i := range 5 {
		h.consume(batch(scenario(fmt.Sprintf("inv-%d", i), uint64(i*100))...))
	}
	for _, s := range h.p.shards {
		for inv := s.closed.head; inv != nil; inv = inv.index.next {
			f.Add(encodeClosed(nil, inv))
		}
	}
	h.shutdown()
	cfg := &h.p.rules
	f.Fuzz(func(t *testing.T, data []byte) {
		inv, err := decodeClosed("inv", data)
		if err != nil {
			require.True(t, errors.Is(err, journal.ErrCorrupt), "%v", err)
			return
		}
		back, err := decodeClosed("inv", encodeClosed(nil, inv))
		require.NoError(t, err)
		require.Equal(t, inv.Revision, back.Revision)
		inv.snapshot(inv.status(10, cfg), inv.Revision, 10, cfg)
	})
}
