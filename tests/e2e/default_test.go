package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/testbin"
)

// TestEmbeddedDefaultConfig runs the distribution with no --config: it must
// be the local collector (collector-config/local.yaml, embedded), closing an
// invocation final with exact totals into the traces file.
func TestEmbeddedDefaultConfig(t *testing.T) {
	bin := collectorBin(t)
	addrs, err := testbin.NewCollectorAddrs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	p, err := testbin.StartCollectorConfigs(ctx, bin, nil, addrs, filepath.Join(t.TempDir(), "collector.log"))
	if p != nil {
		t.Cleanup(func() { stopAndReport(t, p) })
	}
	if err != nil {
		t.Fatal(err)
	}

	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	root, chat1, tool, job, cont, chat2 := backgroundInvocation(0x70)
	const id = "e2e-embedded"
	exportOTLP(t, addrs.OTLPGRPC, batch(t0, id, root, chat1, tool, job), batch(t0, id, cont, chat2))

	var got testbin.Summary
	err = testbin.Poll(ctx, 100*time.Millisecond, func() (bool, string, error) {
		sums, err := testbin.ReadSummaries(addrs.TracesFile)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, "", err
		}
		s, ok := testbin.Closed(sums)[id]
		got = s
		return ok, fmt.Sprintf("%d summaries so far", len(sums)), nil
	})
	if err != nil {
		t.Fatalf("summaries in %s: %v", addrs.TracesFile, err)
	}
	if got.Status != contract.StatusFinal || got.Revision != 1 || got.InputTokens != 400 || got.OutputTokens != 70 ||
		got.AfterResultInputTokens != 300 || got.AfterResultOutputTokens != 50 {
		t.Errorf("summary from the embedded default = %+v, want final r1 400/70 with 300/50 after the result", got)
	}
}
