package invocationprocessor

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/featuregate"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/xpdata/pref"

	"github.com/agentledger/agentledger/contract"
)

// fanoutOfTwo stands for the collector's fanout to two exporters, each
// behind the reference counting the collector puts in front of every
// consumer: data no one owns yet is taken by the first exporter and, with
// pdata.useProtoPooling, returned to the pool when it is done. Each
// exporter keeps a copy of what it read.
type fanoutOfTwo struct {
	mu        sync.Mutex
	exporters [2][]ptrace.Traces
}

func (*fanoutOfTwo) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (f *fanoutOfTwo) ConsumeTraces(_ context.Context, td ptrace.Traces) error {
	for i := range f.exporters {
		func() {
			if pref.MarkPipelineOwnedTraces(td) {
				defer pref.UnrefTraces(td)
			}
			cp := ptrace.NewTraces()
			td.CopyTo(cp)
			f.mu.Lock()
			f.exporters[i] = append(f.exporters[i], cp)
			f.mu.Unlock()
		}()
	}
	return nil
}

// TestSummariesSurviveProtoPooling sends summaries through a fanout of two
// exporters with the pdata.useProtoPooling gate on: the processor hands
// them on as pipeline-owned data, so the first exporter does not release
// them before the second has read them, and both see the same final
// summaries.
func TestSummariesSurviveProtoPooling(t *testing.T) {
	const gate = "pdata.useProtoPooling"
	require.NoError(t, featuregate.GlobalRegistry().Set(gate, true))
	t.Cleanup(func() { require.NoError(t, featuregate.GlobalRegistry().Set(gate, false)) })

	next := new(fanoutOfTwo)
	cfg := createDefaultConfig().(*Config)
	p, err := newProcessor(settingsForTest(), cfg, next, newFakeClock(), 4)
	require.NoError(t, err)
	for _, inv := range []string{"inv-1", "inv-2", "inv-3"} {
		require.NoError(t, p.ConsumeTraces(context.Background(), batch(scenario(inv, 100*uint64(len(inv)+int(inv[4])))...)))
	}
	finals := func(tds []ptrace.Traces) map[string]int64 {
		out := map[string]int64{}
		for _, s := range summarySpans(tds) {
			if strAttr(s, contract.AttrStatus) == contract.StatusFinal {
				out[strAttr(s, contract.AttrInvocationID)] = intAttr(s, contract.AttrUsageInputTokens)
			}
		}
		return out
	}
	want := map[string]int64{"inv-1": 150, "inv-2": 150, "inv-3": 150}
	require.Equal(t, want, finals(next.exporters[0]))
	require.Equal(t, want, finals(next.exporters[1]))
}
