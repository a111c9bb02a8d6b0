package e2e

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentledger/agentledger/internal/testbin"
)

// waitBudget bounds every wait for the real processes in these tests.
const waitBudget = 90 * time.Second

func repoPath(t testing.TB, rel ...string) string {
	t.Helper()
	root, err := testbin.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(append([]string{root}, rel...)...)
}

func collectorBin(t testing.TB) string {
	t.Helper()
	return testbin.Require(t, testbin.EnvCollectorBin, "make build", ".bin/otelcol-agentledger")
}

func jaegerBin(t testing.TB) string {
	t.Helper()
	return testbin.Require(t, testbin.EnvJaegerBin, "make jaeger", ".bin/jaeger")
}

func prometheusBin(t testing.TB) string {
	t.Helper()
	return testbin.Require(t, testbin.EnvPrometheusBin, "make prometheus", "/usr/bin/prometheus")
}

// startCollector starts the distribution with the named config from
// collector-config on free ports; it is stopped by PID when the test ends.
func startCollector(t testing.TB, bin, config string, addrs testbin.CollectorAddrs, extraEnv ...string) *testbin.Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	p, err := testbin.StartCollector(ctx, bin, repoPath(t, "collector-config", config), addrs,
		filepath.Join(t.TempDir(), "collector.log"), extraEnv...)
	if p != nil {
		t.Cleanup(func() { stopAndReport(t, p) })
	}
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func stopAndReport(t testing.TB, p *testbin.Process) {
	if err := p.Stop(testbin.StopTimeout); err != nil {
		t.Errorf("stop %s: %v", p.Name, err)
	}
	if t.Failed() {
		t.Logf("--- %s log (%s), last lines:\n%s", p.Name, p.LogPath, p.Tail(80))
	}
}

// exportOTLP sends each batch, in order, to an OTLP/gRPC receiver.
func exportOTLP(t testing.TB, endpoint string, batches ...ptrace.Traces) {
	t.Helper()
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := ptraceotlp.NewGRPCClient(conn)
	for i, td := range batches {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := client.Export(ctx, ptraceotlp.NewExportRequestFromTraces(td))
		cancel()
		if err != nil {
			t.Fatalf("export batch %d to %s: %v", i, endpoint, err)
		}
	}
}
