package ledgerrule

import "github.com/agentledger/agentledger/contract"

// Obligations is what a half knows of an invocation at one moment, in the
// terms of CONTRACT.md's finality rule. Each half keeps its own graph
// (spans, counts, links) and reduces it to these; the decision below is
// the only one.
type Obligations struct {
	// RootArrived: condition 1.
	RootArrived bool
	// Open counts the declared children, followups and detached spans
	// that have not arrived (conditions 2 and 3, v0.6 rule 4).
	Open int
	// Unprovable: a count cannot be proven (invalid_count) or spans were
	// left unindexed (span_limit).
	Unprovable bool
	// Settling: a remote subtree's latest arrival is less than
	// remote_settle ago (condition 4).
	Settling bool
	// Tainted: a rule forbids final whatever else holds (v0.2 rules 3, 5
	// and 7, v0.5, v0.6: malformed input, missing or invalid usage,
	// unattributed turns, abandoned followups, unrecorded spans).
	Tainted bool
}

// Met reports conditions 1-3: every obligation the invocation declared is
// discharged, and every count could be proven.
func (o Obligations) Met() bool {
	return o.RootArrived && o.Open <= 0 && !o.Unprovable
}

// Closable reports whether the invocation may be closed now without a
// timer: its obligations are met and its remote subtrees have settled.
// It then closes final, or incomplete when tainted (rules 3, 5, 7 do not
// wait for open_timeout).
func (o Obligations) Closable() bool { return o.Met() && !o.Settling }

// Status is the status a summary emitted now carries, whatever its
// revision: final only when conditions 1-4 hold and nothing taints the
// invocation; incomplete otherwise.
func (o Obligations) Status() string {
	if o.Closable() && !o.Tainted {
		return contract.StatusFinal
	}
	return contract.StatusIncomplete
}
