package instrument

import (
	"context"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/agentledger/agentledger/contract"
)

// flagMismatch is what an adapter does when the runtime's own usage report
// of a turn differs from the model wire's count (CONTRACT.md v0.8).
var flagMismatch = attribute.Bool(contract.AttrUsageMismatch, true)

// TestLedgerUsageMismatch: the root and both continuations of an
// invocation are flagged; the summary names each flagged span once per
// name, keeps the wire's totals and is final (v0.8).
func TestLedgerUsageMismatch(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	p.chat(ctx, 10, 2)
	_, first := p.tracker.StartBackground(ctx, "shell")
	_, second := p.tracker.StartBackground(ctx, "shell")
	inv.Span().SetAttributes(flagMismatch)
	inv.End()
	first.EndWithFollowup(nil)
	second.EndWithFollowup(nil)
	const onRoot = contract.AnomalyUsageMismatch + ":invoke_agent coder"
	s := p.summary(t, inv.ID())
	wantStatus(t, s, contract.StatusPending)
	if want := []string{onRoot}; !slices.Equal(s.Anomalies, want) {
		t.Errorf("anomalies while pending = %q, want %q", s.Anomalies, want)
	}
	for _, job := range []*Job{first, second} {
		cctx, cont, err := p.tracker.StartContinuation(context.Background(), "coder", "s1", job.Carrier())
		if err != nil {
			t.Fatal(err)
		}
		p.chat(cctx, 5, 1)
		cont.Span().SetAttributes(flagMismatch)
		cont.End()
	}
	s = p.summary(t, inv.ID())
	wantStatus(t, s, contract.StatusFinal)
	got := slices.Sorted(slices.Values(s.Anomalies))
	if want := []string{contract.AnomalyUsageMismatch + ":continue_agent coder", onRoot}; !slices.Equal(got, want) {
		t.Errorf("anomalies = %q, want %q", got, want)
	}
	if s.Usage.InputTokens != 20 || s.Usage.OutputTokens != 4 || s.Usage.ModelCalls != 3 {
		t.Errorf("usage = %+v, want the wire's count", s.Usage)
	}
}

// TestLedgerUsageMismatchNotTrue: false is no anomaly; a value that is
// not a bool is malformed, never final, and names no span (v0.8, v0.6
// rule 1).
func TestLedgerUsageMismatchNotTrue(t *testing.T) {
	for _, tc := range []struct {
		name    string
		value   attribute.KeyValue
		status  Status
		reasons []string
	}{
		{"false", attribute.Bool(contract.AttrUsageMismatch, false), contract.StatusFinal, nil},
		{"string", attribute.String(contract.AttrUsageMismatch, "true"), contract.StatusIncomplete,
			[]string{contract.ReasonMalformedAttribute + ":" + contract.AttrUsageMismatch + " on invoke_agent coder"}},
		{"int", attribute.Int(contract.AttrUsageMismatch, 1), contract.StatusIncomplete,
			[]string{contract.ReasonMalformedAttribute + ":" + contract.AttrUsageMismatch + " on invoke_agent coder"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPipeline(t)
			ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
			p.chat(ctx, 10, 2)
			inv.Span().SetAttributes(tc.value)
			inv.End()
			s := p.summary(t, inv.ID())
			wantStatus(t, s, tc.status, tc.reasons...)
			if len(s.Anomalies) != 0 {
				t.Errorf("anomalies = %q, want none", s.Anomalies)
			}
		})
	}
}

// TestLedgerUsageMismatchUnattributed: the root of a turn nobody owns is
// flagged like any other invoke_agent span.
func TestLedgerUsageMismatchUnattributed(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartUnattributed(context.Background(), "coder", "s1", "unknown_task")
	p.chat(ctx, 10, 2)
	inv.Span().SetAttributes(flagMismatch)
	inv.End()
	s := p.summary(t, inv.ID())
	wantStatus(t, s, contract.StatusIncomplete, contract.ReasonUnattributedWakeup+":unknown_task")
	if want := []string{contract.AnomalyUsageMismatch + ":invoke_agent coder"}; !slices.Equal(s.Anomalies, want) {
		t.Errorf("anomalies = %q, want %q", s.Anomalies, want)
	}
}
