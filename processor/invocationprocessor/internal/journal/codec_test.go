package journal

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
)

// randValue fills v with a random attribute value of any type.
func randValue(r *rand.Rand, v pcommon.Value, depth int) {
	switch k := r.IntN(8); {
	case k == 0:
		v.SetStr(randString(r))
	case k == 1:
		v.SetInt(int64(r.Uint64()))
	case k == 2:
		v.SetDouble(r.NormFloat64() * 1e6)
	case k == 3:
		v.SetBool(r.IntN(2) == 0)
	case k == 4:
		b := make([]byte, r.IntN(8))
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		v.SetEmptyBytes().FromRaw(b)
	case k == 5 && depth < 3:
		sl := v.SetEmptySlice()
		for range r.IntN(4) {
			randValue(r, sl.AppendEmpty(), depth+1)
		}
	case k == 6 && depth < 3:
		m := v.SetEmptyMap()
		for range r.IntN(4) {
			randValue(r, m.PutEmpty(randString(r)), depth+1)
		}
	default:
		// left empty
	}
}

func randString(r *rand.Rand) string {
	pool := append([]string{"", "é", "a\x00b"}, AttrKeys[1:]...)
	if r.IntN(3) == 0 {
		return fmt.Sprintf("k%d", r.IntN(1000))
	}
	return pool[r.IntN(len(pool))]
}

func randSpan(r *rand.Rand) ptrace.Span {
	sp := ptrace.NewSpan()
	sp.SetTraceID(pcommon.TraceID(randBytes16(r)))
	sp.SetSpanID(pcommon.SpanID(randBytes8(r)))
	if r.IntN(3) > 0 {
		sp.SetParentSpanID(pcommon.SpanID(randBytes8(r)))
	}
	sp.SetName(randString(r))
	sp.SetKind(ptrace.SpanKind(r.IntN(6)))
	sp.Status().SetCode(ptrace.StatusCode(r.IntN(3)))
	sp.SetStartTimestamp(pcommon.Timestamp(r.Uint64()))
	sp.SetEndTimestamp(pcommon.Timestamp(r.Uint64()))
	for range r.IntN(8) {
		k := randString(r)
		if r.IntN(2) == 0 {
			k = AttrKeys[1+r.IntN(len(AttrKeys)-1)]
		}
		randValue(r, sp.Attributes().PutEmpty(k), 0)
	}
	for range r.IntN(3) {
		l := sp.Links().AppendEmpty()
		l.SetTraceID(pcommon.TraceID(randBytes16(r)))
		l.SetSpanID(pcommon.SpanID(randBytes8(r)))
		l.Attributes().PutStr(contract.AttrLink, []string{contract.LinkFollowup, contract.LinkConsumed, "x"}[r.IntN(3)])
	}
	return sp
}

func randBytes16(r *rand.Rand) (b [16]byte) {
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	return b
}

func randBytes8(r *rand.Rand) (b [8]byte) {
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	return b
}

func encodeAll(sp ptrace.Span) []byte {
	e := Encoder{}
	e.Span(sp, nil, nil)
	return e.B
}

// TestCodecSpanRoundTrip: random spans (every attribute type, nested
// values, links) encode and decode to an equal span.
func TestCodecSpanRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	for i := range 2000 {
		sp := randSpan(r)
		b := encodeAll(sp)
		got := ptrace.NewSpan()
		d := Decoder{B: b}
		d.Span(got)
		require.NoError(t, d.Err, "span %d", i)
		require.Zero(t, d.Remaining())
		require.Equal(t, sp.Attributes().AsRaw(), got.Attributes().AsRaw(), "span %d", i)
		require.Equal(t, encodeAll(sp), encodeAll(got), "span %d", i)
		require.Equal(t, sp.Links().Len(), got.Links().Len())
	}
}

// TestCodecFactsKeepWhatTheLedgerReads: a fact keeps the contract's
// attributes and drops the rest.
func TestCodecFactsKeepWhatTheLedgerReads(t *testing.T) {
	sp := ptrace.NewSpan()
	sp.Attributes().PutStr(contract.AttrInvocationID, "x")
	sp.Attributes().PutInt(contract.AttrUsageInputTokens, 7)
	sp.Attributes().PutStr("http.url", "https://example.invalid/secret")
	e := Encoder{}
	e.Span(sp, FactAttr, LinkAttr)
	got := ptrace.NewSpan()
	d := Decoder{B: e.B}
	d.Span(got)
	require.NoError(t, d.Err)
	require.Equal(t, map[string]any{contract.AttrInvocationID: "x", contract.AttrUsageInputTokens: int64(7)}, got.Attributes().AsRaw())
}

func randOps(r *rand.Rand) []Op {
	ops := make([]Op, 1+r.IntN(4))
	ids := []string{"a", "b", "inv-" + randString(r)}
	for i := range ops {
		op := &ops[i]
		op.Seq = r.Uint64()
		op.Time = int64(r.Uint64())
		for range r.IntN(3) {
			e := Encoder{}
			m := pcommon.NewMap()
			randValue(r, m.PutEmpty("service.name"), 0)
			e.Attrs(m, nil, 0)
			op.Resources = append(op.Resources, e.B)
		}
		for range 1 + r.IntN(6) {
			ev := Event{Kind: byte(1 + r.IntN(6)), ID: ids[r.IntN(len(ids))]}
			switch ev.Kind {
			case EvFact:
				ev.Res = r.IntN(len(op.Resources) + 1)
				ev.Fact = encodeAll(randSpan(r))
			case EvEmit:
				ev.Status = []string{contract.StatusPending, contract.StatusFinal, contract.StatusIncomplete}[r.IntN(3)]
				ev.Revision = int64(r.IntN(4))
				ev.Forced = randString(r)
				ev.Flags = byte(r.IntN(4))
				if ev.Flags&EmitSent == 0 {
					ev.Summary = encodeAll(randSpan(r))
				}
			case EvSent:
				ev.Revision = int64(r.IntN(4))
				ev.Status = contract.StatusFinal
			case EvTaint:
				ev.Until = int64(r.Uint64())
			case EvTaintAll:
				ev.ID = ""
				ev.Until = int64(r.Uint64())
			}
			op.Events = append(op.Events, ev)
		}
	}
	return ops
}

// TestCodecRecordRoundTrip is the property test of the stored form: random
// operations (every event kind) encode and decode to equal operations.
func TestCodecRecordRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for i := range 2000 {
		ops := randOps(r)
		kind := []byte{KindLog, KindChunk}[r.IntN(2)]
		b := EncodeOps(kind, ops)
		got, _, err := DecodeOps(kind, b)
		require.NoError(t, err, "case %d", i)
		require.Equal(t, ops, normalizeOps(got), "case %d", i)
	}
	m := Manifest{Gen: 3, Chunks: 2, LogStart: 99, PrevGen: 2, PrevChunks: 1, PrevLogStart: 40, SnapBytes: 1234}
	got, err := DecodeManifest(m.Encode())
	require.NoError(t, err)
	require.Equal(t, m, got)
	n, err := DecodeMeta(EncodeMeta(16))
	require.NoError(t, err)
	require.Equal(t, 16, n)
}

// normalizeOps makes decoded empty slices nil, as the generator has them.
func normalizeOps(ops []Op) []Op {
	for i := range ops {
		if len(ops[i].Resources) == 0 {
			ops[i].Resources = nil
		}
		for j := range ops[i].Events {
			ev := &ops[i].Events[j]
			if ev.Kind != EvFact {
				ev.Fact = nil
			}
		}
	}
	return ops
}

// Every damaged byte and every truncation of a record is detected: a clear
// error wrapping ErrCorrupt, never a panic, never different content.
func TestCodecDetectsDamage(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ops := randOps(r)
	b := EncodeOps(KindLog, ops)
	for i := range b {
		for _, bit := range []byte{0x01, 0x80} {
			damaged := bytes.Clone(b)
			damaged[i] ^= bit
			_, _, err := DecodeOps(KindLog, damaged)
			require.True(t, errors.Is(err, ErrCorrupt), "byte %d bit %#x: %v", i, bit, err)
		}
	}
	for n := range len(b) {
		_, _, err := DecodeOps(KindLog, b[:n])
		require.ErrorIs(t, err, ErrCorrupt, "truncated to %d", n)
	}
}
