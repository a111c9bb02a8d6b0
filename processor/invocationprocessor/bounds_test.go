package invocationprocessor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentledger/agentledger/contract"
)

// heldInvocation returns the processor's state for an invocation id (no
// tenant), nil when it holds none.
func heldInvocation(p *invocationProcessor, id string) *invocation {
	for _, s := range p.shards {
		s.mu.Lock()
		inv := s.invs[id]
		s.mu.Unlock()
		if inv != nil {
			return inv
		}
	}
	return nil
}

// v0.6 rule 2: a followup link names its target by (trace ID, span ID). A
// continuation whose link has the job's span ID in another trace discharges
// nothing, whichever of the two arrives first.
func TestFollowupLinkInAnotherTraceIsMalformed(t *testing.T) {
	for _, order := range []string{"target first", "link first", "target compacted"} {
		t.Run(order, func(t *testing.T) {
			h := newHarness(t, 1, nil)
			s := scenario("inv-1", 0)
			s[4].linkTrace = 7 // the job is in trace 1
			switch order {
			case "target first":
				h.consume(batch(s...))
			case "link first":
				h.consume(batch(s[4], s[5]))
				h.consume(batch(s[0], s[1], s[2], s[3]))
			case "target compacted":
				// The job owes its followup, so it is kept in full; the
				// chat is compacted at close. A late link to the chat's
				// span ID from another trace is malformed too.
				h.consume(batch(s[0], s[1], s[2], s[3]))
				s[4].followupOf = []uint64{4}
				h.consume(batch(s[4], s[5]))
			}
			h.advance(4*time.Hour + time.Second)
			sums := h.of("inv-1")
			require.NotEmpty(t, sums)
			for _, sum := range sums {
				assert.NotEqual(t, contract.StatusFinal, strAttr(sum, contract.AttrStatus))
			}
			last := sums[len(sums)-1]
			assert.Contains(t, strsAttr(last, contract.AttrIncompleteReasons), contract.ReasonMalformedLink+":continue_agent coder")
		})
	}
}

// The same link with the right trace ID still discharges the job.
func TestFollowupLinkInTheTargetsTraceDischarges(t *testing.T) {
	for _, order := range []string{"target first", "link first"} {
		t.Run(order, func(t *testing.T) {
			h := newHarness(t, 1, nil)
			s := scenario("inv-1", 0)
			if order == "link first" {
				h.consume(batch(s[4], s[5]))
				h.consume(batch(s[0], s[1], s[2], s[3]))
			} else {
				h.consume(batch(s...))
			}
			sums := h.of("inv-1")
			require.NotEmpty(t, sums)
			assert.Equal(t, contract.StatusFinal, strAttr(sums[len(sums)-1], contract.AttrStatus))
		})
	}
}

// v0.6 rule 5: span IDs named only as link targets count toward
// max_spans_per_invocation.
func TestLinkTargetsCountTowardSpanLimit(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.MaxSpansPerInvocation = 1000 })
	root := sp{inv: "inv-1", name: "invoke_agent coder", trace: 1, id: 1, start: 0, end: 10, role: contract.RoleRoot, children: int64(0)}
	for i := range 3000 {
		root.followupOf = append(root.followupOf, uint64(100+i))
	}
	h.consume(batch(root))
	inv := heldInvocation(h.p, "inv-1")
	require.NotNil(t, inv)
	assert.LessOrEqual(t, len(inv.Spans)+inv.CompactedSpans(), 1000)
	sums := h.of("inv-1")
	require.Len(t, sums, 1)
	assert.Equal(t, contract.StatusIncomplete, strAttr(sums[0], contract.AttrStatus))
	assert.Contains(t, strsAttr(sums[0], contract.AttrIncompleteReasons), reasonSpanLimit)
}

// A parent named by a child counts too: a child arriving at the bound
// cannot make its parent's ID one more than the bound allows.
func TestParentReferenceCountsTowardSpanLimit(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) { c.MaxSpansPerInvocation = 1 })
	s := scenario("inv-1", 0)
	h.consume(batch(s[1])) // the chat, naming the root: a second ID
	inv := heldInvocation(h.p, "inv-1")
	require.NotNil(t, inv)
	assert.LessOrEqual(t, len(inv.Spans)+inv.CompactedSpans(), 1)
	sums := h.of("inv-1")
	require.Len(t, sums, 1)
	assert.Contains(t, strsAttr(sums[0], contract.AttrIncompleteReasons), reasonSpanLimit)
}
