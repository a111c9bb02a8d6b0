package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"slices"
	"sort"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/ledgerrule"
)

// obligations reduces the invocation to the terms of the finality rule,
// which internal/ledgerrule decides for both halves.
func (inv *invocation) obligations(now int64, cfg *ledgerConfig) ledgerrule.Obligations {
	return ledgerrule.Obligations{
		RootArrived: inv.RootArrived,
		Open:        inv.Open,
		Unprovable:  len(inv.Invalid) > 0 || inv.SpanLimitHit,
		Settling:    !inv.settled(now, cfg),
		Tainted:     len(inv.Taints) > 0,
	}
}

// obligationsMet reports conditions 1-3 of CONTRACT.md (and that nothing
// made them unprovable).
func (inv *invocation) obligationsMet() bool {
	return inv.obligations(0, nil).Met()
}

// settled reports condition 4. It is checked over the whole invocation: the
// latest arrival anywhere is at least as late as the latest in any remote
// subtree, so this never declares final earlier than the contract allows,
// and it needs no walk up the parent chain per span.
func (inv *invocation) settled(now int64, cfg *ledgerConfig) bool {
	return !inv.HasRemote || (cfg != nil && now-inv.LastArrival >= cfg.settle)
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

// reasons lists why the invocation is not final, each "kind:detail",
// deterministic in order: root_missing, then open obligations and settling
// remote spans sorted, then unprovable counts and taints sorted, then
// span_limit and the forced reason.
func (inv *invocation) reasons(now int64, cfg *ledgerConfig) []string {
	var out []string
	if !inv.RootArrived {
		out = append(out, contract.ReasonRootMissing)
	}
	settling := !inv.settled(now, cfg)
	var obl []string
	for _, st := range inv.Spans {
		if !st.Arrived {
			continue
		}
		if st.DeclaredChildren > st.ArrivedChildren {
			obl = append(obl, contract.ReasonMissingChildren+":"+inv.name(st.Name))
		}
		if st.DeclaredFollowups > st.ArrivedFollowups {
			obl = append(obl, contract.ReasonOpenFollowup+":"+inv.name(st.Name))
		}
		if st.Remote && settling {
			obl = append(obl, contract.ReasonRemoteSettling+":"+inv.name(st.Name))
		}
	}
	if settling {
		for _, c := range inv.Closed {
			if c.Flags&closedRemote != 0 {
				obl = append(obl, contract.ReasonRemoteSettling+":"+inv.name(c.Name))
			}
		}
	}
	obl = inv.detachedReasons(obl)
	sort.Strings(obl)
	out = append(out, slices.Compact(obl)...)
	problems := append(slices.Clone(inv.Invalid), inv.Taints...)
	sort.Strings(problems)
	out = append(out, problems...)
	if inv.SpanLimitHit {
		out = append(out, reasonSpanLimit)
	}
	if inv.Forced != "" && inv.Forced != reasonSpanLimit {
		out = append(out, inv.Forced)
	}
	return out
}

// anomalies lists the sticky anomalies and, for a final summary, foreign
// followups: followup links whose target is not a member of this invocation
// (it belongs to another one, so the link discharged nothing). Before final
// a missing target may simply not have arrived yet, so it is not reported.
func (inv *invocation) anomalies(final bool) []string {
	out := slices.Clone(inv.Anomalies)
	for _, st := range inv.Spans {
		if !final {
			break
		}
		if !st.Arrived && st.ArrivedFollowups > 0 {
			a := contract.AnomalyForeignFollowup + ":" + inv.name(st.linkedBy())
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	sort.Strings(out)
	return out
}
