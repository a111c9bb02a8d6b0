package main

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/agentledger/agentledger/contract"
)

// workloadConfig shapes the generated workload.
type workloadConfig struct {
	// invocations is how many invocations are sent.
	invocations int
	// jobs is the share of invocations whose tool starts a background job
	// that a continuation (a new trace with a followup link) follows up.
	jobs float64
	// duplicates is the share of spans sent a second time, later (a
	// retried batch).
	duplicates float64
	// window is how far, in spans, the order is shuffled: a span is sent
	// at most window spans away from where its invocation's end order puts
	// it, and a duplicate within window spans after the original.
	window int
	// batch is the number of spans per export request.
	batch int
	seed  uint64
}

// span is one generated span.
type span struct {
	inv        int
	trace      pcommon.TraceID
	id, parent pcommon.SpanID
	name       string
	start, end time.Time
	attrs      []attr
	// followupOf, when set, is the target of the span's followup link.
	followupOf      pcommon.SpanID
	followupOfTrace pcommon.TraceID
}

type attr struct {
	key string
	str string
	num int64
	// isNum: the value is num, not str.
	isNum bool
}

// invocation is what the load generator expects of one invocation's
// summary.
type invocation struct {
	id    string
	spans int
	// input and output are the usage sums, afterIn and afterOut their
	// part from model calls that started after the root ended.
	input, output     int64
	afterIn, afterOut int64
}

// workload is the generated invocations, their spans, and the export
// requests that carry them in send order.
type workload struct {
	invocations []invocation
	// spans are unique; sends lists span indexes in send order,
	// duplicates included.
	spans []span
	sends []int
	// requests carry sends in batches; lastRequest[i] is the request
	// carrying the last first-sent span of invocation i.
	requests    []ptraceotlp.ExportRequest
	lastRequest []int
	// echo is the workload with the summaries of an invocation run
	// (setEcho), for pipelineEcho; nil until one ran.
	echo *echoRequests
}

// echoRequests are the workload's requests each carrying, after its own
// spans, its share of an invocation run's summaries.
type echoRequests struct {
	requests []ptraceotlp.ExportRequest
	// spans counts the summary spans among them.
	spans int
}

// setEcho spreads the summaries in captured (one ResourceSpans per send
// of the processor, in arrival order) evenly over copies of the
// workload's requests, in order, so the collector outputs what the
// invocation pipeline output, summaries at about the same place.
func (w *workload) setEcho(captured *ptrace.Traces) {
	chunks := captured.ResourceSpans()
	e := &echoRequests{spans: captured.SpanCount()}
	for i, req := range w.requests {
		td := ptrace.NewTraces()
		req.Traces().ResourceSpans().CopyTo(td.ResourceSpans())
		for k := i * chunks.Len() / len(w.requests); k < (i+1)*chunks.Len()/len(w.requests); k++ {
			chunks.At(k).CopyTo(td.ResourceSpans().AppendEmpty())
		}
		e.requests = append(e.requests, ptraceotlp.NewExportRequestFromTraces(td))
	}
	w.echo = e
}

// newWorkload generates the workload of cfg: each invocation is a root
// "invoke_agent coder" with five model calls (usage on each) and five tool
// calls; a share of them has a tool start a background job whose
// notification wakes a continuation (its own trace) with one more model
// call, after the root ended. Spans are put in the order they end, one
// invocation after another, then shuffled within the window and some sent
// twice.
func newWorkload(cfg workloadConfig) *workload {
	rng := rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x5eed))
	w := &workload{}
	base := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for i := range cfg.invocations {
		w.invocations = append(w.invocations, w.addInvocation(rng, i, base.Add(time.Duration(i)*time.Millisecond), rng.Float64() < cfg.jobs))
	}

	// End order, then a windowed shuffle: every span moves at most window
	// places, so invocations interleave and parents and children arrive
	// in either order, as from several processes and batches.
	order := make([]int, len(w.spans))
	for i := range order {
		order[i] = i
	}
	if cfg.window > 1 {
		for i := range order {
			j := i + rng.IntN(min(cfg.window, len(order)-i))
			order[i], order[j] = order[j], order[i]
		}
	}
	// Duplicates go some way after their original.
	later := make(map[int][]int)
	for pos, s := range order {
		if rng.Float64() < cfg.duplicates {
			at := pos + 1 + rng.IntN(max(cfg.window, 1))
			later[at] = append(later[at], s)
		}
	}
	for pos := 0; pos <= len(order) || len(later) > 0; pos++ {
		w.sends = append(w.sends, later[pos]...)
		delete(later, pos)
		if pos < len(order) {
			w.sends = append(w.sends, order[pos])
		}
	}
	w.batchRequests(cfg.batch)
	return w
}

// addInvocation appends the spans of invocation i, starting at t0, in the
// order they end, and returns what its summary must say.
func (w *workload) addInvocation(rng *rand.Rand, i int, t0 time.Time, job bool) invocation {
	var idBytes [16]byte
	binary.BigEndian.PutUint64(idBytes[:8], uint64(i)+1)
	binary.BigEndian.PutUint64(idBytes[8:], rng.Uint64())
	inv := invocation{id: hex.EncodeToString(idBytes[:])}
	tr := traceID(rng)
	root := spanID(rng)
	session := fmt.Sprintf("session-%d", i%100)
	add := func(s span) {
		s.inv = i
		s.attrs = append([]attr{{key: contract.AttrInvocationID, str: inv.id}}, s.attrs...)
		w.spans = append(w.spans, s)
		inv.spans++
	}
	chat := func(trace pcommon.TraceID, parent pcommon.SpanID, start time.Time) {
		in, out := 1000+rng.Int64N(4000), 50+rng.Int64N(500)
		inv.input += in
		inv.output += out
		add(span{trace: trace, id: spanID(rng), parent: parent, name: "chat gpt-test", start: start, end: start.Add(40 * time.Millisecond),
			attrs: []attr{
				{key: contract.AttrOperationName, str: contract.OpChat},
				{key: contract.AttrRequestModel, str: "gpt-test"},
				{key: contract.AttrUsageInputTokens, num: in, isNum: true},
				{key: contract.AttrUsageOutputTokens, num: out, isNum: true},
				{key: contract.AttrChildren, num: 0, isNum: true},
			}})
	}

	jobTool := -1
	if job {
		jobTool = rng.IntN(5)
	}
	var jobSpan pcommon.SpanID
	var jobStart time.Time
	at := t0
	for k := range 5 {
		chat(tr, root, at)
		at = at.Add(50 * time.Millisecond)
		tool := spanID(rng)
		children := int64(0)
		if k == jobTool {
			children, jobSpan, jobStart = 1, tool, at
		}
		add(span{trace: tr, id: tool, parent: root, name: "execute_tool shell", start: at, end: at.Add(10 * time.Millisecond),
			attrs: []attr{
				{key: contract.AttrOperationName, str: contract.OpExecuteTool},
				{key: contract.AttrToolName, str: "shell"},
				{key: contract.AttrChildren, num: children, isNum: true},
			}})
		at = at.Add(10 * time.Millisecond)
	}
	rootEnd := at
	add(span{trace: tr, id: root, name: "invoke_agent coder", start: t0, end: rootEnd, attrs: []attr{
		{key: contract.AttrRole, str: contract.RoleRoot},
		{key: contract.AttrOperationName, str: contract.OpInvokeAgent},
		{key: contract.AttrAgentName, str: "coder"},
		{key: contract.AttrConversationID, str: session},
		{key: contract.AttrChildren, num: 10, isNum: true},
	}})
	if !job {
		return inv
	}
	// The job outlives the root; its notification wakes a continuation,
	// a trace of its own, whose model call comes after the result.
	tool := jobSpan
	jobSpan = spanID(rng)
	jobEnd := rootEnd.Add(time.Second)
	add(span{trace: tr, id: jobSpan, parent: tool, name: "background shell", start: jobStart, end: jobEnd, attrs: []attr{
		{key: contract.AttrRole, str: contract.RoleBackground},
		{key: contract.AttrFollowups, num: 1, isNum: true},
		{key: contract.AttrChildren, num: 0, isNum: true},
	}})
	contTrace, cont := traceID(rng), spanID(rng)
	before := inv.input
	beforeOut := inv.output
	chat(contTrace, cont, jobEnd.Add(time.Millisecond))
	inv.afterIn, inv.afterOut = inv.input-before, inv.output-beforeOut
	add(span{trace: contTrace, id: cont, name: "continue_agent coder", start: jobEnd, end: jobEnd.Add(50 * time.Millisecond),
		followupOf: jobSpan, followupOfTrace: tr, attrs: []attr{
			{key: contract.AttrRole, str: contract.RoleContinuation},
			{key: contract.AttrOperationName, str: contract.OpInvokeAgent},
			{key: contract.AttrAgentName, str: "coder"},
			{key: contract.AttrConversationID, str: session},
			{key: contract.AttrChildren, num: 1, isNum: true},
		}})
	return inv
}

func traceID(rng *rand.Rand) pcommon.TraceID {
	var t pcommon.TraceID
	binary.BigEndian.PutUint64(t[:8], rng.Uint64())
	binary.BigEndian.PutUint64(t[8:], rng.Uint64()|1)
	return t
}

func spanID(rng *rand.Rand) pcommon.SpanID {
	var s pcommon.SpanID
	binary.BigEndian.PutUint64(s[:], rng.Uint64()|1)
	return s
}

// batchRequests cuts the send order into export requests of n spans.
func (w *workload) batchRequests(n int) {
	w.lastRequest = make([]int, len(w.invocations))
	seen := make([]bool, len(w.spans))
	for from := 0; from < len(w.sends); from += n {
		to := min(from+n, len(w.sends))
		td := ptrace.NewTraces()
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", "loadgen-agent")
		ss := rs.ScopeSpans().AppendEmpty()
		ss.Scope().SetName("github.com/agentledger/agentledger/tests/loadgen")
		spans := ss.Spans()
		spans.EnsureCapacity(to - from)
		for _, si := range w.sends[from:to] {
			s := &w.spans[si]
			if !seen[si] {
				seen[si] = true
				w.lastRequest[s.inv] = len(w.requests)
			}
			s.appendTo(spans)
		}
		w.requests = append(w.requests, ptraceotlp.NewExportRequestFromTraces(td))
	}
}

func (s *span) appendTo(spans ptrace.SpanSlice) {
	sp := spans.AppendEmpty()
	sp.SetTraceID(s.trace)
	sp.SetSpanID(s.id)
	if !s.parent.IsEmpty() {
		sp.SetParentSpanID(s.parent)
	}
	sp.SetName(s.name)
	sp.SetKind(ptrace.SpanKindInternal)
	sp.SetStartTimestamp(pcommon.NewTimestampFromTime(s.start))
	sp.SetEndTimestamp(pcommon.NewTimestampFromTime(s.end))
	attrs := sp.Attributes()
	attrs.EnsureCapacity(len(s.attrs))
	for _, a := range s.attrs {
		if a.isNum {
			attrs.PutInt(a.key, a.num)
		} else {
			attrs.PutStr(a.key, a.str)
		}
	}
	if !s.followupOf.IsEmpty() {
		l := sp.Links().AppendEmpty()
		l.SetTraceID(s.followupOfTrace)
		l.SetSpanID(s.followupOf)
		l.Attributes().PutStr(contract.AttrLink, contract.LinkFollowup)
	}
}
