package testbin

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// LocalCollector is a collector the test started with
// collector-config/local.yaml.
type LocalCollector struct {
	Addrs CollectorAddrs
	Proc  *Process
}

// StartLocalCollector starts the distribution binary (EnvCollectorBin, or
// what `make build` made; the test fails without one) with
// collector-config/local.yaml on free loopback ports and extraEnv, waits
// until it is ready, and stops it when the test ends, printing the tail
// of its log when the test failed. It is what the adapters' tests that
// compare the ledger with the real collector share.
func StartLocalCollector(t testing.TB, extraEnv ...string) *LocalCollector {
	t.Helper()
	bin := Require(t, EnvCollectorBin, "make build", ".bin/otelcol-agentledger")
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	addrs, err := NewCollectorAddrs(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	proc, err := StartCollector(ctx, bin, filepath.Join(root, "collector-config", "local.yaml"), addrs, filepath.Join(dir, "collector.log"), extraEnv...)
	if proc != nil {
		t.Cleanup(func() {
			if err := proc.Stop(StopTimeout); err != nil {
				t.Logf("stop collector: %v", err)
			}
			if t.Failed() {
				t.Logf("--- collector log, last lines:\n%s", proc.Tail(30))
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return &LocalCollector{Addrs: addrs, Proc: proc}
}
