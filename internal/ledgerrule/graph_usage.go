package ledgerrule

import (
	"math"

	"github.com/agentledger/agentledger/contract"
)

// readUsage returns usage i of the call if it is a non-negative int64
// that keeps *sum from overflowing; otherwise the count is not summed and
// the invocation can never be final (invalid_usage, v0.2 rule 5).
func (g *Graph) readUsage(s *Span, i int, sum *int64) int64 {
	if s.UsagePresent&(1<<i) == 0 {
		return 0
	}
	n := s.Usage[i]
	if s.UsageInvalid&(1<<i) != 0 || n < 0 || n > math.MaxInt64-*sum {
		g.AddTaint(contract.ReasonInvalidUsage + ":" + usageKeyNames[i] + " on " + s.Name)
		return 0
	}
	*sum += n
	return n
}

// usageKeyNames are the summed usage attributes by usage index.
var usageKeyNames = [NumUsage]string{
	contract.AttrUsageInputTokens,
	contract.AttrUsageOutputTokens,
	contract.AttrUsageCacheReadTokens,
	contract.AttrUsageCacheCreateTokens,
	contract.AttrUsageReasoningTokens,
}

// addModelCall sums a model call's usage (rule 5: one that did not fail
// and carries no usage makes the invocation incomplete) and splits off
// its after-result part.
func (g *Graph) addModelCall(s *Span) Usage {
	g.ModelCalls++
	if s.MissingUsage(s.Failed) {
		// Rule 5: a call that did not fail was billed; zero is not its usage.
		g.AddTaint(contract.ReasonUsageMissing + ":" + s.Name)
	}
	var c Usage
	c.Input = g.readUsage(s, UsageInput, &g.Usage.Input)
	c.Output = g.readUsage(s, UsageOutput, &g.Usage.Output)
	c.CacheRead = g.readUsage(s, UsageCacheRead, &g.Usage.CacheRead)
	c.CacheCreation = g.readUsage(s, UsageCacheCreation, &g.Usage.CacheCreation)
	c.Reasoning = g.readUsage(s, UsageReasoning, &g.Usage.Reasoning)

	// After-result parts never exceed the totals, so they cannot overflow
	// where the totals did not.
	if g.RootArrived {
		if s.Start > g.RootEnd {
			g.AfterInput += c.Input
			g.AfterOutput += c.Output
		}
	} else if c.Input != 0 || c.Output != 0 {
		r := g.rareOf()
		if r.early == nil {
			r.early = make([]EarlyCall, 0, 4)
		}
		r.early = append(r.early, EarlyCall{Start: s.Start, Input: c.Input, Output: c.Output})
	}
	return c
}
