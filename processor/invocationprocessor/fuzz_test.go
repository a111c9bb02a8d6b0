package invocationprocessor

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/internal/contract"
)

// fuzzValue turns a byte into an attribute value of any type, including the
// invalid ones the processor must survive.
func fuzzValue(v pcommon.Value, b byte, n int64) {
	switch b % 7 {
	case 0:
		v.SetInt(n)
	case 1:
		v.SetInt(-n - 1)
	case 2:
		v.SetStr("x")
	case 3:
		v.SetDouble(float64(n) + 0.5)
	case 4:
		v.SetBool(true)
	case 5:
		v.SetInt(math.MaxInt64 - n)
	case 6:
		v.SetEmptySlice().AppendEmpty().SetInt(n)
	}
}

// spansFromBytes interprets data as a program of spans, 9 bytes each, so
// the fuzzer explores roles, parents, links and attribute types directly.
func spansFromBytes(data []byte) ptrace.Traces {
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
	roles := []string{"", contract.RoleRoot, contract.RoleBackground, contract.RoleContinuation, contract.RoleFollowupClosed}
	ops := []string{"", contract.OpChat, contract.OpExecuteTool, contract.OpEmbeddings}
	for len(data) >= 9 {
		b := data[:9]
		data = data[9:]
		s := ss.Spans().AppendEmpty()
		s.SetName([]string{"a", "b", contract.SpanNameSummary}[int(b[8])%3])
		s.SetTraceID(tid(uint64(b[0] % 4)))
		s.SetSpanID(sid(uint64(b[1]%32) + 1))
		if b[2]%33 != 0 {
			s.SetParentSpanID(sid(uint64(b[2] % 33)))
		}
		s.SetStartTimestamp(ts(int64(b[3] % 50)))
		s.SetEndTimestamp(ts(int64(b[4] % 60)))
		a := s.Attributes()
		switch b[0] % 5 {
		case 0:
		case 1:
			a.PutInt(contract.AttrInvocationID, 7)
		default:
			a.PutStr(contract.AttrInvocationID, string(rune('p'+b[0]%3)))
		}
		if r := roles[int(b[5])%len(roles)]; r != "" {
			a.PutStr(contract.AttrRole, r)
		}
		if op := ops[int(b[6])%len(ops)]; op != "" {
			a.PutStr(contract.AttrOperationName, op)
		}
		if b[5]&0x80 != 0 {
			fuzzValue(a.PutEmpty(contract.AttrChildren), b[7], int64(b[7]%4))
		}
		if b[5]&0x40 != 0 {
			fuzzValue(a.PutEmpty(contract.AttrFollowups), b[7]>>3, int64(b[7]%2))
		}
		if b[5]&0x20 != 0 {
			fuzzValue(a.PutEmpty(contract.AttrRemote), b[6], 1)
		}
		if b[6]&0x80 != 0 {
			fuzzValue(a.PutEmpty(contract.AttrUsageInputTokens), b[7], int64(b[3]))
			fuzzValue(a.PutEmpty(contract.AttrUsageCacheReadTokens), b[7]>>2, int64(b[4]))
		}
		if b[6]&0x40 != 0 {
			l := s.Links().AppendEmpty()
			l.SetTraceID(tid(uint64(b[3] % 4)))
			l.SetSpanID(sid(uint64(b[4]%32) + 1))
			fuzzValue(l.Attributes().PutEmpty(contract.AttrLink), b[8]>>1, 0)
			if b[8]&1 == 0 {
				l.Attributes().PutStr(contract.AttrLink, contract.LinkFollowup)
			}
		}
	}
	return td
}

func FuzzConsumeTraces(f *testing.F) {
	seed, err := (&ptrace.JSONMarshaler{}).MarshalTraces(batch(scenario("inv-1", 0)...))
	require.NoError(f, err)
	f.Add(seed)
	f.Add([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"01","spanId":"02","name":"x","attributes":[{"key":"invocation.id","value":{"stringValue":"i"}},{"key":"invocation.children","value":{"stringValue":"3"}}]}]}]}]}`))
	f.Add([]byte{1, 2, 0, 3, 9, 0x81, 0x81, 2, 0, 2, 3, 2, 4, 5, 0xc2, 0xc1, 0, 2})
	f.Add([]byte{3, 1, 0, 0, 10, 0xe1, 0xc1, 7, 1, 3, 2, 1, 11, 12, 0x42, 0x41, 9, 0, 4, 3, 2, 20, 30, 0x13, 0x80, 1, 0})

	f.Fuzz(func(t *testing.T, data []byte) {
		td, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces(data)
		if err != nil {
			td = spansFromBytes(data)
		}
		want := td.SpanCount()
		passed := 0
		var sums []ptrace.Traces
		next, err := consumer.NewTraces(func(_ context.Context, out ptrace.Traces) error {
			if out == td {
				passed += out.SpanCount()
			} else {
				sums = append(sums, out)
			}
			return nil
		})
		require.NoError(t, err)
		cfg := createDefaultConfig().(*Config)
		cfg.MaxSpansPerInvocation = 20
		cfg.MaxOpenInvocations = 2
		cfg.OpenTimeout = time.Minute
		cfg.RemoteSettle = time.Second
		cfg.Prices = map[string]Price{"m": {Input: 1}}
		clk := newFakeClock()
		p, err := newProcessor(settingsForTest(), cfg, next, clk, 2)
		require.NoError(t, err)

		ctx := context.Background()
		require.NoError(t, p.ConsumeTraces(ctx, td))
		// Deliver everything again: duplicates and late spans.
		require.NoError(t, p.ConsumeTraces(ctx, td))
		require.NoError(t, p.tick(ctx, clk.Advance(2*time.Second)))
		require.NoError(t, p.tick(ctx, clk.Advance(time.Hour)))
		require.NoError(t, p.Shutdown(ctx))

		require.Equal(t, 2*want, passed, "every input span passes through, unchanged batch")
		for _, s := range summarySpans(sums) {
			require.NotEmpty(t, strAttr(s, contract.AttrInvocationID))
			require.Contains(t, []string{contract.StatusPending, contract.StatusFinal, contract.StatusIncomplete}, strAttr(s, contract.AttrStatus))
		}
		for _, sh := range p.shards {
			require.Empty(t, sh.open.n, "shutdown closes every open invocation")
		}
	})
}
