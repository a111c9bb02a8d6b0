package journal

import (
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
)

// TestCodecFactLeavesOutTheKeyedID: a fact whose one invocation.id is the
// event's id is stored without it, shorter, and reads back the same when
// the reader gives the id; any other invocation.id is stored as read.
func TestCodecFactLeavesOutTheKeyedID(t *testing.T) {
	const id = "inv-7f3a9c2e-5d41-4b8e-9a60-1c2d3e4f5a6b"
	span := func(fill func(m pcommon.Map)) ptrace.Span {
		sp := ptrace.NewSpan()
		sp.SetName("chat")
		sp.SetTraceID(pcommon.TraceID{1})
		sp.SetSpanID(pcommon.SpanID{2})
		sp.Attributes().PutInt(contract.AttrUsageInputTokens, 7)
		fill(sp.Attributes())
		return sp
	}
	decode := func(b []byte, id string) (ptrace.Span, error) {
		got := ptrace.NewSpan()
		d := Decoder{B: b, ID: id}
		d.Span(got)
		if d.Err == nil {
			require.Zero(t, d.Remaining())
		}
		return got, d.Err
	}

	sp := span(func(m pcommon.Map) { m.PutStr(contract.AttrInvocationID, id) })
	var full, fact Encoder
	full.Span(sp, FactAttr, LinkAttr)
	fact.Fact(sp, id)
	require.Less(t, len(fact.B), len(full.B)-len(id), "the id's value is not stored")
	got, err := decode(fact.B, id)
	require.NoError(t, err)
	require.Equal(t, sp.Attributes().AsRaw(), got.Attributes().AsRaw())
	_, err = decode(fact.B, "")
	require.ErrorIs(t, err, ErrCorrupt, "a left-out id needs the reader's")
	// Records written before: the full form reads as before, id or not.
	got, err = decode(full.B, "")
	require.NoError(t, err)
	require.Equal(t, sp.Attributes().AsRaw(), got.Attributes().AsRaw())

	kept := map[string]ptrace.Span{
		"another id":   span(func(m pcommon.Map) { m.PutStr(contract.AttrInvocationID, "other") }),
		"not a string": span(func(m pcommon.Map) { m.PutInt(contract.AttrInvocationID, 42) }),
		"no id":        span(func(pcommon.Map) {}),
		"repeated": func() ptrace.Span {
			// pdata keeps a key twice only as a receiver decodes it.
			td, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"chat","attributes":[` +
				`{"key":"invocation.id","value":{"stringValue":"` + id + `"}},{"key":"invocation.id","value":{"stringValue":"` + id + `"}}]}]}]}]}`))
			require.NoError(t, err)
			sp := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
			require.Equal(t, 2, sp.Attributes().Len())
			return sp
		}(),
	}
	for name, sp := range kept {
		var full, fact Encoder
		full.Span(sp, FactAttr, LinkAttr)
		fact.Fact(sp, id)
		require.Equal(t, full.B, fact.B, "%s: stored as read", name)
	}
}
