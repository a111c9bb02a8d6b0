package invocationprocessor

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/agentledger/agentledger/contract"
)

// liveHeap is the heap's live bytes after a collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// heapGrowth runs flood against a fresh processor and returns how much
// the live heap grew while the processor holds what the flood left.
func heapGrowth(t *testing.T, mod func(*Config), flood func(*harness)) (int64, *harness) {
	t.Helper()
	h := newHarness(t, 8, mod)
	h.p.next = consumertest.NewNop() // summaries are not kept: only the ledger's memory is measured
	before := liveHeap()
	flood(h)
	after := liveHeap()
	runtime.KeepAlive(h.p)
	return after - before, h
}

// Issue 23's first finding at a quarter of its size: 120 roots with a
// 256 KiB invocation.id and a 16 KiB agent name under
// max_open_invocations 40. Counted by invocations, the ledger held 40
// open and 40 retained closed ones, each with its id; with the id cap
// the flood's spans pass through and nothing of them is held.
func TestFloodOfBigIDs(t *testing.T) {
	const roots, idBytes, nameBytes = 120, 256 << 10, 16 << 10
	flood := func(h *harness) {
		for i := range roots {
			root := openRoot(fmt.Sprintf("%0*d", idBytes, i), uint64(10*(i+1)))
			root.extra = map[string]any{contract.AttrAgentName: strings.Repeat("a", nameBytes), contract.AttrOperationName: contract.OpInvokeAgent}
			require.NoError(t, h.p.ConsumeTraces(t.Context(), batch(root)))
		}
	}
	limitOpen := func(c *Config) { c.MaxOpenInvocations = 40 }
	uncapped, _ := heapGrowth(t, func(c *Config) {
		limitOpen(c)
		c.MaxInvocationIDBytes = 1 << 20
		c.MaxNameBytes = 1 << 20
	}, flood)
	capped, h := heapGrowth(t, limitOpen, flood)
	t.Logf("heap held after the flood: %.1f MiB without the byte caps, %.1f KiB with the defaults (ratio %.4f)",
		float64(uncapped)/(1<<20), float64(capped)/(1<<10), float64(capped)/float64(uncapped))
	assert.Greater(t, uncapped, int64(80*idBytes), "without caps 80 invocations keep their ids")
	assert.Less(t, capped, int64(256<<10), "with the id cap nothing of the flood is held")
	assert.Zero(t, h.p.bounds.open.Load()+h.p.bounds.closed.Load())
}

// A flood within the id cap but with many link targets per invocation
// is bounded by max_open_bytes: the live heap the ledger holds stays
// within twice the budget (open and retained), and the estimate's error
// against the measured heap is stated.
func TestFloodOfLinksWithinByteBudget(t *testing.T) {
	const budget = 8 << 20
	growth, h := heapGrowth(t, func(c *Config) { c.MaxOpenBytes = budget }, func(h *harness) {
		for i := range 200 {
			require.NoError(t, h.p.ConsumeTraces(t.Context(), batch(linking(fmt.Sprintf("inv-%d", i), uint64(100000*(i+1)), 2000))))
		}
	})
	held := h.p.bounds.openBytes.Load() + h.p.bounds.closedBytes.Load()
	t.Logf("heap held %.1f MiB, estimated %.1f MiB (measured/estimated %.2f), budget %d MiB open + %d MiB retained",
		float64(growth)/(1<<20), float64(held)/(1<<20), float64(growth)/float64(held), budget>>20, budget>>20)
	assert.LessOrEqual(t, h.p.bounds.openBytes.Load(), int64(budget))
	assert.LessOrEqual(t, h.p.bounds.closedBytes.Load(), int64(budget))
	assert.Less(t, growth, int64(2*budget)*3/2, "the heap held stays near the budget")
	ratio := float64(growth) / float64(held)
	assert.True(t, ratio > 0.5 && ratio < 1.5, "estimate within -50%%/+50%% of the heap: %.2f", ratio)
}

// The estimate against the measured heap for ordinary invocations: a
// root, a model call, a tool and a background job still owing its
// followup, open.
func TestByteEstimateOfOrdinaryInvocations(t *testing.T) {
	growth, h := heapGrowth(t, nil, func(h *harness) {
		for i := range 5000 {
			s := scenario(fmt.Sprintf("inv-%d", i), uint64(100*i))
			require.NoError(t, h.p.ConsumeTraces(t.Context(), batch(s[:4]...)))
		}
	})
	held := h.p.bounds.openBytes.Load()
	ratio := float64(growth) / float64(held)
	t.Logf("5000 open invocations: heap held %.2f MiB, estimated %.2f MiB (measured/estimated %.2f, %d bytes each estimated)",
		float64(growth)/(1<<20), float64(held)/(1<<20), ratio, held/5000)
	assert.True(t, ratio > 0.5 && ratio < 1.5, "estimate within -50%%/+50%% of the heap: %.2f", ratio)
}
