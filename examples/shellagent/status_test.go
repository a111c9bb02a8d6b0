package main

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/agentledger/internal/testbin"
)

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestReaperAsksTheCollector runs the long-background scenario exporting to
// the real collector (collector-config/local.yaml) with its idle reaper
// asking the collector's invocation_status API: the session is kept while
// its job runs (the collector says it owes work) and reaped once the
// invocation's continuation has reached the collector. The scenario itself
// fails if the session is reaped early or kept after final.
func TestReaperAsksTheCollector(t *testing.T) {
	bin := testbin.Require(t, testbin.EnvCollectorBin, "make build", ".bin/otelcol-agentledger")
	root, err := testbin.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := testbin.NewCollectorAddrs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	col, err := testbin.StartCollector(ctx, bin, filepath.Join(root, "collector-config", "local.yaml"), addrs,
		filepath.Join(t.TempDir(), "collector.log"), "AGENTLEDGER_DEBUG_VERBOSITY=basic")
	if col != nil {
		t.Cleanup(func() {
			if err := col.Stop(testbin.StopTimeout); err != nil {
				t.Error(err)
			}
			if t.Failed() {
				t.Logf("collector log:\n%s", col.Tail(40))
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}

	var logs syncBuffer
	var stdout bytes.Buffer
	cfg := config{scenario: "long-background", otlp: addrs.OTLPGRPC, status: []string{"http://" + addrs.Status},
		timeout: time.Minute, remoteSettle: time.Second}
	if err := run(ctx, cfg, &stdout, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatalf("long-background with the collector's answers: %v\n%s", err, logs.String())
	}
	kept := strings.Count(logs.String(), `msg="idle session owes work; kept"`)
	if kept == 0 || kept != strings.Count(logs.String(), "source=collector") {
		t.Errorf("the reaper kept the session %d times, want every minute of the job and each on the collector's word:\n%s", kept, logs.String())
	}
	if strings.Contains(logs.String(), "source=ledger") || strings.Contains(logs.String(), "cannot ask the collector") {
		t.Errorf("the reaper did not rely on the collector:\n%s", logs.String())
	}
}

func TestStatusNeedsOTLP(t *testing.T) {
	_, err := newApp(context.Background(), config{status: []string{"http://127.0.0.1:1"}}, slog.New(slog.NewTextHandler(testWriter{t}, nil)))
	if err == nil || !strings.Contains(err.Error(), "-status needs -otlp") {
		t.Errorf("newApp with -status and no -otlp: %v", err)
	}
}
