package ledgerrule

import "github.com/agentledger/agentledger/contract"

// declarationTaint reads an unrecorded-span declaration (invocation.role
// = unrecorded, CONTRACT.md "What the SDK dropped or cut is a fact"): a
// span the instrumentation exports in place of one the sampler dropped
// when no open span of the invocation could count it. Its
// invocation.unrecorded says the same, but the role alone suffices: a
// declaration whose count a processor on the way removed or rewrote still
// says that a span of the invocation was never exported, so the
// invocation is never final (not_sampled:<span name>), on both halves.
func (g *Graph) declarationTaint(s *Span) {
	if s.Role == RoleUnrecorded {
		g.AddTaint(contract.ReasonNotSampled + ":" + s.Name)
	}
}
