package otelcodex

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/internal/testbin"
)

// testCollector: the real collector's closing summary of every invocation
// of the scenarios equals the in-process ledger's.
func testCollector(t *testing.T, h *harness) {
	if h.col == nil {
		t.Skip("no collector binary (make build); AGENTLEDGER_E2E=1 makes this a failure")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h.mu.Lock()
	ids := append([]string(nil), h.ids...)
	h.mu.Unlock()
	if len(ids) < 8 {
		t.Fatalf("only %d invocations to compare", len(ids))
	}
	local := map[string]instrument.Summary{}
	for _, id := range ids {
		sum, err := h.p.ledger().Wait(ctx, id)
		if err != nil {
			t.Fatalf("ledger %s: %v %+v", id, err, sum)
		}
		local[id] = sum
	}
	if err := h.p.tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	closed, err := testbin.WaitClosed(ctx, h.col.Addrs.TracesFile, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		l, r := local[id], closed[id]
		u := l.Usage
		got := fmt.Sprint(r.Status, r.IncompleteReasons, r.Anomalies, []int64{r.InputTokens, r.OutputTokens, r.CacheReadTokens, r.CacheCreationTokens, r.ReasoningTokens,
			r.AfterResultInputTokens, r.AfterResultOutputTokens, r.ModelCalls, r.BackgroundJobs, r.Continuations})
		want := fmt.Sprint(l.Status, nonNil(l.Reasons), nonNil(l.Anomalies), []int64{u.InputTokens, u.OutputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens, u.ReasoningOutputTokens,
			u.AfterResultInputTokens, u.AfterResultOutputTokens, u.ModelCalls, u.BackgroundJobs, u.Continuations})
		if got != want {
			t.Errorf("invocation %s:\ncollector %s\n   ledger %s", id, got, want)
		}
	}
}
