package ledgerrule

import (
	"fmt"
	"slices"
	"testing"

	"github.com/agentledger/agentledger/contract"
)

// Issue 34, observation 3: past MaxAnomalies other anomalies, a
// followup_interrupted or usage_mismatch entry the contract requires is
// still listed, and the cut list says it was cut.
func TestRequiredAnomaliesAreNeverCut(t *testing.T) {
	var g Graph
	for i := range MaxAnomalies + 10 {
		g.AddAnomaly(fmt.Sprintf("%s:span %d", contract.AnomalyExtraChildren, i))
	}
	required := []string{
		contract.AnomalyFollowupInterrupted + ":background shell",
		contract.AnomalyUsageMismatch + ":invoke_agent coder",
	}
	for _, a := range required {
		g.AddAnomaly(a)
		g.AddAnomaly(a) // once
	}
	g.AddAnomaly(contract.AnomalyLateSpan + ":chat") // cut
	got := g.AnomaliesFor(true)
	for _, a := range required {
		if n := entries(got, a); n != 1 {
			t.Errorf("%s listed %d times", a, n)
		}
	}
	if entries(got, contract.AnomalyAnomaliesCut) != 1 {
		t.Errorf("a cut list does not say so: %v", got)
	}
	if slices.Contains(got, contract.AnomalyLateSpan+":chat") {
		t.Error("the bound does not hold for other anomalies")
	}
	if want := MaxAnomalies + len(required) + 1; len(got) != want {
		t.Errorf("%d entries, want %d", len(got), want)
	}

	// An uncut list has no marker.
	var h Graph
	for i := range MaxAnomalies {
		h.AddAnomaly(fmt.Sprintf("%s:span %d", contract.AnomalyExtraChildren, i))
	}
	if slices.Contains(h.AnomaliesFor(true), contract.AnomalyAnomaliesCut) {
		t.Error("a list at the bound, not past it, is not cut")
	}
}

// Cut reasons say so, in the list that was cut (a taint closes at once,
// an unprovable count waits).
func TestCutReasonsSaySo(t *testing.T) {
	var g Graph
	for i := range MaxAnomalies + 3 {
		g.AddInvalid(fmt.Sprintf("%s:span %d", ReasonInvalidCount, i))
	}
	if len(g.Taints()) != 0 {
		t.Fatalf("cut unprovable counts became taints: %v", g.Taints())
	}
	if entries(g.Invalid(), contract.ReasonReasonsCut) != 1 || len(g.Invalid()) != MaxAnomalies+1 {
		t.Fatalf("invalid counts: %d entries, marker %d", len(g.Invalid()), entries(g.Invalid(), contract.ReasonReasonsCut))
	}
	for i := range MaxAnomalies + 3 {
		g.AddTaint(fmt.Sprintf("%s:span %d", contract.ReasonMalformedLink, i))
	}
	if entries(g.Taints(), contract.ReasonReasonsCut) != 1 {
		t.Fatalf("taints: marker %d", entries(g.Taints(), contract.ReasonReasonsCut))
	}
	if n := entries(g.Reasons(0, &GraphConfig{}), contract.ReasonReasonsCut); n != 1 {
		t.Errorf("the reasons list reasons_cut %d times", n)
	}
}

func entries(list []string, s string) int {
	n := 0
	for _, e := range list {
		if e == s {
			n++
		}
	}
	return n
}
