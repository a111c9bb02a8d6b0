package journal

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// TestCodecSpanEndAsDistance: a span's end is stored as its distance from
// its start (spanEndDelta), shorter, and reads back as written whatever it
// is (before the start, at the ends of the range); a span stored before,
// with its end as a time, reads as before.
func TestCodecSpanEndAsDistance(t *testing.T) {
	const at = 1_765_000_000_000_000_000 // 2025, in nanoseconds
	for _, c := range []struct{ start, end uint64 }{
		{at, at + 40_000_000},
		{at, at},
		{at, at - 1},
		{0, math.MaxUint64},
		{math.MaxUint64, 0},
		{0, 0},
	} {
		sp := ptrace.NewSpan()
		sp.SetName("chat")
		sp.SetTraceID(pcommon.TraceID{1})
		sp.SetSpanID(pcommon.SpanID{2})
		sp.SetStartTimestamp(pcommon.Timestamp(c.start))
		sp.SetEndTimestamp(pcommon.Timestamp(c.end))

		var e Encoder
		e.Span(sp, nil, nil)
		require.NotZero(t, e.B[16+8]&spanEndDelta, "the flag is set")
		got := ptrace.NewSpan()
		d := Decoder{B: e.B}
		d.Span(got)
		require.NoError(t, d.Err)
		require.Zero(t, d.Remaining())
		require.Equal(t, sp.StartTimestamp(), got.StartTimestamp(), "%+v", c)
		require.Equal(t, sp.EndTimestamp(), got.EndTimestamp(), "%+v", c)

		// As a record written before the flag stored it.
		var old Encoder
		old.TraceID(sp.TraceID())
		old.SpanID(sp.SpanID())
		old.Byte1(0)
		old.Str(sp.Name())
		old.enum(int32(sp.Kind()))
		old.enum(int32(sp.Status().Code()))
		old.Uvarint(c.start)
		old.Uvarint(c.end)
		old.Uvarint(0) // attributes
		old.Uvarint(0) // links
		got = ptrace.NewSpan()
		d = Decoder{B: old.B}
		d.Span(got)
		require.NoError(t, d.Err)
		require.Zero(t, d.Remaining())
		require.Equal(t, sp.StartTimestamp(), got.StartTimestamp(), "%+v", c)
		require.Equal(t, sp.EndTimestamp(), got.EndTimestamp(), "%+v", c)
		if c.end-c.start == 40_000_000 {
			require.Less(t, len(e.B), len(old.B)-4, "a 40 ms span's end takes 4 bytes, not 9")
		}
	}
}
