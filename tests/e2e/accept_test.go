package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/testbin"
)

// nestedValue is depth slices around a string.
func nestedValue(depth int) pcommon.Value {
	v := pcommon.NewValueEmpty()
	cur := v
	for range depth {
		cur = cur.SetEmptySlice().AppendEmpty()
	}
	cur.SetStr("leaf")
	return v
}

// deepBatch is spans of one invocation under a resource with a value of
// depth in "deep", each span carrying one in gen_ai.input.messages.
func deepBatch(t0 time.Time, inv string, depth int, spans ...handSpan) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "e2e-agent")
	nestedValue(depth).CopyTo(rs.Resource().Attributes().PutEmpty("deep"))
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("github.com/agentledger/agentledger/tests/e2e")
	for _, s := range spans {
		s.appendTo(ss.Spans(), t0, inv)
		nestedValue(depth).CopyTo(ss.Spans().At(ss.Spans().Len() - 1).Attributes().PutEmpty("gen_ai.input.messages"))
	}
	return td
}

// TestDeepValuesSurviveKill is issue 34's first two observations on the
// real collector with file_storage: a batch whose values nest 17 levels
// (in the resource and in a span attribute the rule does not read) is
// acknowledged, the collector is killed with SIGKILL, and after the
// restart the invocation closes final with exact totals and its resource
// as it came; a batch nested one level beyond the limit is refused before
// it is acknowledged (a permanent error naming the attribute) and gets no
// summary.
func TestDeepValuesSurviveKill(t *testing.T) {
	bin := collectorBin(t)
	sink, sinkAddr := startOTLPSink(t)
	config := localConfigExportingTo(t, sinkAddr)
	dir := t.TempDir()
	addrs, err := testbin.NewCollectorAddrs(dir)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"AGENTLEDGER_DEBUG_VERBOSITY=basic", "AGENTLEDGER_REMOTE_SETTLE=200ms"}
	start := func(n int) *testbin.Process {
		ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
		defer cancel()
		p, err := testbin.StartCollector(ctx, bin, config, addrs, filepath.Join(dir, fmt.Sprintf("collector-%d.log", n)), env...)
		if p != nil {
			t.Cleanup(func() { stopAndReport(t, p) })
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	col := start(0)
	conn, err := grpc.NewClient(addrs.OTLPGRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := ptraceotlp.NewGRPCClient(conn)
	export := func(td ptrace.Traces) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := client.Export(ctx, ptraceotlp.NewExportRequestFromTraces(td))
		return err
	}
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)

	const deep, refused = "deep-17", "deep-65"
	root, chat1, tool, job, cont, chat2 := backgroundInvocation(40)
	if err := export(deepBatch(t0, deep, 17, root, chat1, tool, job)); err != nil {
		t.Fatalf("a batch 17 deep was not acknowledged: %v", err)
	}
	if err := col.Kill(); err != nil {
		t.Fatal(err)
	}
	col = start(1)
	for {
		// The restarted receiver may take a moment to accept.
		if err := export(deepBatch(t0, deep, 17, cont, chat2)); err == nil {
			break
		} else if !strings.Contains(err.Error(), "Unavailable") && !strings.Contains(err.Error(), "connection") {
			t.Fatalf("the rest of the invocation: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	r2, c2, _, _, _, _ := backgroundInvocation(60)
	err = export(deepBatch(t0, refused, 65, r2, c2))
	if err == nil || !strings.Contains(err.Error(), `resource attribute "deep"`) || !strings.Contains(err.Error(), "deeper than 64 levels") {
		t.Errorf("a batch 65 deep: %v, want a refusal naming the attribute", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	err = testbin.Poll(ctx, 100*time.Millisecond, func() (bool, string, error) {
		if _, ok := testbin.Closed(sink.summaries())[deep]; !ok {
			return false, "no closing summary for " + deep + " yet", nil
		}
		return true, "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := col.Stop(testbin.StopTimeout); err != nil {
		t.Fatal(err)
	}
	var sums []testbin.Summary
	for _, s := range sink.summaries() {
		if s.InvocationID == refused {
			t.Errorf("the refused invocation got a summary: %+v", s)
		}
		if s.InvocationID == deep {
			sums = append(sums, s)
		}
	}
	checkExactlyOnce(t, []string{deep}, sums)

	// The summary's resource is the root's, as it came.
	sink.mu.Lock()
	defer sink.mu.Unlock()
	found := false
	for _, td := range sink.got {
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, sp := range ss.Spans().All() {
					if sp.Name() != contract.SpanNameSummary {
						continue
					}
					found = true
					got, ok := rs.Resource().Attributes().Get("deep")
					if !ok || !got.Equal(nestedValue(17)) {
						t.Errorf("summary resource deep = %v (present %v), want the 17-deep value", got.AsRaw(), ok)
					}
				}
			}
		}
	}
	if !found {
		t.Error("no summary span")
	}
}
