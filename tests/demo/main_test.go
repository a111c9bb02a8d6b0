package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/testbin"
)

func TestReportCountsMissingAndDisagreeing(t *testing.T) {
	results := []testbin.AgentInvocation{
		{InvocationID: "a", Scenario: "foreground", Status: contract.StatusFinal, InputTokens: 30, OutputTokens: 6},
		{InvocationID: "b", Scenario: "background", Status: contract.StatusFinal, InputTokens: 40, OutputTokens: 8},
		{InvocationID: "c", Scenario: "warm-second", Status: contract.StatusFinal},
	}
	closed := map[string]testbin.Summary{
		"a": {InvocationID: "a", Status: contract.StatusFinal, InputTokens: 30, OutputTokens: 6, HasTimeToFinal: true},
		"b": {InvocationID: "b", Status: contract.StatusFinal, InputTokens: 41, OutputTokens: 8},
	}
	var out bytes.Buffer
	if bad := report(&out, results, closed); bad != 2 {
		t.Errorf("report counted %d bad invocations, want 2 (b differs, c missing)\n%s", bad, out.String())
	}
	for _, want := range []string{"MISSING", "DIFFERS", "input_tokens: agent 40, summary 41"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestRunLocal runs what `make demo` runs, for one scenario.
func TestRunLocal(t *testing.T) {
	bin := testbin.Require(t, testbin.EnvCollectorBin, "make build", ".bin/otelcol-agentledger")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out bytes.Buffer
	err := run(ctx, options{collector: bin, timeout: 2 * time.Minute, scenario: "background", workDir: t.TempDir()}, &out)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "summaries agree with the agent's own counts") || !strings.Contains(out.String(), "background") {
		t.Errorf("demo output:\n%s", out.String())
	}
}
