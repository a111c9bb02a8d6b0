package invocationprocessor

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadatatest"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

func storageErrors(t *testing.T, tt *componenttest.Telemetry) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	m, err := tt.GetMetric("otelcol_processor_invocation_storage_errors")
	if err != nil {
		return out
	}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		v, _ := dp.Attributes.Value("operation")
		out[v.AsString()] += dp.Value
	}
	return out
}

// A failed write fails the batch before anything is passed on, is counted,
// and holds back the summaries of what was indexed; the sender's retry
// writes the records and completes the batch.
func TestStorageWriteFailureFailsTheBatch(t *testing.T) {
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
	mem := newMemStorage()
	sink := new(consumertest.TracesSink)
	h := newStoredHarnessWith(t, metadatatest.NewSettings(tt), mem, newFakeClock(), sink, nil)
	s := scenario("inv-1", 0)
	ctx := context.Background()

	mem.setFailWrites(true)
	err := h.p.ConsumeTraces(ctx, batch(s...))
	require.ErrorIs(t, err, errInjected)
	assert.Zero(t, sink.SpanCount(), "nothing is passed on before it is durable")
	// While storage fails, further batches are refused before indexing.
	require.ErrorIs(t, h.p.ConsumeTraces(ctx, batch(scenario("inv-2", 100)...)), errInjected)
	require.ErrorIs(t, h.p.tick(ctx, h.clock.Advance(time.Second)), errInjected)
	assert.Zero(t, sink.SpanCount(), "the final made while indexing is held until its record is written")
	assert.Equal(t, int64(3), storageErrors(t, tt)[opWrite])

	mem.setFailWrites(false)
	h.consume(batch(s...)) // the sender's retry
	sums := h.of("inv-1")
	require.Len(t, sums, 1)
	assert.Equal(t, contract.StatusFinal, strAttr(sums[0], contract.AttrStatus))
	assert.Equal(t, int64(150), intAttr(sums[0], contract.AttrUsageInputTokens))
	// The final was made when the batch was first indexed, and held.
	assert.Equal(t, int64(0), intAttr(sums[0], contract.AttrDuplicateSpans))
	assert.Equal(t, 6, h.passed(), "the batch went downstream once")
	assert.Empty(t, h.of("inv-2"), "the refused batch left no state")

	metadatatest.AssertEqualProcessorInvocationStorageErrors(t, tt, []metricdata.DataPoint[int64]{
		{Value: 3, Attributes: attribute.NewSet(attribute.String("operation", opWrite))},
	}, metricdatatest.IgnoreTimestamp())
	bytes, err := tt.GetMetric("otelcol_processor_invocation_storage_bytes_written")
	require.NoError(t, err)
	assert.Positive(t, bytes.Data.(metricdata.Sum[int64]).DataPoints[0].Value)
	h.shutdown()
}

// Failed reads at Start are reported and counted and do not stop the
// processor; the invocations whose state could not be read can no longer
// be final (incomplete with storage_lost), the others are unaffected.
func TestStorageReadFailureAtStart(t *testing.T) {
	mem := newMemStorage()
	clk := newFakeClock()
	sink := new(consumertest.TracesSink)
	s := scenario("inv-1", 0)
	h := newStoredHarness(t, mem, clk, sink, nil)
	h.consume(batch(s[0], s[1], s[2], s[3]))
	h.shutdown()

	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
	mem.setFailReads(true)
	h2 := newStoredHarnessWith(t, metadatatest.NewSettings(tt), mem, clk, sink, nil)
	mem.setFailReads(false)
	assert.Positive(t, storageErrors(t, tt)[opRead])

	// The rest of inv-1 arrives: it would complete the invocation, but the
	// first part was not read back, so final cannot be proven. An
	// invocation that starts now may be one whose first spans were lost:
	// it is marked too, until open_timeout plus retention have passed.
	h2.consume(batch(s[4], s[5]))
	h2.consume(batch(scenario("inv-3", 300)...))
	h2.shutdown()

	// The loss is itself stored and outlives the next restart.
	h3 := newStoredHarness(t, mem, clk, sink, nil)
	h3.consume(batch(scenario("inv-4", 400)...))
	h3.advance(5 * time.Hour)
	for _, id := range []string{"inv-1", "inv-3", "inv-4"} {
		sums := h3.of(id)
		require.NotEmpty(t, sums, id)
		for _, sum := range sums {
			assert.NotEqual(t, contract.StatusFinal, strAttr(sum, contract.AttrStatus), id)
		}
		assert.Contains(t, strsAttr(sums[len(sums)-1], contract.AttrIncompleteReasons), reasonStorageLost, id)
	}
	// After the window, new invocations are final again.
	h3.consume(batch(scenario("inv-5", 500)...))
	require.Len(t, h3.of("inv-5"), 1)
	assert.Equal(t, contract.StatusFinal, strAttr(h3.of("inv-5")[0], contract.AttrStatus))
	h3.shutdown()
}

// A stored record whose bytes were damaged is reported and counted; the
// invocations it named end incomplete with storage_lost and never final,
// others of the same partition are unaffected.
func TestStorageCorruptRecord(t *testing.T) {
	for _, damage := range []string{"flip", "truncate", "header"} {
		t.Run(damage, func(t *testing.T) {
			mem := newMemStorage()
			clk := newFakeClock()
			sink := new(consumertest.TracesSink)
			a, b := scenario("inv-a", 0), scenario("inv-b", 100)
			h := newStoredHarness(t, mem, clk, sink, func(c *Config) {})
			h.p.shards = h.p.shards[:1] // one partition holds both
			h.consume(batch(a[0], a[2]))
			h.consume(batch(b[0], b[1], b[2], b[3]))
			h.shutdown()

			key := journal.LogKey(0, 0) // the record of inv-a's first batch
			data := mem.snapshot()
			v := data[key]
			require.NotNil(t, v)
			switch damage {
			case "flip":
				v[len(v)-7] ^= 0x40
			case "truncate":
				v = v[:len(v)-9]
			case "header":
				v[3] ^= 0x01
			}
			data[key] = v
			mem.restore(data)

			tt := componenttest.NewTelemetry()
			t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
			h2 := newStoredHarnessWith(t, metadatatest.NewSettings(tt), mem, clk, sink, nil)
			h2.p.shards = h2.p.shards[:1]
			assert.Equal(t, int64(1), storageErrors(t, tt)[opDecode])
			h2.consume(batch(a[1], a[3], a[4], a[5])) // the rest of inv-a
			h2.consume(batch(b[4], b[5]))             // the rest of inv-b
			h2.advance(5 * time.Hour)

			for _, sum := range h2.of("inv-a") {
				assert.NotEqual(t, contract.StatusFinal, strAttr(sum, contract.AttrStatus), "inv-a lost its root and tool")
			}
			last := h2.of("inv-a")[len(h2.of("inv-a"))-1]
			assert.True(t, slices.ContainsFunc(strsAttr(last, contract.AttrIncompleteReasons), func(r string) bool {
				return strings.HasPrefix(r, reasonStorageLost)
			}), "reasons %v", strsAttr(last, contract.AttrIncompleteReasons))
			bs := h2.of("inv-b")
			if damage == "header" {
				// Which invocations the record named is unknown: every
				// invocation of the partition is marked.
				assert.Equal(t, contract.StatusIncomplete, strAttr(bs[len(bs)-1], contract.AttrStatus))
				return
			}
			require.Len(t, bs, 2, "pending, then final")
			assert.Equal(t, contract.StatusFinal, strAttr(bs[1], contract.AttrStatus))
			assert.Equal(t, int64(150), intAttr(bs[1], contract.AttrUsageInputTokens))
		})
	}
}

// Compaction folds a partition's log into a snapshot: forgotten
// invocations leave storage, open ones survive it and a restart.
func TestStorageCompactionBoundsStoredState(t *testing.T) {
	mem := newMemStorage()
	clk := newFakeClock()
	sink := new(consumertest.TracesSink)
	mod := func(c *Config) { c.Retention = time.Second }
	h := newStoredHarness(t, mem, clk, sink, mod)
	h.p.store.compactMin = 4 << 10
	open := scenario("inv-open", 0)
	h.consume(batch(open[0], open[1], open[2], open[3]))
	var peak int
	for i := range 300 {
		h.consume(batch(scenario("inv-done-"+string(rune('a'+i%26))+"-"+string(rune('a'+i/26)), uint64(1000+i*20))...))
		h.advance(1500 * time.Millisecond) // retention ends, the invocation is forgotten
		_, size := mem.size()
		peak = max(peak, size)
	}
	keys, size := mem.size()
	t.Logf("after 300 completed invocations: %d keys, %d bytes (peak %d)", keys, size, peak)
	assert.Less(t, peak, 64<<10, "stored bytes stay bounded")
	assert.Less(t, keys, 64)
	h.shutdown()

	h2 := newStoredHarness(t, mem, clk, sink, mod)
	n := 0
	for _, s := range h2.p.shards {
		n += len(s.invs)
	}
	assert.Equal(t, 1, n, "only the open invocation is stored")
	h2.consume(batch(open[4], open[5]))
	sums := h2.of("inv-open")
	require.Equal(t, contract.StatusFinal, strAttr(sums[len(sums)-1], contract.AttrStatus))
	assert.Equal(t, int64(150), intAttr(sums[len(sums)-1], contract.AttrUsageInputTokens))
	h2.shutdown()
}

// A summary whose delivery failed before a crash is sent after the
// restart, as the same span; a summary that was delivered is not sent
// again.
func TestStorageResendsTheOutbox(t *testing.T) {
	mem := newMemStorage()
	clk := newFakeClock()
	sink := &flakySink{}
	h := newStoredHarness(t, mem, clk, &sink.TracesSink, nil)
	h.p.next = sink
	done := scenario("inv-done", 100)
	h.consume(batch(done...))
	h.advance(time.Second) // journals the delivery of inv-done's final
	s := scenario("inv-1", 0)
	sink.refuseSummaries = 1
	// The batch passed through; its summary's send failed and waits in
	// the outbox (a summary error is not the caller's).
	require.NoError(t, h.p.ConsumeTraces(context.Background(), batch(s...)))
	require.Empty(t, h.of("inv-1"))
	// crash

	h2 := newStoredHarness(t, mem, clk, &sink.TracesSink, nil)
	h2.p.next = sink
	h2.advance(10 * time.Millisecond)
	sums := h2.of("inv-1")
	require.Len(t, sums, 1)
	assert.Equal(t, contract.StatusFinal, strAttr(sums[0], contract.AttrStatus))
	assert.Equal(t, summary.SpanIDOf("inv-1", 1, contract.StatusFinal), sums[0].SpanID())
	assert.Equal(t, int64(150), intAttr(sums[0], contract.AttrUsageInputTokens))
	assert.Len(t, h2.of("inv-done"), 1, "a delivered summary is not sent again")
	h2.shutdown()
}
