package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/agentledger/agentledger/contract"
)

// TestReceiverBoundedCheck feeds the receiver a small workload's spans
// (every one, some twice) and summaries (a pending one, a second closing
// one, one with a stranger's id, a wrong one) and checks that it counts
// each span once, keeps the first closing summary of each invocation,
// and that judge counts the wrong ones.
func TestReceiverBoundedCheck(t *testing.T) {
	cfg := tiny
	w := newWorkload(cfg)
	r := &receiver{warm: make(chan struct{})}
	r.expect(w.want, w.spans, true, 0, false)
	export := func(td ptrace.Traces) {
		t.Helper()
		if _, err := r.Export(context.Background(), ptraceotlp.NewExportRequestFromTraces(td)); err != nil {
			t.Fatal(err)
		}
	}
	for _, req := range w.requests {
		export(req.Traces())
	}
	if back, _, _ := r.progress(); back != w.spans {
		t.Fatalf("%d distinct spans back, want %d (the workload sent %d with duplicates)", back, w.spans, w.sends)
	}
	summaries := ptrace.NewTraces()
	rs := summaries.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr(contract.AttrSummaryCollector, "test")
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName(contract.SummaryScopeName)
	add := func(id, status string, e expected) {
		sp := ss.Spans().AppendEmpty()
		sp.SetName(contract.SpanNameSummary)
		a := sp.Attributes()
		a.PutStr(contract.AttrInvocationID, id)
		a.PutStr(contract.AttrStatus, status)
		a.PutInt(contract.AttrUsageInputTokens, int64(e.input))
		a.PutInt(contract.AttrUsageOutputTokens, int64(e.output))
		a.PutInt(contract.AttrAfterResultInput, int64(e.afterIn))
		a.PutInt(contract.AttrAfterResultOutput, int64(e.afterOut))
		a.PutInt(contract.AttrSpans, int64(e.spans))
	}
	// Invocation 1's first closing summary is one token short; its exact
	// one after it does not replace it. Invocation 2 only has a pending
	// summary, and one whose id has invocation 2's index but not its
	// second half, which is no one's.
	short := w.want[1]
	short.input--
	add(w.want[1].invocationID(1), contract.StatusFinal, short)
	add(w.want[1].invocationID(1), contract.StatusFinal, w.want[1])
	add(w.want[2].invocationID(2), contract.StatusPending, w.want[2])
	stranger := w.want[2]
	stranger.idLow++
	add(stranger.invocationID(2), contract.StatusFinal, w.want[2])
	for i, e := range w.want {
		if i != 1 && i != 2 {
			add(e.invocationID(i), contract.StatusFinal, e)
		}
	}
	export(summaries)
	if _, sums, pending := r.progress(); sums != len(w.want)-1 || pending != 1 {
		t.Fatalf("%d closing summaries and %d pending, want %d and 1", sums, pending, len(w.want)-1)
	}
	select {
	case <-r.done:
		t.Fatal("done without invocation 2's closing summary")
	default:
	}
	// Invocation 2 closes as incomplete, and its spans again change nothing.
	late := ptrace.NewTraces()
	late.ResourceSpans().AppendEmpty().Resource().Attributes().PutStr(contract.AttrSummaryCollector, "test")
	ss = late.ResourceSpans().At(0).ScopeSpans().AppendEmpty()
	ss.Scope().SetName(contract.SummaryScopeName)
	add(w.want[2].invocationID(2), contract.StatusIncomplete, w.want[2])
	ss.Spans().At(0).Attributes().PutEmptySlice(contract.AttrIncompleteReasons).AppendEmpty().SetStr("test_reason")
	export(late)
	export(w.requests[0].Traces())
	if _, err := r.wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if back, _, _ := r.progress(); back != w.spans {
		t.Errorf("%d distinct spans back after a resend, want %d", back, w.spans)
	}
	got, notFinal := r.results()
	sentAt := make([]time.Time, w.nRequests)
	_, final, wrong := judge(w.want, got, notFinal, sentAt)
	if final != len(w.want)-2 || len(wrong) != 2 {
		t.Fatalf("%d final, wrong %q; want %d final and 2 wrong", final, wrong, len(w.want)-2)
	}
	if !strings.HasPrefix(wrong[0], w.want[1].invocationID(1)+": final [] input ") || !strings.Contains(wrong[1], "incomplete [test_reason]") {
		t.Errorf("wrong = %q", wrong)
	}
}
