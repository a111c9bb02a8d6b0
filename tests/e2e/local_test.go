package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/testbin"
)

// handSpan is one span of a hand-made invocation.
type handSpan struct {
	trace    pcommon.TraceID
	id       pcommon.SpanID
	parent   pcommon.SpanID
	name     string
	start    time.Duration // offset from the invocation's t0
	end      time.Duration
	attrs    map[string]any
	followup pcommon.SpanID // non-empty: a followup link to this span in traceOf
	traceOf  pcommon.TraceID
}

func (s handSpan) appendTo(spans ptrace.SpanSlice, t0 time.Time, invocationID string) {
	sp := spans.AppendEmpty()
	sp.SetTraceID(s.trace)
	sp.SetSpanID(s.id)
	sp.SetParentSpanID(s.parent)
	sp.SetName(s.name)
	sp.SetStartTimestamp(pcommon.NewTimestampFromTime(t0.Add(s.start)))
	sp.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(s.end)))
	a := sp.Attributes()
	a.PutStr(contract.AttrInvocationID, invocationID)
	for k, v := range s.attrs {
		switch v := v.(type) {
		case string:
			a.PutStr(k, v)
		case int:
			a.PutInt(k, int64(v))
		case bool:
			a.PutBool(k, v)
		default:
			panic(fmt.Sprintf("attribute %s: unsupported %T", k, v))
		}
	}
	if !s.followup.IsEmpty() {
		l := sp.Links().AppendEmpty()
		l.SetTraceID(s.traceOf)
		l.SetSpanID(s.followup)
		l.Attributes().PutStr(contract.AttrLink, contract.LinkFollowup)
	}
}

// batch puts spans into one OTLP request from service "e2e-agent".
func batch(t0 time.Time, invocationID string, spans ...handSpan) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "e2e-agent")
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("github.com/agentledger/agentledger/tests/e2e")
	for _, s := range spans {
		s.appendTo(ss.Spans(), t0, invocationID)
	}
	return td
}

func traceID(b byte) pcommon.TraceID {
	return pcommon.TraceID{0xe2, 0xe0, b, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}
}
func spanID(b byte) pcommon.SpanID { return pcommon.SpanID{0xe2, 0xe0, b, 1, 2, 3, 4, 5} }

// backgroundInvocation is an invocation whose root returns while a
// background shell job runs; the job's completion wakes a continuation (a
// new trace) that makes one more model call.
//
//	trace A: invoke_agent (0-1s, 2 children)
//	           chat (0.1-0.4s)        in 100, out 20, cache read 40, reasoning 5
//	           execute_tool (0.5-0.51s, 1 child)
//	             background shell (0.505-3s, 1 followup)
//	trace B: continue_agent (3.1-4s, 1 child, followup link to the job)
//	           chat (3.2-3.9s)        in 300, out 50, cache read 200, cache creation 10
func backgroundInvocation(n byte) (root, chat1, tool, job, cont, chat2 handSpan) {
	a, b := traceID(n), traceID(n+1)
	model := map[string]any{
		contract.AttrOperationName: contract.OpChat,
		contract.AttrRequestModel:  "scripted-1",
		contract.AttrChildren:      0,
	}
	with := func(base map[string]any, kv ...any) map[string]any {
		out := map[string]any{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}
	root = handSpan{trace: a, id: spanID(n), name: "invoke_agent e2e", start: 0, end: time.Second, attrs: map[string]any{
		contract.AttrRole: contract.RoleRoot, contract.AttrChildren: 2,
		contract.AttrOperationName: contract.OpInvokeAgent, contract.AttrAgentName: "e2e",
		contract.AttrConversationID: "session-1",
	}}
	chat1 = handSpan{trace: a, id: spanID(n + 1), parent: root.id, name: "chat scripted-1",
		start: 100 * time.Millisecond, end: 400 * time.Millisecond, attrs: with(model,
			contract.AttrUsageInputTokens, 100, contract.AttrUsageOutputTokens, 20,
			contract.AttrUsageCacheReadTokens, 40, contract.AttrUsageReasoningTokens, 5)}
	tool = handSpan{trace: a, id: spanID(n + 2), parent: root.id, name: "execute_tool shell",
		start: 500 * time.Millisecond, end: 510 * time.Millisecond, attrs: map[string]any{
			contract.AttrOperationName: contract.OpExecuteTool, contract.AttrToolName: "shell", contract.AttrChildren: 1,
		}}
	job = handSpan{trace: a, id: spanID(n + 3), parent: tool.id, name: "background shell",
		start: 505 * time.Millisecond, end: 3 * time.Second, attrs: map[string]any{
			contract.AttrRole: contract.RoleBackground, contract.AttrFollowups: 1, contract.AttrChildren: 0,
		}}
	cont = handSpan{trace: b, id: spanID(n + 4), name: "continue_agent e2e",
		start: 3100 * time.Millisecond, end: 4 * time.Second, followup: job.id, traceOf: a, attrs: map[string]any{
			contract.AttrRole: contract.RoleContinuation, contract.AttrChildren: 1,
			contract.AttrOperationName: contract.OpInvokeAgent, contract.AttrAgentName: "e2e",
		}}
	chat2 = handSpan{trace: b, id: spanID(n + 5), parent: cont.id, name: "chat scripted-1",
		start: 3200 * time.Millisecond, end: 3900 * time.Millisecond, attrs: with(model,
			contract.AttrUsageInputTokens, 300, contract.AttrUsageOutputTokens, 50,
			contract.AttrUsageCacheReadTokens, 200, contract.AttrUsageCacheCreateTokens, 10)}
	return
}

// TestLocalConfigSummarizesOTLP runs the distribution with
// collector-config/local.yaml, sends hand-made spans over OTLP/gRPC out of
// order and partly twice, and reads the summaries back from the file
// exporter.
func TestLocalConfigSummarizesOTLP(t *testing.T) {
	bin := collectorBin(t)
	addrs, err := testbin.NewCollectorAddrs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	col := startCollector(t, bin, "local.yaml", addrs)

	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	root, chat1, tool, job, cont, chat2 := backgroundInvocation(0x10)
	const done = "e2e-final"
	// The continuation arrives first, the middle batch twice, the root last.
	exportOTLP(t, addrs.OTLPGRPC,
		batch(t0, done, cont, chat2),
		batch(t0, done, chat1, job),
		batch(t0, done, chat1, job),
		batch(t0, done, tool, root),
	)
	// A second invocation whose job never reports back stays open.
	oroot, ochat1, otool, ojob, _, _ := backgroundInvocation(0x40)
	const open = "e2e-open"
	exportOTLP(t, addrs.OTLPGRPC, batch(t0, open, ochat1, otool, ojob, oroot))

	ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	var closed map[string]testbin.Summary
	var all []testbin.Summary
	err = testbin.Poll(ctx, 100*time.Millisecond, func() (bool, string, error) {
		sums, err := testbin.ReadSummaries(addrs.TracesFile)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, "", err
		}
		all = sums
		closed = testbin.Closed(sums)
		_, haveDone := closed[done]
		havePending := slices.ContainsFunc(sums, func(s testbin.Summary) bool {
			return s.InvocationID == open && s.Status == contract.StatusPending
		})
		return haveDone && havePending, fmt.Sprintf("%d summaries so far", len(sums)), nil
	})
	if err != nil {
		t.Fatalf("summaries in %s: %v", addrs.TracesFile, err)
	}

	got := closed[done]
	want := testbin.Summary{
		TraceID: root.trace.String(), InvocationID: done, ConversationID: "session-1", AgentName: "e2e",
		Status: contract.StatusFinal, Revision: 1,
		InputTokens: 400, OutputTokens: 70, CacheReadTokens: 240, CacheCreationTokens: 10, ReasoningTokens: 5,
		AfterResultInputTokens: 300, AfterResultOutputTokens: 50,
		ModelCalls: 2, BackgroundJobs: 1, Continuations: 1, Spans: 6, Traces: 2, DuplicateSpans: 2,
		TimeToFinalMS: 3000, HasTimeToFinal: true,
		Links: []string{cont.trace.String() + "/" + cont.id.String()},
	}
	got.SpanID = "" // the processor picks it
	got.Service = ""
	if !summaryEqual(got, want) {
		t.Errorf("final summary\n got %+v\nwant %+v", got, want)
	}
	for _, s := range all {
		if s.InvocationID == done && s.Status != contract.StatusFinal {
			t.Errorf("invocation %s also had a %s summary (revision %d): %+v", done, s.Status, s.Revision, s)
		}
	}
	if _, ok := closed[open]; ok {
		t.Errorf("open invocation %s was closed: %+v", open, closed[open])
	}

	// Every span passes through unchanged next to the summaries.
	seen := passedThrough(t, addrs.TracesFile)
	for _, s := range []handSpan{root, chat1, tool, job, cont, chat2, oroot, ochat1, otool, ojob} {
		if !seen[s.id] {
			t.Errorf("span %s %s not in the file exporter output", s.name, s.id)
		}
	}

	// Stopping the collector closes nothing: the open invocation stays open
	// in local.yaml's file_storage for the next start
	// (TestGracefulRestartKeepsOpenInvocations continues one).
	if err := col.Stop(testbin.StopTimeout); err != nil {
		t.Fatal(err)
	}
	sums, err := testbin.ReadSummaries(addrs.TracesFile)
	if err != nil {
		t.Fatal(err)
	}
	if last, ok := testbin.Closed(sums)[open]; ok {
		t.Errorf("stopping the collector closed %s: %+v", open, last)
	}
}

// summaryEqual compares two summaries but for the emitting collector's
// name (the host's unless configured; testbin reads only marked summaries).
func summaryEqual(a, b testbin.Summary) bool {
	a.Collector, b.Collector = "", ""
	return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b)
}

func hasReason(reasons []string, kind string) bool {
	return slices.ContainsFunc(reasons, func(r string) bool { return r == kind || strings.HasPrefix(r, kind+":") })
}

// passedThrough returns the span IDs of every non-summary span in a file
// exporter's output.
func passedThrough(t *testing.T, path string) map[pcommon.SpanID]bool {
	t.Helper()
	tds, err := testbin.ReadTraces(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[pcommon.SpanID]bool{}
	for _, td := range tds {
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, sp := range ss.Spans().All() {
					if sp.Name() != contract.SpanNameSummary {
						seen[sp.SpanID()] = true
					}
				}
			}
		}
	}
	return seen
}
