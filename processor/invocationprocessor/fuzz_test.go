package invocationprocessor

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
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
		// Every span passes through but the incoming summaries, which are
		// dropped: the batch itself when it holds none, else a copy.
		want, incoming := 0, 0
		forSpans(td, func(_ pcommon.Resource, s ptrace.Span) {
			if s.Name() == contract.SpanNameSummary {
				incoming++
			} else {
				want++
			}
		})
		passed, copies := 0, 0
		var sums []ptrace.Traces
		next, err := consumer.NewTraces(func(_ context.Context, out ptrace.Traces) error {
			switch {
			case out == td:
				passed += out.SpanCount()
			case len(summarySpans([]ptrace.Traces{out})) == out.SpanCount():
				sums = append(sums, out)
			default:
				copies++
				passed += out.SpanCount()
				require.Empty(t, summarySpans([]ptrace.Traces{out}), "an incoming summary passed")
			}
			return nil
		})
		require.NoError(t, err)
		cfg := createDefaultConfig().(*Config)
		cfg.Summaries.Collector = testCollector
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

		require.Equal(t, 2*want, passed, "every input span but the summaries passes through")
		if incoming == 0 {
			require.Zero(t, copies, "a batch without summaries passes unchanged")
		}
		for _, out := range sums {
			forSpans(out, func(res pcommon.Resource, _ ptrace.Span) {
				require.Equal(t, testCollector, res.Attributes().AsRaw()[contract.AttrSummaryCollector], "summary marked")
			})
		}
		for _, s := range summarySpans(sums) {
			require.NotEmpty(t, strAttr(s, contract.AttrInvocationID))
			require.Contains(t, []string{contract.StatusPending, contract.StatusFinal, contract.StatusIncomplete}, strAttr(s, contract.AttrStatus))
		}
		for _, sh := range p.shards {
			require.Empty(t, sh.open.n, "shutdown closes every open invocation")
		}
	})
}

// fuzzSpan is one span of FuzzFinalInvariant's program, encoded in
// fuzzSpanSize bytes so the fuzzer explores parents, links, counts,
// roles, markers and usage directly.
type fuzzSpan struct {
	inv      byte // 0-2: invocations p, q, r; 3: no invocation.id; 4: a non-string one
	trace    byte // 1-3
	id       byte // 1-12
	parent   byte // 0: none, 1-12, 13: itself
	start    byte
	dur      byte
	role     byte // 0: none, 1 root, 2 background, 3 continuation, 4 followup_closed
	remote   bool
	late     byte // 0: none, 1: true, 2: "true" (mistyped)
	children byte // 0: absent, 1-4: 0-3, 5: "1", 6: -1, 7: too big
	follows  byte // as children
	failed   bool
	op       byte // 0: none, 1 chat, 2 execute_tool, 3 embeddings
	unattrib bool
	in, out  byte // 0: absent, 1: value, 2: "1", 3: -1
	cache    bool
	value    byte
	links    [2]byte // kind (0 none, 1 followup, 2 consumed, 3 launched_by, 4 no attribute) + target<<3
	join     bool    // delivered in the previous span's batch
	wait     byte    // 0-3: half-seconds to advance before its batch
}

const fuzzSpanSize = 12

func (f fuzzSpan) bytes() []byte {
	b := make([]byte, fuzzSpanSize)
	b[0] = f.inv%5 | (f.trace-1)%3<<3
	b[1] = (f.id - 1) % 12
	if f.join {
		b[1] |= 0x80
	}
	b[2] = f.parent % 14
	b[3] = f.start%40 | f.wait%4<<6
	b[4] = f.dur % 40
	b[5] = f.role % 5
	if f.remote {
		b[5] |= 0x80
	}
	b[5] |= (f.late % 3) << 5
	b[6] = f.children%8 | f.follows%8<<3
	if f.failed {
		b[6] |= 0x40
	}
	b[7] = f.op % 4
	if f.unattrib {
		b[7] |= 0x40
	}
	b[8] = f.in%4 | f.out%4<<2
	if f.cache {
		b[8] |= 0x10
	}
	b[9] = f.value
	b[10], b[11] = f.links[0], f.links[1]
	return b
}

func decodeFuzzSpan(b []byte) fuzzSpan {
	return fuzzSpan{
		inv: b[0] % 8 % 5, trace: (b[0]>>3)%3 + 1, id: b[1]&0x7f%12 + 1, join: b[1]&0x80 != 0,
		parent: b[2] % 14, start: b[3] & 0x3f % 40, wait: b[3] >> 6, dur: b[4] % 40,
		role: b[5] & 0x1f % 5, remote: b[5]&0x80 != 0, late: (b[5] >> 5) & 3 % 3,
		children: b[6] & 7, follows: (b[6] >> 3) & 7, failed: b[6]&0x40 != 0,
		op: b[7] % 4, unattrib: b[7]&0x40 != 0,
		in: b[8] & 3, out: (b[8] >> 2) & 3, cache: b[8]&0x10 != 0, value: b[9],
		links: [2]byte{b[10], b[11]},
	}
}

func fuzzCount(v pcommon.Map, key string, code byte) {
	switch code {
	case 0:
	case 1, 2, 3, 4:
		v.PutInt(key, int64(code-1))
	case 5:
		v.PutStr(key, "1")
	case 6:
		v.PutInt(key, -1)
	case 7:
		v.PutInt(key, 1<<40)
	}
}

func fuzzUsage(v pcommon.Map, key string, code, value byte) {
	switch code {
	case 1:
		v.PutInt(key, int64(value))
	case 2:
		v.PutStr(key, "1")
	case 3:
		v.PutInt(key, -1)
	}
}

func (f fuzzSpan) fill(s ptrace.Span) {
	s.SetName([]string{"a", "b", "chat", "tool"}[f.id%4])
	s.SetTraceID(tid(uint64(f.trace)))
	s.SetSpanID(sid(uint64(f.id)))
	switch {
	case f.parent == 13:
		s.SetParentSpanID(sid(uint64(f.id)))
	case f.parent > 0:
		s.SetParentSpanID(sid(uint64(f.parent)))
	}
	s.SetStartTimestamp(ts(int64(f.start)))
	s.SetEndTimestamp(ts(int64(f.start) + int64(f.dur)))
	if f.failed {
		s.Status().SetCode(ptrace.StatusCodeError)
	}
	a := s.Attributes()
	switch f.inv {
	case 0, 1, 2:
		a.PutStr(contract.AttrInvocationID, string(rune('p'+f.inv)))
	case 4:
		a.PutInt(contract.AttrInvocationID, 7)
	}
	if f.role > 0 {
		a.PutStr(contract.AttrRole, []string{"", contract.RoleRoot, contract.RoleBackground, contract.RoleContinuation, contract.RoleFollowupClosed}[f.role])
	}
	if f.remote {
		a.PutBool(contract.AttrRemote, true)
	}
	switch f.late {
	case 1:
		a.PutBool(contract.AttrLateChild, true)
	case 2:
		a.PutStr(contract.AttrLateChild, "true")
	}
	fuzzCount(a, contract.AttrChildren, f.children)
	fuzzCount(a, contract.AttrFollowups, f.follows)
	if f.op > 0 {
		a.PutStr(contract.AttrOperationName, []string{"", contract.OpChat, contract.OpExecuteTool, contract.OpEmbeddings}[f.op])
	}
	if f.unattrib {
		a.PutStr(contract.AttrUnattributed, "unknown_task")
	}
	fuzzUsage(a, contract.AttrUsageInputTokens, f.in, f.value)
	fuzzUsage(a, contract.AttrUsageOutputTokens, f.out, f.value/2)
	if f.cache {
		a.PutInt(contract.AttrUsageCacheReadTokens, int64(f.value/4))
	}
	for _, l := range f.links {
		kind, target := l&7%5, uint64(l>>3)%12+1
		if kind == 0 {
			continue
		}
		sl := s.Links().AppendEmpty()
		sl.SetTraceID(tid(uint64(f.trace)))
		sl.SetSpanID(sid(target))
		switch kind {
		case 1:
			sl.Attributes().PutStr(contract.AttrLink, contract.LinkFollowup)
		case 2:
			sl.Attributes().PutStr(contract.AttrLink, contract.LinkConsumed)
		case 3:
			sl.Attributes().PutStr(contract.AttrLink, contract.LinkLaunchedBy)
		}
	}
}

func fuzzLink(kind byte, target byte) byte { return kind | (target-1)<<3 }

// fuzzProgram encodes a withheld-span selector and spans.
func fuzzProgram(withhold byte, spans ...fuzzSpan) []byte {
	out := []byte{withhold}
	for _, s := range spans {
		out = append(out, s.bytes()...)
	}
	return out
}

// FuzzFinalInvariant feeds the processor arbitrary span graphs (parents
// including self-parents and cycles, links, counts of every type, roles,
// late and remote markers, usage present, absent or mistyped), delivered
// in batches over time with one span withheld until after open_timeout,
// and checks every final summary against refModel, a from-scratch reading
// of the contract: a final is emitted only when conditions 1-4 hold for
// the spans delivered so far and nothing taints the invocation, and its
// totals are exactly those spans' usage.
func FuzzFinalInvariant(f *testing.F) {
	root := func(inv, trace, id, children byte) fuzzSpan {
		return fuzzSpan{inv: inv, trace: trace, id: id, role: 1, children: children + 1, start: 0, dur: 10}
	}
	chat := func(inv, trace, id, parent, value byte) fuzzSpan {
		return fuzzSpan{inv: inv, trace: trace, id: id, parent: parent, op: 1, children: 1, in: 1, out: 1, value: value, start: 2, dur: 1}
	}
	// Issue 9 item 1: a late child overtakes its counted sibling.
	late := chat(0, 1, 3, 2, 7)
	late.late, late.start = 1, 20
	f.Add(fuzzProgram(4, root(0, 1, 1, 1), fuzzSpan{inv: 0, trace: 1, id: 2, parent: 1, op: 2, children: 2, start: 1, dur: 1},
		late, chat(0, 1, 4, 2, 200)))
	// Issue 9 item 2: one continuation links the same job twice.
	job := fuzzSpan{inv: 0, trace: 1, id: 2, parent: 1, role: 2, children: 1, follows: 3, start: 1, dur: 5}
	cont := fuzzSpan{inv: 0, trace: 2, id: 5, role: 3, children: 1, start: 12, dur: 3, links: [2]byte{fuzzLink(1, 2), fuzzLink(1, 2)}}
	cont.trace = 1 // links point into the span's own trace
	f.Add(fuzzProgram(3, root(0, 1, 1, 1), job, cont))
	// A cycle meeting its own counts, a self-parent, a reused span ID.
	malformed := []fuzzSpan{fuzzSpan{inv: 1, trace: 1, id: 2, parent: 3, children: 2}, fuzzSpan{inv: 1, trace: 1, id: 3, parent: 2, children: 2},
		root(1, 1, 1, 0), fuzzSpan{inv: 2, trace: 2, id: 4, parent: 13, children: 2}, root(2, 2, 5, 0),
		chat(0, 1, 6, 1, 5), fuzzSpan{inv: 0, trace: 2, id: 6, op: 1, in: 1, value: 9, children: 1}, root(0, 1, 1, 1)}
	f.Add(fuzzProgram(byte(len(malformed)), malformed...))
	f.Add(fuzzProgram(0, malformed...)) // the cycle closes after the summary
	// Issue 9 item 4: a remote subtree's child arrives after open_timeout.
	remoteTool := fuzzSpan{inv: 0, trace: 1, id: 2, parent: 1, op: 2, children: 2, remote: true, start: 1, dur: 1}
	f.Add(fuzzProgram(2, root(0, 1, 1, 1), remoteTool, chat(0, 1, 3, 2, 30)))
	// Missing usage, failed call, unattributed root.
	noUsage := chat(0, 1, 2, 1, 0)
	noUsage.in, noUsage.out = 0, 0
	failed := noUsage
	failed.id, failed.failed = 3, true
	unattributed := root(1, 2, 7, 0)
	unattributed.unattrib = true
	f.Add(fuzzProgram(9, root(0, 1, 1, 2), noUsage, failed, unattributed))
	f.Add(fuzzProgram(0, root(0, 1, 1, 0)))
	// The selector's top bits draw pending_delay (500ms, 2s): a root whose
	// children arrive a second later, once with the remote tool settling.
	slowChild := chat(0, 1, 2, 1, 4)
	slowChild.wait = 2
	f.Add(fuzzProgram(0x40|3, root(0, 1, 1, 2), slowChild, chat(0, 1, 3, 1, 5)))
	f.Add(fuzzProgram(0x80|3, root(0, 1, 1, 2), slowChild, chat(0, 1, 3, 1, 5)))
	f.Add(fuzzProgram(0x40|3, root(0, 1, 1, 1), remoteTool, chat(0, 1, 3, 2, 30)))

	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 1+fuzzSpanSize || len(data) > 1+64*fuzzSpanSize {
			return
		}
		var spans []fuzzSpan
		for b := data[1:]; len(b) >= fuzzSpanSize; b = b[fuzzSpanSize:] {
			spans = append(spans, decodeFuzzSpan(b))
		}
		withheld := int(data[0]) % (len(spans) + 1) // len(spans): none

		cfg := createDefaultConfig().(*Config)
		cfg.OpenTimeout = time.Minute
		cfg.RemoteSettle = time.Second
		// pending_delay from the selector's top bits: none, within
		// remote_settle, beyond it.
		cfg.PendingDelay = []time.Duration{0, 500 * time.Millisecond, 2 * time.Second, 0}[data[0]>>6]
		sink := new(consumertest.TracesSink)
		clk := newFakeClock()
		p, err := newProcessor(settingsForTest(), cfg, sink, clk, 3)
		require.NoError(t, err)
		ref := newRefModel(cfg)
		ctx := context.Background()
		seen := 0
		// rootAt is when a span with role root first arrived per
		// invocation; closed, the invocations that got a final or
		// incomplete summary; pending, those that got a pending.
		rootAt := map[string]int64{}
		closed, pending := map[string]bool{}, map[string]bool{}
		check := func(when string) {
			t.Helper()
			sums := summarySpans(sink.AllTraces())
			now := clk.Now().UnixNano()
			for _, s := range sums[seen:] {
				id := strAttr(s, contract.AttrInvocationID)
				if st := strAttr(s, contract.AttrStatus); st == contract.StatusPending {
					at, ok := rootAt[id]
					require.True(t, ok, "%s: %s pending without a root", when, id)
					require.GreaterOrEqual(t, now-at, int64(cfg.PendingDelay), "%s: %s pending before pending_delay", when, id)
					require.False(t, closed[id], "%s: %s pending after its final or incomplete", when, id)
					require.False(t, pending[id], "%s: %s a second pending", when, id)
					pending[id] = true
					continue
				} else if st != contract.StatusFinal {
					closed[id] = true
					continue
				}
				closed[id] = true
				v := ref.verdict(id)
				require.True(t, v.provable, "%s: %s final (revision %d) although %s", when, id, intAttr(s, contract.AttrRevision), v.why)
				if v.remote {
					require.GreaterOrEqual(t, now-v.lastRemote, int64(cfg.RemoteSettle), "%s: %s final before its remote subtrees settled", when, id)
				}
				require.Equal(t, v.usage.Input, intAttr(s, contract.AttrUsageInputTokens), "%s: %s input", when, id)
				require.Equal(t, v.usage.Output, intAttr(s, contract.AttrUsageOutputTokens), "%s: %s output", when, id)
				require.Equal(t, v.usage.CacheRead, intAttr(s, contract.AttrUsageCacheReadTokens), "%s: %s cache read", when, id)
				require.Equal(t, v.afterIn, intAttr(s, contract.AttrAfterResultInput), "%s: %s after-result input", when, id)
				require.Equal(t, v.afterOut, intAttr(s, contract.AttrAfterResultOutput), "%s: %s after-result output", when, id)
				require.Equal(t, v.modelCalls, intAttr(s, contract.AttrModelCalls), "%s: %s model calls", when, id)
				require.Equal(t, v.members, intAttr(s, contract.AttrSpans), "%s: %s spans", when, id)
			}
			seen = len(sums)
		}
		deliver := func(group []fuzzSpan) {
			td := ptrace.NewTraces()
			ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
			for _, s := range group {
				s.fill(ss.Spans().AppendEmpty())
			}
			ref.deliver(td, clk.Now().UnixNano())
			forSpans(td, func(_ pcommon.Resource, s ptrace.Span) {
				id, _ := s.Attributes().Get(contract.AttrInvocationID)
				role, _ := s.Attributes().Get(contract.AttrRole)
				if _, ok := rootAt[id.Str()]; !ok && role.Str() == contract.RoleRoot {
					rootAt[id.Str()] = clk.Now().UnixNano()
				}
			})
			require.NoError(t, p.ConsumeTraces(ctx, td))
			check("batch")
		}
		advance := func(d time.Duration) {
			require.NoError(t, p.tick(ctx, clk.Advance(d)))
			check("timer")
		}

		var group []fuzzSpan
		for i, s := range spans {
			if i == withheld {
				continue
			}
			if !s.join && len(group) > 0 {
				deliver(group)
				group = nil
			}
			if len(group) == 0 && s.wait > 0 {
				advance(time.Duration(s.wait) * 500 * time.Millisecond)
			}
			group = append(group, s)
		}
		if len(group) > 0 {
			deliver(group)
		}
		advance(cfg.RemoteSettle)
		advance(cfg.OpenTimeout)
		if withheld < len(spans) {
			deliver([]fuzzSpan{spans[withheld]}) // a late span: a revision
			advance(cfg.RemoteSettle / 2)
			advance(cfg.RemoteSettle)
		}
		require.NoError(t, p.Shutdown(ctx))
		check("shutdown")
		for id := range ref.spans {
			got := h2of(sink, id)
			require.NotEmpty(t, got, "%s has no summary", id)
			require.NotEqual(t, contract.StatusPending, strAttr(got[len(got)-1], contract.AttrStatus), id)
		}
	})
}

// h2of returns one invocation's summaries from a sink.
func h2of(sink *consumertest.TracesSink, id string) []ptrace.Span {
	var out []ptrace.Span
	for _, s := range summarySpans(sink.AllTraces()) {
		if strAttr(s, contract.AttrInvocationID) == id {
			out = append(out, s)
		}
	}
	return out
}
