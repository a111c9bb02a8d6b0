package journal

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// TestCodecDroppedCounts: what the SDK's limits dropped survives a round
// trip, and a span that dropped nothing is stored as before (no flag, so
// that records written before the flag existed decode the same).
func TestCodecDroppedCounts(t *testing.T) {
	sp := ptrace.NewSpan()
	sp.SetTraceID(pcommon.TraceID{1})
	sp.SetSpanID(pcommon.SpanID{2})
	sp.SetName("chat")
	plain := encodeAll(sp)
	require.Zero(t, plain[24]&spanDropped, "flags of a span that dropped nothing")

	sp.SetDroppedAttributesCount(3)
	sp.SetDroppedLinksCount(1)
	l := sp.Links().AppendEmpty()
	l.SetDroppedAttributesCount(2)
	l2 := sp.Links().AppendEmpty()
	l2.SetDroppedAttributesCount(4)
	b := encodeAll(sp)
	d := Decoder{B: b}
	h, ok := d.Header()
	require.True(t, ok)
	require.NoError(t, d.Err)
	require.Equal(t, Dropped{Attributes: 3, Links: 1, LinkAttributes: 6}, h.Dropped)

	got := ptrace.NewSpan()
	d = Decoder{B: b}
	d.Span(got)
	require.NoError(t, d.Err)
	require.Zero(t, d.Remaining())
	require.Equal(t, uint32(3), got.DroppedAttributesCount())
	require.Equal(t, uint32(1), got.DroppedLinksCount())
	require.Equal(t, Dropped{Attributes: 3, Links: 1, LinkAttributes: 6}, droppedOf(got))
}
