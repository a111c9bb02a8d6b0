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

// expected is what one invocation's closing summary must say and where
// its spans were sent: a fixed-size record, so that a million of them
// take tens of MiB, not the workload itself.
type expected struct {
	// idLow is the second half of the invocation id; the first half is
	// the invocation's index plus one (invocationID).
	idLow uint64
	// input and output are the usage sums, afterIn and afterOut their
	// part from model calls that started after the root ended.
	input, output     int32
	afterIn, afterOut int32
	// lastRequest is the export request carrying the last first-sent
	// span of the invocation.
	lastRequest int32
	// mask has bit slot-1 set for each of its spans (spanID); spans
	// counts them.
	mask  uint16
	spans uint8
}

// invocationID is the id of invocation i whose record is e.
func (e expected) invocationID(i int) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(i)+1)
	binary.BigEndian.PutUint64(b[8:], e.idLow)
	return hex.EncodeToString(b[:])
}

// parseInvocationID returns the index and second half of an id made by
// invocationID.
func parseInvocationID(id string) (int, uint64, bool) {
	var b [16]byte
	if len(id) != 32 {
		return 0, 0, false
	}
	if _, err := hex.Decode(b[:], []byte(id)); err != nil {
		return 0, 0, false
	}
	hi := binary.BigEndian.Uint64(b[:8])
	if hi == 0 || hi > 1<<31 {
		return 0, 0, false
	}
	return int(hi - 1), binary.BigEndian.Uint64(b[8:]), true
}

// Span slots: every span of an invocation has its own, carried in the low
// byte of its span ID with the invocation's index above it (spanID), so
// that the receiver tells which spans came back with a bit per span.
const (
	slotRoot       = 1
	slotChat       = 2 // to 6, five model calls
	slotTool       = 7 // to 11, five tool calls
	slotBackground = 12
	slotContChat   = 13
	slotCont       = 14
)

// spanSlot returns the invocation index and slot an ID made by spanID
// carries; ok is false for any other.
func spanSlot(id pcommon.SpanID) (inv int, slot int, ok bool) {
	v := binary.BigEndian.Uint64(id[:])
	slot = int(v & 0xff)
	if slot < slotRoot || slot > slotCont {
		return 0, 0, false
	}
	return int(v >> 8 & 0xffffffff), slot, true
}

// workload is a generated workload: what each invocation's summary must
// say, its counts, and, when built in memory (newWorkload), its export
// requests; a streamed one (newStreamedWorkload) generates them again
// from the seed for every run (requests), holding a window of spans at a
// time.
type workload struct {
	cfg  workloadConfig
	want []expected
	// spans counts the distinct spans, sends them with duplicates,
	// nRequests the export requests carrying them.
	spans, sends, nRequests int
	// requests, when built in memory, are the export requests in send
	// order; nil for a streamed workload.
	requests []ptraceotlp.ExportRequest
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
// invocation pipeline output, summaries at about the same place. The
// workload must be built in memory.
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

// newStreamedWorkload plans the workload of cfg: one pass of the stream
// computes each invocation's expected record and the counts, keeping no
// span; every run generates the spans again (requests).
func newStreamedWorkload(cfg workloadConfig) *workload {
	w := &workload{cfg: cfg}
	s := newStream(cfg)
	s.want = make([]expected, cfg.invocations)
	for {
		if _, n := s.nextBatch(false); n == 0 {
			break
		}
	}
	w.want, w.spans, w.sends, w.nRequests = s.want, s.generated, s.sent, s.requests
	return w
}

// newWorkload is newStreamedWorkload with its export requests built once,
// in memory: the echo pipeline copies them.
func newWorkload(cfg workloadConfig) *workload {
	w := newStreamedWorkload(cfg)
	s := newStream(cfg)
	for {
		req, n := s.nextBatch(true)
		if n == 0 {
			break
		}
		w.requests = append(w.requests, req)
	}
	return w
}

// requestFeed returns the workload's export requests in send order, one per
// call, ok false after the last: those built in memory, or, streamed, a
// fresh generation from the seed.
func (w *workload) requestFeed() func() (ptraceotlp.ExportRequest, bool) {
	if w.requests != nil {
		i := 0
		return func() (ptraceotlp.ExportRequest, bool) {
			if i == len(w.requests) {
				return ptraceotlp.ExportRequest{}, false
			}
			i++
			return w.requests[i-1], true
		}
	}
	s := newStream(w.cfg)
	return func() (ptraceotlp.ExportRequest, bool) {
		req, n := s.nextBatch(true)
		return req, n > 0
	}
}

// stream generates a workload span by span from its seed: invocations
// one after another, each's spans in the order they end, then a windowed
// shuffle (every span moves at most window places, so invocations
// interleave and parents and children arrive in either order, as from
// several processes and batches) and duplicates some way after their
// original. It holds the window, the duplicates not yet due and one
// batch.
//
// Three generators drive it: gen the invocations, shuf the shuffle and
// dup the duplicates, so the spans do not depend on the window.
type stream struct {
	cfg            workloadConfig
	gen, shuf, dup *rand.Rand
	base           time.Time
	// next is the next invocation to generate.
	next int
	// ahead holds the generated spans not yet placed, in the shuffle's
	// order: ahead[0] is the next position's unless the shuffle picks
	// another among the first window.
	ahead []span
	// pos is the position of the next placed span; later holds the
	// duplicates by the position before which they are sent.
	pos   int
	later map[int][]span
	// out holds the spans due, flags whether each is a duplicate.
	out    []span
	outDup []bool
	// want, when not nil, receives each invocation's record.
	want []expected
	// generated, sent and requests count what the stream gave so far.
	generated, sent, requests int
}

func newStream(cfg workloadConfig) *stream {
	return &stream{
		cfg:   cfg,
		gen:   rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x5eed)),
		shuf:  rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x5a0ff1e)),
		dup:   rand.New(rand.NewPCG(cfg.seed, cfg.seed^0xd0b1e)),
		base:  time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		later: make(map[int][]span),
	}
}

// fill generates invocations until the window is full or none is left.
func (s *stream) fill() {
	for len(s.ahead) < max(s.cfg.window, 1) && s.next < s.cfg.invocations {
		i := s.next
		s.next++
		job := s.gen.Float64() < s.cfg.jobs
		e := genInvocation(s.gen, i, s.base.Add(time.Duration(i)*time.Millisecond), job, func(sp span) {
			s.ahead = append(s.ahead, sp)
		})
		s.generated += int(e.spans)
		if s.want != nil {
			s.want[i] = e
		}
	}
}

// step moves one position on: the duplicates due before it, then the
// span placed at it; false when nothing is left.
func (s *stream) step() bool {
	s.fill()
	if len(s.ahead) == 0 && len(s.later) == 0 {
		return false
	}
	for _, d := range s.later[s.pos] {
		s.out = append(s.out, d)
		s.outDup = append(s.outDup, true)
	}
	delete(s.later, s.pos)
	if len(s.ahead) > 0 {
		if s.cfg.window > 1 {
			j := s.shuf.IntN(min(s.cfg.window, len(s.ahead)))
			s.ahead[0], s.ahead[j] = s.ahead[j], s.ahead[0]
		}
		sp := s.ahead[0]
		s.ahead[0] = span{}
		s.ahead = s.ahead[1:]
		if len(s.ahead) == 0 {
			s.ahead = nil
		}
		if s.dup.Float64() < s.cfg.duplicates {
			at := s.pos + 1 + s.dup.IntN(max(s.cfg.window, 1))
			s.later[at] = append(s.later[at], sp)
		}
		s.out = append(s.out, sp)
		s.outDup = append(s.outDup, false)
	}
	s.pos++
	return true
}

// nextSpan returns the next span to send and whether it is a duplicate;
// ok is false after the last.
func (s *stream) nextSpan() (sp span, dup, ok bool) {
	for len(s.out) == 0 {
		if !s.step() {
			return span{}, false, false
		}
	}
	sp, dup = s.out[0], s.outDup[0]
	s.out, s.outDup = s.out[1:], s.outDup[1:]
	if len(s.out) == 0 {
		s.out, s.outDup = s.out[:0:0], s.outDup[:0:0]
	}
	return sp, dup, true
}

// nextBatch takes the next batch of spans, notes the request carrying
// each invocation's last first-sent span (in want) and, with build,
// returns the export request carrying them; n is 0 after the last.
func (s *stream) nextBatch(build bool) (req ptraceotlp.ExportRequest, n int) {
	var spans ptrace.SpanSlice
	var td ptrace.Traces
	if build {
		td = ptrace.NewTraces()
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", "loadgen-agent")
		ss := rs.ScopeSpans().AppendEmpty()
		ss.Scope().SetName("github.com/agentledger/agentledger/tests/loadgen")
		spans = ss.Spans()
		spans.EnsureCapacity(s.cfg.batch)
	}
	for n < s.cfg.batch {
		sp, dup, ok := s.nextSpan()
		if !ok {
			break
		}
		n++
		if !dup && s.want != nil {
			s.want[sp.inv].lastRequest = int32(s.requests)
		}
		if build {
			sp.appendTo(spans)
		}
	}
	if n == 0 {
		return ptraceotlp.ExportRequest{}, 0
	}
	s.sent += n
	s.requests++
	if build {
		req = ptraceotlp.NewExportRequestFromTraces(td)
	}
	return req, n
}

// genInvocation generates the spans of invocation i, starting at t0, in
// the order they end, hands each to emit, and returns what its summary
// must say: a root "invoke_agent coder" with five model calls (usage on
// each) and five tool calls; with job, a tool starts a background job
// whose notification wakes a continuation (its own trace) with one more
// model call, after the root ended.
func genInvocation(rng *rand.Rand, i int, t0 time.Time, job bool, emit func(span)) expected {
	e := expected{idLow: rng.Uint64()}
	id := e.invocationID(i)
	tr := traceID(rng)
	root := spanID(rng, i, slotRoot)
	session := fmt.Sprintf("session-%d", i%100)
	var input, output int64
	add := func(s span) {
		s.inv = i
		s.attrs = append([]attr{{key: contract.AttrInvocationID, str: id}}, s.attrs...)
		_, slot, _ := spanSlot(s.id)
		e.mask |= 1 << (slot - 1)
		e.spans++
		emit(s)
	}
	chat := func(trace pcommon.TraceID, parent pcommon.SpanID, start time.Time, slot int) {
		in, out := 1000+rng.Int64N(4000), 50+rng.Int64N(500)
		input += in
		output += out
		add(span{trace: trace, id: spanID(rng, i, slot), parent: parent, name: "chat gpt-test", start: start, end: start.Add(40 * time.Millisecond),
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
		chat(tr, root, at, slotChat+k)
		at = at.Add(50 * time.Millisecond)
		tool := spanID(rng, i, slotTool+k)
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
	if job {
		// The job outlives the root; its notification wakes a
		// continuation, a trace of its own, whose model call comes after
		// the result.
		tool := jobSpan
		jobSpan = spanID(rng, i, slotBackground)
		jobEnd := rootEnd.Add(time.Second)
		add(span{trace: tr, id: jobSpan, parent: tool, name: "background shell", start: jobStart, end: jobEnd, attrs: []attr{
			{key: contract.AttrRole, str: contract.RoleBackground},
			{key: contract.AttrFollowups, num: 1, isNum: true},
			{key: contract.AttrChildren, num: 0, isNum: true},
		}})
		contTrace, cont := traceID(rng), spanID(rng, i, slotCont)
		before, beforeOut := input, output
		chat(contTrace, cont, jobEnd.Add(time.Millisecond), slotContChat)
		e.afterIn, e.afterOut = int32(input-before), int32(output-beforeOut)
		add(span{trace: contTrace, id: cont, name: "continue_agent coder", start: jobEnd, end: jobEnd.Add(50 * time.Millisecond),
			followupOf: jobSpan, followupOfTrace: tr, attrs: []attr{
				{key: contract.AttrRole, str: contract.RoleContinuation},
				{key: contract.AttrOperationName, str: contract.OpInvokeAgent},
				{key: contract.AttrAgentName, str: "coder"},
				{key: contract.AttrConversationID, str: session},
				{key: contract.AttrChildren, num: 1, isNum: true},
			}})
	}
	e.input, e.output = int32(input), int32(output)
	return e
}

func traceID(rng *rand.Rand) pcommon.TraceID {
	var t pcommon.TraceID
	binary.BigEndian.PutUint64(t[:8], rng.Uint64())
	binary.BigEndian.PutUint64(t[8:], rng.Uint64()|1)
	return t
}

// spanID is a span ID of invocation i's span in slot: random in its top
// 24 bits, then the invocation's index (32 bits) and the slot (8 bits).
func spanID(rng *rand.Rand, i, slot int) pcommon.SpanID {
	var s pcommon.SpanID
	v := rng.Uint64()&^(1<<40-1) | uint64(uint32(i))<<8 | uint64(slot)
	binary.BigEndian.PutUint64(s[:], v)
	return s
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
