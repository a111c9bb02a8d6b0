package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
	"github.com/agentledger/agentledger/internal/testbin"
)

// rssMiB reads a process's resident set from /proc (0 when unreadable).
func rssMiB(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb >> 10
		}
	}
	return 0
}

// linkFlood is one span of invocationID holding n followup links to
// spans that never arrive: n span IDs of state in the ledger.
func linkFlood(t0 time.Time, invocationID string, n int, seed byte) ptrace.Traces {
	td := batch(t0, invocationID)
	sp := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().AppendEmpty()
	sp.SetTraceID(traceID(seed))
	sp.SetSpanID(spanID(seed))
	sp.SetName("continue_agent flood")
	sp.SetStartTimestamp(pcommon.NewTimestampFromTime(t0))
	sp.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(time.Second)))
	a := sp.Attributes()
	a.PutStr(contract.AttrInvocationID, invocationID)
	a.PutStr(contract.AttrRole, contract.RoleContinuation)
	a.PutInt(contract.AttrChildren, 0)
	for i := range n {
		l := sp.Links().AppendEmpty()
		l.SetTraceID(traceID(seed + 1))
		var id pcommon.SpanID
		id[0], id[6], id[7] = seed, byte(i>>8), byte(i)
		l.SetSpanID(id)
		l.Attributes().PutStr(contract.AttrLink, contract.LinkFollowup)
	}
	return td
}

// TestSharedCollectorFlood is issue 23's flood at small scale, on the real
// binary with shared.yaml (its memory limiter and bounds scaled down by
// an overlay): the tenant "flooder" sends 120 roots with a 256 KiB
// invocation.id and a 16 KiB agent name, then 1500 invocations of 2000
// link targets each (about 375 MiB of ledger state), while the tenant
// "victim" has five invocations open, each waiting on a background job.
// It reports, as figures, the peak RSS against the memory limit, how
// often the limiter refused and the ledger shed, the victim's
// invocations evicted, and the seconds until the victim's export is
// accepted after the flood, and fails when the victim lost an
// invocation, the peak RSS passed 2.5 times the limit, or the victim
// waited more than 10 seconds.
func TestSharedCollectorFlood(t *testing.T) {
	bin := collectorBin(t)
	dir := t.TempDir()
	addrs, err := testbin.NewCollectorAddrs(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The memory limiter refuses above 110 MiB of heap (150 minus a 40
	// MiB spike) and the ledger sheds from 90 MiB. The byte budgets are
	// set far above (384 MiB for a tenant): only shedding under pressure
	// keeps the heap down and lets the limiter accept data again.
	const limitMiB = 150
	overlay := filepath.Join(dir, "flood.yaml")
	if err := os.WriteFile(overlay, []byte(`processors:
  invocation:
    max_open_invocations: 4000
    max_open_bytes: 536870912     # 512 MiB: only shedding keeps the heap down
    tenant:
      max_open_invocations: 3000
      max_open_bytes: 402653184   # 384 MiB
`), 0o644); err != nil {
		t.Fatal(err)
	}
	passwords := map[string]string{"flooder": "flood-secret", "victim": "victim-secret"}
	ctx := t.Context()
	p, err := testbin.StartCollectorConfigs(ctx, bin,
		[]string{repoPath(t, "collector-config", "local.yaml"), repoPath(t, "collector-config", sharedConfig), overlay},
		addrs, filepath.Join(dir, "collector.log"),
		"AGENTLEDGER_HTPASSWD_FILE="+htpasswdFile(t, passwords), "AGENTLEDGER_COLLECTOR_NAME="+e2eCollector,
		"AGENTLEDGER_DEBUG_VERBOSITY=basic",
		fmt.Sprintf("AGENTLEDGER_MEMORY_LIMIT_MIB=%d", limitMiB), "AGENTLEDGER_MEMORY_SPIKE_MIB=40",
		fmt.Sprintf("AGENTLEDGER_SHED_HEAP_BYTES=%d", 90<<20))
	if p != nil {
		t.Cleanup(func() { stopAndReport(t, p) })
	}
	if err != nil {
		t.Fatal(err)
	}
	flooder, victim := basicAuth("flooder", passwords["flooder"]), basicAuth("victim", passwords["victim"])
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)

	var peak atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if r := rssMiB(p.PID()); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	})

	// The victim's invocations wait on their background jobs.
	type open struct {
		id          string
		cont, chat2 handSpan
	}
	var victims []open
	for i := range 5 {
		root, chat1, tool, job, cont, chat2 := backgroundInvocation(byte(0x10 + 8*i))
		v := open{id: fmt.Sprintf("victim-%d", i), cont: cont, chat2: chat2}
		if err := exportGRPC(t, addrs.OTLPGRPC, victim, batch(t0, v.id, root, chat1, tool, job)); err != nil {
			t.Fatalf("victim's export: %v", err)
		}
		victims = append(victims, v)
	}
	victimStatus := statusClient(t, addrs.Status, statusapi.WithTenant("victim"))
	for _, v := range victims {
		waitInvocation(t, victimStatus, v.id, "waiting on its followup", func(i statusapi.Invocation) bool {
			return i.Waiting != nil && len(i.Waiting.ExpectedFollowups) == 1
		})
	}

	refused := 0
	for i := range 120 {
		root, _, _, _, _, _ := backgroundInvocation(0x80)
		root.attrs[contract.AttrAgentName] = strings.Repeat("a", 16<<10)
		if err := exportGRPC(t, addrs.OTLPGRPC, flooder, batch(t0, fmt.Sprintf("%0*d", 256<<10, i), root)); err != nil {
			refused++
		}
	}
	const floods = 1500
	for i := range floods {
		if err := exportGRPC(t, addrs.OTLPGRPC, flooder, linkFlood(t0, fmt.Sprintf("flood-%d", i), 2000, byte(i))); err != nil {
			refused++
		}
	}
	floodEnd := time.Now()

	// After the flood: the victim's notifications arrive; each export is
	// retried until accepted.
	var waited time.Duration
	retryCtx, cancel := context.WithTimeout(ctx, waitBudget)
	defer cancel()
	for _, v := range victims {
		// 100ms is the sender's retry backoff.
		err := testbin.Poll(retryCtx, 100*time.Millisecond, func() (bool, string, error) {
			err := exportGRPC(t, addrs.OTLPGRPC, victim, batch(t0, v.id, v.cont, v.chat2))
			return err == nil, fmt.Sprint(err), nil
		})
		if err != nil {
			t.Fatalf("victim's export still refused %s after the flood: %v", time.Since(floodEnd), err)
		}
		waited = max(waited, time.Since(floodEnd))
	}
	evicted := 0
	for _, v := range victims {
		got := waitInvocation(t, victimStatus, v.id, "closed", func(i statusapi.Invocation) bool { return !i.Open() })
		if got.Status != statusapi.StatusFinal {
			evicted++
			t.Errorf("victim's %s = %s %v, want final", v.id, got.Status, got.Reasons)
		}
	}
	close(stop)
	sampler.Wait()
	boundHits := telemetryValue(t, addrs.Telemetry, "otelcol_processor_invocation_bound_hits")
	logText, _ := os.ReadFile(p.LogPath)
	t.Logf("collector log: memory limiter refusing data %d times, ledger shed under pressure %d times",
		strings.Count(string(logText), "Refusing data"), strings.Count(string(logText), "memory pressure: shed"))
	t.Logf("flood figures: peak RSS %d MiB against a memory limit of %d MiB (ratio %.2f); flooder exports refused %d of %d; victim invocations evicted %d of 5; victim served again %.1fs after the flood; bound hits %.0f",
		peak.Load(), limitMiB, float64(peak.Load())/limitMiB, refused, 120+floods, evicted, waited.Seconds(), boundHits)
	// The limiter bounds the heap's objects; between collections Go's heap
	// holds up to twice its live objects (GOGC 100), and RSS returns to the
	// OS later still.
	if peak.Load() > 5*limitMiB/2 {
		t.Errorf("peak RSS %d MiB, more than 2.5 times the memory limit %d MiB", peak.Load(), limitMiB)
	}
	if waited > 10*time.Second {
		t.Errorf("the victim was served again %s after the flood, want within 10s", waited)
	}
}
