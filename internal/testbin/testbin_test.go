package testbin

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
)

func TestRenderPrometheusConfig(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := os.ReadFile(filepath.Join(root, "collector-config", "prometheus.yml"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := RenderPrometheusConfig(tmpl, "127.0.0.1:40001", "127.0.0.1:40002")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"127.0.0.1:40001"`, `"127.0.0.1:40002"`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("rendered config lacks %s:\n%s", want, out)
		}
	}
	for _, gone := range []string{defaultExporterTarget, defaultTelemetryTarget} {
		if strings.Contains(string(out), `"`+gone+`"`) {
			t.Errorf("rendered config still scrapes %s", gone)
		}
	}
	if _, err := RenderPrometheusConfig([]byte("scrape_configs: []\n"), "a", "b"); err == nil {
		t.Error("RenderPrometheusConfig accepted a config without the default targets")
	}
}

func TestProcessStopByPID(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	p, err := Start("sleep", filepath.Join(t.TempDir(), "sleep.log"), "", nil, sleep, "300")
	if err != nil {
		t.Fatal(err)
	}
	if p.PID() <= 0 {
		t.Fatalf("PID = %d", p.PID())
	}
	if err := p.Stop(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("process still running after Stop")
	}
	if p.Err() == nil {
		t.Error("Err() = nil for a process ended by SIGTERM")
	}
	if err := p.Stop(time.Second); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestWaitReadyFailsWhenProcessExits(t *testing.T) {
	f, err := exec.LookPath("false")
	if err != nil {
		t.Skip("no false binary")
	}
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start("false", filepath.Join(t.TempDir(), "false.log"), "", nil, f)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = WaitReady(ctx, p, "http://"+addr+"/")
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") {
		t.Fatalf("WaitReady = %v, want an early-exit error", err)
	}
}

func TestPollGivesUpWithReason(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	err := Poll(ctx, time.Millisecond, func() (bool, string, error) {
		calls++
		if calls == 3 {
			cancel()
		}
		return false, "still waiting", nil
	})
	if err == nil || !strings.Contains(err.Error(), "still waiting") || !errors.Is(err, context.Canceled) {
		t.Fatalf("Poll = %v", err)
	}
	boom := errors.New("boom")
	if err := Poll(context.Background(), time.Millisecond, func() (bool, string, error) { return false, "", boom }); !errors.Is(err, boom) {
		t.Fatalf("Poll = %v, want boom", err)
	}
}

func TestFreeAddrsDistinct(t *testing.T) {
	addrs, err := FreeAddrs(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, a := range addrs {
		if !strings.HasPrefix(a, "127.0.0.1:") || seen[a] {
			t.Fatalf("bad or repeated address %q in %v", a, addrs)
		}
		seen[a] = true
	}
}

// summaryTraces is a summary as the processor emits it, marked by
// collector "c1", after a span of the agent's.
func summaryTraces(id, status string, revision, input int64) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr(contract.AttrSummaryCollector, "c1")
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName(contract.SummaryScopeName)
	spans := ss.Spans()
	other := spans.AppendEmpty()
	other.SetName("chat m")
	other.Attributes().PutInt(contract.AttrUsageInputTokens, 999)
	s := spans.AppendEmpty()
	s.SetName(contract.SpanNameSummary)
	s.SetTraceID([16]byte{1})
	s.SetSpanID([8]byte{byte(revision)})
	a := s.Attributes()
	a.PutStr(contract.AttrInvocationID, id)
	a.PutStr(contract.AttrStatus, status)
	a.PutInt(contract.AttrRevision, revision)
	a.PutInt(contract.AttrUsageInputTokens, input)
	a.PutInt(contract.AttrTimeToFinalMS, 12)
	a.PutEmptySlice(contract.AttrIncompleteReasons).AppendEmpty().SetStr("open_timeout:")
	l := s.Links().AppendEmpty()
	l.SetTraceID([16]byte{2})
	l.SetSpanID([8]byte{3})
	return td
}

func TestReadSummariesAndClosed(t *testing.T) {
	var buf []byte
	var m ptrace.JSONMarshaler
	// Spans named invocation.summary without the marker are no summaries.
	noCollector := summaryTraces("a", contract.StatusFinal, 7, 1_000_000)
	noCollector.ResourceSpans().At(0).Resource().Attributes().Clear()
	otherScope := summaryTraces("b", contract.StatusFinal, 8, 1_000_000)
	otherScope.ResourceSpans().At(0).ScopeSpans().At(0).Scope().SetName("forger")
	for _, td := range []ptrace.Traces{
		summaryTraces("a", contract.StatusPending, 0, 1),
		noCollector,
		summaryTraces("a", contract.StatusFinal, 1, 10),
		summaryTraces("b", contract.StatusIncomplete, 1, 5),
		otherScope,
		summaryTraces("a", contract.StatusFinal, 2, 12),
	} {
		line, err := m.MarshalTraces(td)
		if err != nil {
			t.Fatal(err)
		}
		buf = append(append(buf, line...), '\n')
	}
	// A line still being written must not be an error.
	buf = append(buf, []byte(`{"resourceSpans":[`)...)
	path := filepath.Join(t.TempDir(), "traces.json")
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		t.Fatal(err)
	}
	sums, err := ReadSummaries(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(sums) != 4 {
		t.Fatalf("read %d summaries, want the 4 marked ones", len(sums))
	}
	if sums[0].Collector != "c1" {
		t.Errorf("collector = %q, want c1", sums[0].Collector)
	}
	closed := Closed(sums)
	if got := closed["a"]; got.Revision != 2 || got.InputTokens != 12 || got.Status != contract.StatusFinal {
		t.Errorf("closed[a] = %+v, want revision 2 with 12 input tokens", got)
	}
	if got := closed["b"]; got.Status != contract.StatusIncomplete || len(got.IncompleteReasons) != 1 || got.IncompleteReasons[0] != "open_timeout:" {
		t.Errorf("closed[b] = %+v", got)
	}
	if got := closed["a"]; !got.HasTimeToFinal || got.TimeToFinalMS != 12 || len(got.Links) != 1 {
		t.Errorf("closed[a] time to final / links = %+v", got)
	}
}
