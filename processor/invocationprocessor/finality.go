package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"github.com/agentledger/agentledger/internal/ledgerrule"
)

// The finality rule is internal/ledgerrule's Graph, the one
// implementation both halves use; these read it in the processor's terms.

// graphConfig is cfg's rule configuration; nil reads as "not settled"
// for an invocation with a remote span.
func (cfg *ledgerConfig) graphConfig() *ledgerrule.GraphConfig {
	if cfg == nil {
		return nil
	}
	return &cfg.graph
}

// obligations reduces the invocation to the terms of the finality rule.
func (inv *invocation) obligations(now int64, cfg *ledgerConfig) ledgerrule.Obligations {
	return inv.Obligations(now, 0, cfg.graphConfig())
}

// obligationsMet reports conditions 1-3 of CONTRACT.md (and that nothing
// made them unprovable).
func (inv *invocation) obligationsMet() bool {
	return inv.obligations(0, nil).Met()
}

// settled reports condition 4: every remote subtree's latest arrival is
// at least remote_settle ago.
func (inv *invocation) settled(now int64, cfg *ledgerConfig) bool {
	return inv.Settled(now, cfg.graphConfig())
}

// provable reports whether conditions 1-4 hold now.
func (inv *invocation) provable(now int64, cfg *ledgerConfig) bool {
	return inv.obligations(now, cfg).Closable()
}

// status is the status a summary emitted now carries: final only when
// conditions 1-4 hold and nothing taints the invocation (v0.2 rules 3, 5,
// 7), whatever the revision.
func (inv *invocation) status(now int64, cfg *ledgerConfig) string {
	return inv.obligations(now, cfg).Status()
}

// reasons lists why the invocation is not final (Graph.Reasons), then the
// forced reason.
func (inv *invocation) reasons(now int64, cfg *ledgerConfig) []string {
	out := inv.Reasons(now, cfg.graphConfig())
	if inv.Forced != "" && inv.Forced != reasonSpanLimit {
		out = append(out, inv.Forced)
	}
	return out
}

// anomalies lists the invocation's anomalies (Graph.AnomaliesFor).
func (inv *invocation) anomalies(final bool) []string { return inv.AnomaliesFor(final) }
