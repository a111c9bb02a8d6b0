package otelclaudecode

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/internal/testbin"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// collectorSpans returns the spans in the collector's output, with their
// resource's service.name, as they are now.
func (h *harness) collectorSpans(t *testing.T) ([]ptrace.Span, []string) {
	t.Helper()
	tds, err := testbin.ReadTraces(h.col.Addrs.TracesFile)
	if err != nil {
		t.Fatal(err)
	}
	var spans []ptrace.Span
	var services []string
	for _, td := range tds {
		for _, rs := range td.ResourceSpans().All() {
			svc, _ := rs.Resource().Attributes().Get("service.name")
			for _, ss := range rs.ScopeSpans().All() {
				for _, s := range ss.Spans().All() {
					spans = append(spans, s)
					services = append(services, svc.AsString())
				}
			}
		}
	}
	return spans, services
}

// testOwnTelemetry: with Claude Code's own tracing on, exporting to the
// same collector, its spans sit under the run's root (the CLI takes its
// parent from TRACEPARENT), and nothing is counted twice: they carry no
// invocation.id and no gen_ai.usage, so the collector's summary equals the
// ledger's and the scripted model's.
func testOwnTelemetry(t *testing.T, h *harness) {
	if h.col == nil {
		t.Skip("no collector binary (make build); AGENTLEDGER_E2E=1 makes this a failure")
	}
	h.router.SetRules(
		rule("tool", asks("FG-TEL"), calls(scriptedmodel.BashCall("echo traced", "Say traced", false))),
		rule("after-tool", hasToolResult, says("traced")),
	)
	c := h.client(t, "own_telemetry",
		"CLAUDE_CODE_ENABLE_TELEMETRY=1", "CLAUDE_CODE_ENHANCED_TELEMETRY_BETA=1",
		"OTEL_TRACES_EXPORTER=otlp", "OTEL_METRICS_EXPORTER=none", "OTEL_LOGS_EXPORTER=none",
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/json", "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+h.col.Addrs.OTLPHTTP)
	r := h.run(t, testCtx(t), c, "FG-TEL: run echo with tracing on")
	sum := h.wait(t, r)
	wantStatus(t, "invocation", sum, contract.StatusFinal)
	checkUsage(t, "invocation", sum, h.want([]string{"tool", "after-tool"}, nil))
	roots := h.p.spans("invoke_agent "+DefaultAgent, r.Result.InvocationID)
	if len(roots) != 1 {
		t.Fatalf("roots %v", roots)
	}
	root := roots[0].SpanContext()
	// The CLI exported its spans before it exited.
	var interactions, requests int
	waitUntil(t, "Claude Code's spans in the collector", func() bool {
		spans, services := h.collectorSpans(t)
		interactions, requests = 0, 0
		for i, s := range spans {
			if services[i] != "claude-code" {
				continue
			}
			if _, ok := s.Attributes().Get(contract.AttrInvocationID); ok {
				t.Fatalf("Claude Code's span %s carries invocation.id", s.Name())
			}
			for k := range s.Attributes().All() {
				if slices.Contains([]string{contract.AttrUsageInputTokens, contract.AttrUsageOutputTokens}, k) {
					t.Fatalf("Claude Code's span %s carries %s", s.Name(), k)
				}
			}
			if s.TraceID().String() != root.TraceID().String() {
				continue
			}
			switch s.Name() {
			case "claude_code.interaction":
				if s.ParentSpanID().String() == root.SpanID().String() {
					interactions++
				}
			case "claude_code.llm_request":
				requests++
			}
		}
		return interactions == 1 && requests == 2
	})
	h.balance(t, r.Process.SessionID())
}

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
	if len(ids) < 10 {
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

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
