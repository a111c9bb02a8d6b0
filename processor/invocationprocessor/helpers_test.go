package invocationprocessor

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/metadata"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

// testCollector names the harness's collector on its summaries.
const testCollector = "test-collector"

// harness is a processor wired to a sink and a fake clock, never started:
// tests drive timers with tick.
type harness struct {
	t     testing.TB
	p     *invocationProcessor
	sink  *consumertest.TracesSink
	clock *fakeClock
}

func newHarness(t testing.TB, shards int, mod func(*Config)) *harness {
	t.Helper()
	cfg := createDefaultConfig().(*Config)
	cfg.Summaries.Collector = testCollector // not the host's name: golden files
	if mod != nil {
		mod(cfg)
	}
	sink := new(consumertest.TracesSink)
	clk := newFakeClock()
	p, err := newProcessor(settingsForTest(), cfg, sink, clk, shards)
	require.NoError(t, err)
	return &harness{t: t, p: p, sink: sink, clock: clk}
}

func (h *harness) consume(td ptrace.Traces) {
	h.t.Helper()
	require.NoError(h.t, h.p.ConsumeTraces(context.Background(), td))
	h.quiesce()
}

func (h *harness) advance(d time.Duration) {
	h.t.Helper()
	require.NoError(h.t, h.p.tick(context.Background(), h.clock.Advance(d)))
	h.quiesce()
}

// quiesce returns once every summary made so far has reached the sink. A
// flush leaves a shard's summaries to the goroutine already sending it
// (the started timer goroutine, in tests that run it), so without this a
// test could look at the sink while that goroutine still holds a summary
// the test's own batch or tick made.
func (h *harness) quiesce() {
	h.t.Helper()
	for _, s := range h.p.shards {
		for i := 0; ; i++ {
			require.Less(h.t, i, 100, "a shard's outbox never emptied")
			s.sending <- struct{}{} // waits out a concurrent sender
			s.mu.Lock()
			empty := len(s.outbox) == 0
			s.mu.Unlock()
			<-s.sending
			if empty {
				break
			}
			_ = h.p.flush(context.Background(), s, flushFromTimer)
		}
	}
}

func (h *harness) shutdown() {
	h.t.Helper()
	require.NoError(h.t, h.p.Shutdown(context.Background()))
}

// summaries returns every summary span the sink received, in order.
func (h *harness) summaries() []ptrace.Span {
	return summarySpans(h.sink.AllTraces())
}

// lastSummary returns the summaries of one invocation.
func (h *harness) of(id string) []ptrace.Span {
	var out []ptrace.Span
	for _, s := range h.summaries() {
		if strAttr(s, contract.AttrInvocationID) == id {
			out = append(out, s)
		}
	}
	return out
}

// passed counts the non-summary spans the sink received.
func (h *harness) passed() int {
	n := 0
	for _, td := range h.sink.AllTraces() {
		forSpans(td, func(_ pcommon.Resource, s ptrace.Span) {
			if s.Name() != contract.SpanNameSummary {
				n++
			}
		})
	}
	return n
}

func summarySpans(tds []ptrace.Traces) []ptrace.Span {
	var out []ptrace.Span
	for _, td := range tds {
		forSpans(td, func(_ pcommon.Resource, s ptrace.Span) {
			if s.Name() == contract.SpanNameSummary {
				out = append(out, s)
			}
		})
	}
	return out
}

func forSpans(td ptrace.Traces, f func(pcommon.Resource, ptrace.Span)) {
	for i := 0; i < td.ResourceSpans().Len(); i++ {
		rs := td.ResourceSpans().At(i)
		for j := 0; j < rs.ScopeSpans().Len(); j++ {
			ss := rs.ScopeSpans().At(j).Spans()
			for k := 0; k < ss.Len(); k++ {
				f(rs.Resource(), ss.At(k))
			}
		}
	}
}

func strAttr(s ptrace.Span, k string) string {
	v, _ := s.Attributes().Get(k)
	return v.AsString()
}

func intAttr(s ptrace.Span, k string) int64 {
	v, ok := s.Attributes().Get(k)
	if !ok {
		return -1
	}
	return v.Int()
}

func strsAttr(s ptrace.Span, k string) []string {
	v, ok := s.Attributes().Get(k)
	if !ok {
		return nil
	}
	out := []string{}
	for i := 0; i < v.Slice().Len(); i++ {
		out = append(out, v.Slice().At(i).Str())
	}
	return out
}

// Span construction.

func tid(n uint64) pcommon.TraceID {
	var t pcommon.TraceID
	binary.BigEndian.PutUint64(t[8:], n)
	t[0] = 0xab
	return t
}

func sid(n uint64) pcommon.SpanID {
	var s pcommon.SpanID
	binary.BigEndian.PutUint64(s[:], n)
	return s
}

// ts is a span timestamp n seconds after a fixed epoch.
func ts(sec int64) pcommon.Timestamp {
	return pcommon.Timestamp(uint64(1_700_000_000+sec) * 1e9)
}

// sp describes one span of a test invocation.
type sp struct {
	inv        string
	name       string
	trace      uint64
	id, parent uint64
	start, end int64
	role       string
	children   any // int64 or an invalid value; nil means absent
	followups  any
	remote     bool
	op         string
	usage      map[string]any
	followupOf []uint64 // followup links to these span IDs (in trace trace)
	consumedOf []uint64
	linkTrace  uint64
	linkTraces []uint64 // per followup link, when they differ
	extra      map[string]any
	late       bool // invocation.late_child = true
	failed     bool // status Error
	// uncounted marks, for the generators, a span no count declares: a
	// late child, an uncounted child of a remote span. extraChildrenOf is
	// the anomaly a late child causes.
	uncounted       bool
	extraChildrenOf string
}

// batch builds a ptrace.Traces holding the spans, one resource per batch.
func batch(spans ...sp) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "agent")
	ss := rs.ScopeSpans().AppendEmpty()
	for _, s := range spans {
		s.fill(ss.Spans().AppendEmpty())
	}
	return td
}

func (s sp) fill(span ptrace.Span) {
	span.SetName(s.name)
	span.SetTraceID(tid(s.trace))
	span.SetSpanID(sid(s.id))
	if s.parent != 0 {
		span.SetParentSpanID(sid(s.parent))
	}
	span.SetStartTimestamp(ts(s.start))
	span.SetEndTimestamp(ts(s.end))
	a := span.Attributes()
	if s.inv != "" {
		a.PutStr(contract.AttrInvocationID, s.inv)
	}
	if s.role != "" {
		a.PutStr(contract.AttrRole, s.role)
	}
	put := func(k string, v any) {
		if v != nil {
			_ = a.PutEmpty(k).FromRaw(v)
		}
	}
	put(contract.AttrChildren, s.children)
	put(contract.AttrFollowups, s.followups)
	if s.remote {
		a.PutBool(contract.AttrRemote, true)
	}
	if s.late {
		a.PutBool(contract.AttrLateChild, true)
	}
	if s.failed {
		span.Status().SetCode(ptrace.StatusCodeError)
	}
	if s.op != "" {
		a.PutStr(contract.AttrOperationName, s.op)
	}
	for k, v := range s.usage {
		put(k, v)
	}
	for k, v := range s.extra {
		put(k, v)
	}
	lt := s.linkTrace
	if lt == 0 {
		lt = s.trace
	}
	for i, f := range s.followupOf {
		l := span.Links().AppendEmpty()
		if i < len(s.linkTraces) {
			l.SetTraceID(tid(s.linkTraces[i]))
		} else {
			l.SetTraceID(tid(lt))
		}
		l.SetSpanID(sid(f))
		l.Attributes().PutStr(contract.AttrLink, contract.LinkFollowup)
	}
	for _, f := range s.consumedOf {
		l := span.Links().AppendEmpty()
		l.SetTraceID(tid(lt))
		l.SetSpanID(sid(f))
		l.Attributes().PutStr(contract.AttrLink, contract.LinkConsumed)
	}
}

func tokens(in, out int64) map[string]any {
	return map[string]any{contract.AttrUsageInputTokens: in, contract.AttrUsageOutputTokens: out}
}

// scenario is the canonical invocation: a root with a model call and a
// shell tool that starts a background job; its completion wakes a
// continuation with one more model call after the result.
//
//	1 invoke_agent coder (root, children 2)        trace 1, [0,10]
//	2   chat (in 100 out 10)                       [1,2]
//	3   execute_tool shell (children 1)            [3,3]
//	4     background shell (followups 1)           [3,20]
//	10 continue_agent coder (links 4, children 1)  trace 2, [21,30]
//	11  chat (in 50 out 5)                         [22,29]
func scenario(inv string, base uint64) []sp {
	b := base
	return []sp{
		{inv: inv, name: "invoke_agent coder", trace: b + 1, id: b + 1, start: 0, end: 10, role: contract.RoleRoot, children: int64(2),
			extra: map[string]any{contract.AttrConversationID: "conv-1", contract.AttrAgentName: "coder", contract.AttrOperationName: contract.OpInvokeAgent}},
		{inv: inv, name: "chat", trace: b + 1, id: b + 2, parent: b + 1, start: 1, end: 2, children: int64(0), op: contract.OpChat, usage: tokens(100, 10)},
		{inv: inv, name: "execute_tool shell", trace: b + 1, id: b + 3, parent: b + 1, start: 3, end: 3, children: int64(1), op: contract.OpExecuteTool},
		{inv: inv, name: "background shell", trace: b + 1, id: b + 4, parent: b + 3, start: 3, end: 20, role: contract.RoleBackground, children: int64(0), followups: int64(1)},
		{inv: inv, name: "continue_agent coder", trace: b + 2, id: b + 10, start: 21, end: 30, role: contract.RoleContinuation, children: int64(1), followupOf: []uint64{b + 4}, linkTrace: b + 1},
		{inv: inv, name: "chat", trace: b + 2, id: b + 11, parent: b + 10, start: 22, end: 29, children: int64(0), op: contract.OpChat, usage: tokens(50, 5)},
	}
}

func settingsForTest() processor.Settings {
	return processortest.NewNopSettings(metadata.Type)
}
