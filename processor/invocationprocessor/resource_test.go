package invocationprocessor

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// TestNameCacheBounded: equal names share one copy, a long name is never
// kept, and names of unbounded variety never hold more than
// maxSharedNames entries.
func TestNameCacheBounded(t *testing.T) {
	var c nameCache
	first := c.share(strings.Clone("chat"))
	again := c.share(strings.Clone("chat"))
	assert.Same(t, unsafe.StringData(first), unsafe.StringData(again), "equal names share one copy")

	long := strings.Repeat("x", maxSharedNameLen+1)
	assert.Same(t, unsafe.StringData(long), unsafe.StringData(c.share(long)), "a long name stays its own copy")
	assert.NotContains(t, c.names, long)

	for i := range 3 * maxSharedNames {
		c.share(fmt.Sprintf("name-%d", i))
		require.LessOrEqual(t, len(c.names), maxSharedNames)
	}
}

// TestRetainedInvocationsShareNames: two invocations that close and are
// retained hold the same copy of each name they share, though each
// arrived in its own batch (its own strings), and keep no job times.
func TestRetainedInvocationsShareNames(t *testing.T) {
	h := newHarness(t, 1, nil)
	roundTrip := func(td ptrace.Traces) ptrace.Traces {
		b, err := (&ptrace.ProtoMarshaler{}).MarshalTraces(td)
		require.NoError(t, err)
		out, err := (&ptrace.ProtoUnmarshaler{}).UnmarshalTraces(b)
		require.NoError(t, err)
		return out
	}
	h.consume(roundTrip(batch(scenario("inv-1", 0)...)))
	h.consume(roundTrip(batch(scenario("inv-2", 100)...)))
	a, b := h.p.shards[0].invs["inv-1"], h.p.shards[0].invs["inv-2"]
	require.NotNil(t, a)
	require.NotNil(t, b)
	require.Equal(t, phaseClosed, a.Phase)
	require.Equal(t, a.Names, b.Names)
	for i := range a.Names {
		assert.Same(t, unsafe.StringData(a.Names[i]), unsafe.StringData(b.Names[i]), "name %q", a.Names[i])
	}
	assert.Same(t, unsafe.StringData(a.AgentName), unsafe.StringData(b.AgentName))
	assert.Nil(t, a.JobTimes, "job times are read only while open")
}
