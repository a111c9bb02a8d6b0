package e2e

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/agentledger/internal/testbin"
)

// TestReaperAsksTheCollector runs the reference agent's long-background
// scenario exporting to the real collector (collector-config/local.yaml)
// with its idle reaper asking the collector's invocation_status API
// (-status): the session is kept while its job runs (the collector says it
// owes work) and reaped once the invocation's continuation has reached the
// collector. The agent itself fails if the session is reaped early or kept
// after final.
func TestReaperAsksTheCollector(t *testing.T) {
	bin := collectorBin(t)
	agentBin := testbin.BuildT(t, "./examples/shellagent")
	addrs, err := testbin.NewCollectorAddrs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	startCollector(t, bin, "local.yaml", addrs, "AGENTLEDGER_DEBUG_VERBOSITY=basic")

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var logs bytes.Buffer
	invs, err := testbin.RunAgent(ctx, agentBin, &logs, "-scenario", "long-background",
		"-otlp", addrs.OTLPGRPC, "-status", "http://"+addrs.Status, "-timeout", "1m", "-remote-settle", "1s")
	if err != nil {
		t.Fatalf("long-background with the collector's answers: %v", err)
	}
	if len(invs) == 0 {
		t.Fatal("shellagent reported no invocation")
	}
	out := logs.String()
	kept := strings.Count(out, `msg="idle session owes work; kept"`)
	if kept == 0 || kept != strings.Count(out, "source=collector") {
		t.Errorf("the reaper kept the session %d times, want every minute of the job and each on the collector's word:\n%s", kept, out)
	}
	if strings.Contains(out, "source=ledger") || strings.Contains(out, "cannot ask the collector") {
		t.Errorf("the reaper did not rely on the collector:\n%s", out)
	}
}
