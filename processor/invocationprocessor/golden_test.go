package invocationprocessor

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/ptracetest"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
)

// Run with -update to rewrite the golden files after an intended change.
var update = flag.Bool("update", false, "rewrite testdata/golden files")

// emitted collects every summary batch the sink received, in order.
func (h *harness) emitted() ptrace.Traces {
	out := ptrace.NewTraces()
	for _, td := range h.sink.AllTraces() {
		if len(summarySpans([]ptrace.Traces{td})) == 0 {
			continue
		}
		for i := 0; i < td.ResourceSpans().Len(); i++ {
			td.ResourceSpans().At(i).CopyTo(out.ResourceSpans().AppendEmpty())
		}
	}
	return out
}

func TestGoldenSummaries(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		run  func(h *harness)
	}{
		{
			name: "final",
			mod: func(c *Config) {
				c.Prices = map[string]Price{"claude-sonnet-4": {Input: 3, Output: 15, CacheRead: 0.3, CacheCreation: 3.75}}
			},
			run: func(h *harness) {
				spans := scenario("inv-golden", 0)
				spans[1].extra = map[string]any{contract.AttrResponseModel: "claude-sonnet-4"}
				spans[5].extra = map[string]any{contract.AttrResponseModel: "claude-sonnet-4"}
				h.consume(batch(spans...))
			},
		},
		{
			name: "pending_then_final",
			run: func(h *harness) {
				spans := scenario("inv-golden", 0)
				h.consume(batch(spans[:4]...))
				h.consume(batch(spans[4:]...))
			},
		},
		{
			name: "incomplete_root_missing",
			mod:  func(c *Config) { c.OpenTimeout = time.Hour },
			run: func(h *harness) {
				h.consume(batch(scenario("inv-golden", 0)[1:]...))
				h.advance(time.Hour)
			},
		},
		{
			name: "late_span_revision",
			run: func(h *harness) {
				h.consume(batch(scenario("inv-golden", 0)...))
				h.consume(batch(sp{inv: "inv-golden", name: "chat", trace: 2, id: 12, parent: 10, start: 23, end: 31,
					op: contract.OpChat, usage: tokens(1, 2)}))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, 1, tt.mod)
			tt.run(h)
			got := h.emitted()
			path := filepath.Join("testdata", "golden", tt.name+".json")
			if *update {
				b, err := (&ptrace.JSONMarshaler{}).MarshalTraces(got)
				require.NoError(t, err)
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, b, 0o600))
			}
			b, err := os.ReadFile(path)
			require.NoError(t, err)
			want, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces(b)
			require.NoError(t, err)
			require.NoError(t, ptracetest.CompareTraces(want, got))
		})
	}
}
