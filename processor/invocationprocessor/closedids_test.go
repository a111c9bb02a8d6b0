package invocationprocessor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/agentledger/agentledger/contract"
)

// v0.6 rule 6: an invocation forgotten before its retention ended (here by
// the bound on retained invocations) is remembered by a fingerprint, so an
// exporter's retry of its batch yields no second revision 1.
func TestForgottenInvocationGetsNoSecondFirstSummary(t *testing.T) {
	h := newHarness(t, 2, func(c *Config) { c.MaxOpenInvocations = 3 })
	x := scenario("inv-x", 0)
	h.consume(batch(x...))
	require.Len(t, h.of("inv-x"), 1)
	for i := range 5 {
		h.consume(batch(scenario("inv-"+string(rune('a'+i)), uint64(100*(i+1)))...))
	}
	require.True(t, heldInvocation(h.p, "inv-x") == nil, "the record is forgotten by the bound")
	passed := h.passed()
	h.consume(batch(x...)) // the exporter retries
	assert.Equal(t, passed+len(x), h.passed(), "the spans pass through")
	assert.True(t, heldInvocation(h.p, "inv-x") == nil, "and are not indexed")
	h.advance(4*time.Hour + time.Second)
	sums := h.of("inv-x")
	require.Len(t, sums, 1)
	assert.Equal(t, int64(1), intAttr(sums[0], contract.AttrRevision))
}

// With storage the fingerprints survive a restart.
func TestForgottenInvocationFingerprintSurvivesRestart(t *testing.T) {
	mem := newMemStorage()
	clk := newFakeClock()
	sink := new(consumertest.TracesSink)
	mod := func(c *Config) { c.MaxOpenInvocations = 3 }
	h := newStoredHarness(t, mem, clk, sink, mod)
	x := scenario("inv-x", 0)
	h.consume(batch(x...))
	for i := range 5 {
		h.consume(batch(scenario("inv-"+string(rune('a'+i)), uint64(100*(i+1)))...))
	}
	require.True(t, heldInvocation(h.p, "inv-x") == nil)
	h.shutdown()

	clk.Advance(time.Minute)
	h2 := newStoredHarness(t, mem, clk, sink, mod)
	h2.consume(batch(x...))
	assert.True(t, heldInvocation(h2.p, "inv-x") == nil)
	h2.advance(time.Second)
	h2.shutdown()
	require.Len(t, h2.of("inv-x"), 1)
}

// When max_closed_invocations itself is exceeded the oldest fingerprint is
// dropped: the id then opens a new invocation.
func TestClosedInvocationFingerprintBound(t *testing.T) {
	h := newHarness(t, 1, func(c *Config) {
		c.MaxOpenInvocations = 1
		c.MaxClosedInvocations = 2
	})
	x := scenario("inv-x", 0)
	h.consume(batch(x...))
	h.consume(batch(scenario("inv-a", 100)...)) // inv-x forgotten, fingerprinted
	h.consume(batch(x[1]))
	assert.True(t, heldInvocation(h.p, "inv-x") == nil, "remembered")
	h.consume(batch(scenario("inv-b", 200)...))
	h.consume(batch(scenario("inv-c", 300)...)) // a third fingerprint drops inv-x's
	h.consume(batch(x[1]))
	assert.NotNil(t, heldInvocation(h.p, "inv-x"), "forgotten: a new invocation")
}

// closedIDs against a map model: adds, expiry and drops of the oldest, with
// fingerprints chosen to collide in the index's low bits.
func TestClosedIDsModel(t *testing.T) {
	var c closedIDs
	type entry struct {
		fp    uint64
		until int64
	}
	var fifo []entry
	model := map[uint64]int64{}
	next := uint64(1)
	for step := range 20000 {
		switch {
		case step%7 == 3 && len(fifo) > 0:
			c.dropOldest()
			delete(model, fifo[0].fp)
			fifo = fifo[1:]
		default:
			fp := (next * 0x9e3779b97f4a7c15) &^ 0xff // low bits shared
			if step%5 == 0 {
				fp = next % 64 // small, colliding values
			}
			next++
			if _, ok := model[fp]; ok {
				continue
			}
			require.True(t, c.add(fp, int64(step)))
			model[fp] = int64(step)
			fifo = append(fifo, entry{fp, int64(step)})
		}
		require.Equal(t, len(fifo), c.n)
		if step%97 == 0 {
			for fp := range model {
				require.True(t, c.remembered(fp, -1), "fp %x at step %d", fp, step)
			}
			require.False(t, c.remembered(1<<63|next, -1))
		}
	}
	require.Equal(t, len(fifo), c.expire(1<<62))
	require.Zero(t, c.n)
}
