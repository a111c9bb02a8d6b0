package ledgerrule

import (
	"slices"
	"strings"

	"github.com/agentledger/agentledger/contract"
)

// The lists a Graph keeps (anomalies, unprovable counts, taints) are
// bounded by MaxAnomalies so that a stream of oddly named spans cannot
// grow one invocation without limit. A cut list is never silent: the
// anomalies then hold contract.AnomalyAnomaliesCut, the reasons
// contract.ReasonReasonsCut (an invocation with 64 unprovable counts or
// taints is not final anyway). The anomalies the contract requires
// (followup_interrupted, v0.7; usage_mismatch, v0.8) are never cut: each
// names a member span, so the span bound bounds them.

// requiredAnomaly reports whether a summary must list the anomaly
// whatever else it lists.
func requiredAnomaly(a string) bool {
	return strings.HasPrefix(a, contract.AnomalyFollowupInterrupted+":") ||
		strings.HasPrefix(a, contract.AnomalyUsageMismatch+":")
}

// addAnomaly adds a to list once. Past MaxAnomalies entries that are not
// required, a further one is dropped and the list marked cut.
func addAnomaly(list []string, a string) []string {
	if slices.Contains(list, a) {
		return list
	}
	if !requiredAnomaly(a) {
		kept := 0
		for _, e := range list {
			if !requiredAnomaly(e) {
				kept++
			}
		}
		if kept >= MaxAnomalies {
			if !slices.Contains(list, contract.AnomalyAnomaliesCut) {
				list = append(list, contract.AnomalyAnomaliesCut)
			}
			return list
		}
	}
	return append(list, a)
}

// addReason adds r to a list of reasons (unprovable counts or taints)
// once; past MaxAnomalies it adds contract.ReasonReasonsCut instead, once,
// to the same list, so that the list keeps its meaning (a taint closes at
// once, an unprovable count waits: v0.10 rule 4).
func addReason(list []string, r string) []string {
	if slices.Contains(list, r) {
		return list
	}
	if len(list) >= MaxAnomalies {
		if !slices.Contains(list, contract.ReasonReasonsCut) {
			list = append(list, contract.ReasonReasonsCut)
		}
		return list
	}
	return append(list, r)
}
