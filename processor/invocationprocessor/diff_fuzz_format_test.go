package invocationprocessor

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/refmodel"
)

// FuzzDifferential's byte format. A program is a 1-byte header, then
// steps, each an opcode byte; a span step is followed by dfSpanSize bytes.
//
//	header: bits 0-1 max_spans_per_invocation [1000, 5, 10, 1000],
//	        bits 2-3 max_open_invocations [100, 3, 2, 1]
//	opcode & 7: 0-3 span (appended to the current batch)
//	            4   end the current batch (deliver it)
//	            5   advance the clock by (opcode>>3) * 250ms (ticks)
//	            6   restart (opcode>>3)%4: 0 graceful, 1 abrupt after the
//	                batch was acknowledged, 2 abrupt with the
//	                acknowledgement lost (the sender resends), 3 abrupt in
//	                the middle of the batch (its write fails; resent)
//	            7   resend an earlier batch, index (opcode>>3) mod count
//
// A span (dfSpan) is 16 bytes:
//
//	0  inv (0-2: p q r s t u v, 7 none) | trace-1 (3-4) | late_child (5) | status Error (6) | remote (7)
//	1  id-1 (0-3) | parent (4-7: 0 none, 1-14 that id, 15 itself)
//	2  role (0-2: none root background continuation followup_closed root background none) |
//	   op (3-4: none chat execute_tool embeddings) | followup.reason (5-6: none interrupted abandoned consumed_by) |
//	   unattributed (7)
//	3  children (0-2: 0 absent, n+1) | followups (3-5: as children) | detached (6-7: 0 absent, n+1)
//	4  input tokens (0 absent)   5 output tokens (0 absent)
//	6  cache_read tokens (0-6, 0 absent) | unrecorded = 1 (7)
//	7-8, 9-10 two attribute mutations (dfMut)   11-12, 13-14 two links (dfLink)
//	15 fan (0-1: link 1 once, twice, to 3000 distinct spans, to 20) | start s (2-4) | duration 2s (5-7)
//
// A mutation's first byte names a rule key (low nibble, 0 none, see
// dfMutKeys) and what to do to it (high nibble mod 10: repeat with the
// same value; repeat with another value (second byte); replace by an
// empty, string, bool, int (second byte), double, bytes, array of the
// value, map of the value). A link's first byte is its kind (0-2: none,
// followup, consumed, detached_from, launched_by, no attribute,
// invocation.link twice equal, followup then consumed) and target (3-6: 0
// itself, n the span with id n), bit 7 putting it in another trace than
// the target's. Link 1's second byte (byte 12) holds
// invocation.usage.mismatch (0-2: absent, true, false, "true", true then
// false, true twice, int 1, false twice; v0.8); link 2's (byte 14) holds
// what the rule does not read (diff_fuzz_context_test.go): a non-rule
// attribute (0-2), the span's resource (3-5) and scope (6-7).
const dfSpanSize = 16

// Opcodes.
const (
	dfOpSpan    = 0
	dfOpFlush   = 4
	dfOpAdvance = 5
	dfOpRestart = 6
	dfOpResend  = 7
)

// Restart modes.
const (
	dfGraceful = iota
	dfCrashAcked
	dfCrashLostAck
	dfCrashMidBatch
)

var dfInvs = []string{"p", "q", "r", "s", "t", "u", "v"}

// dfMutKeys are the rule keys a mutation can name (index = low nibble).
var dfMutKeys = []string{"",
	contract.AttrInvocationID, contract.AttrRole, contract.AttrChildren, contract.AttrFollowups,
	contract.AttrRemote, contract.AttrLateChild, contract.AttrUnrecorded, contract.AttrDetached,
	contract.AttrUnattributed, contract.AttrFollowupReason, contract.AttrOperationName,
	contract.AttrUsageInputTokens, contract.AttrUsageOutputTokens, contract.AttrUsageCacheReadTokens,
	contract.AttrLink, // on link 1
}

// Mutation kinds.
const (
	dfRepeatSame = iota
	dfRepeatOther
	dfSetEmpty
	dfSetStr
	dfSetBool
	dfSetInt
	dfSetDouble
	dfSetBytes
	dfSetSlice
	dfSetMap
)

// Link kinds.
const (
	dfLinkNone = iota
	dfLinkFollowup
	dfLinkConsumed
	dfLinkDetached
	dfLinkLaunchedBy
	dfLinkPlain
	dfLinkTwiceEqual
	dfLinkFollowupConsumed
)

// dfMut is one attribute mutation.
type dfMut struct {
	Key  byte // index in dfMutKeys, 0 none
	Kind byte
	Val  byte
}

// dfLink is one link.
type dfLink struct {
	Kind   byte
	Target byte // 0: itself
	Other  bool // in another trace than the target's
}

// dfSpan is one span of a scenario. Counts are 0 for absent, n+1 for n.
type dfSpan struct {
	Inv                           byte // index in dfInvs, 7 none
	Trace, ID, Parent             byte // trace 1-4, id 1-16, parent 0 none, 15 itself
	Late, Failed, Remote          bool
	Unattributed, Unrecorded      bool
	Role, Op, Reason              byte
	Children, Followups, Detached byte
	In, Out, Cache                byte
	Muts                          [2]dfMut
	Links                         [2]dfLink
	Fan, Start, Dur               byte
	Mismatch                      byte // invocation.usage.mismatch, see the format
	Extra, Res, Scope             byte // byte 14: diff_fuzz_context_test.go
}

func bit(b bool, n uint) byte {
	if b {
		return 1 << n
	}
	return 0
}

func (s dfSpan) encode() []byte {
	b := make([]byte, dfSpanSize)
	b[0] = s.Inv&7 | (s.Trace-1)&3<<3 | bit(s.Late, 5) | bit(s.Failed, 6) | bit(s.Remote, 7)
	b[1] = (s.ID-1)&15 | s.Parent&15<<4
	b[2] = s.Role&7 | s.Op&3<<3 | s.Reason&3<<5 | bit(s.Unattributed, 7)
	b[3] = s.Children&7 | s.Followups&7<<3 | s.Detached&3<<6
	b[4], b[5] = s.In, s.Out
	b[6] = s.Cache&0x7f | bit(s.Unrecorded, 7)
	for i, m := range s.Muts {
		b[7+2*i], b[8+2*i] = m.Key&15|m.Kind<<4, m.Val
	}
	for i, l := range s.Links {
		b[11+2*i] = l.Kind&7 | l.Target&15<<3 | bit(l.Other, 7)
	}
	b[12] = s.Mismatch & 7
	b[14] = s.Extra&7 | s.Res&7<<3 | s.Scope&3<<6
	b[15] = s.Fan&3 | s.Start&7<<2 | s.Dur&7<<5
	return b
}

func decodeDfSpan(b []byte) dfSpan {
	s := dfSpan{
		Inv: b[0] & 7, Trace: b[0]>>3&3 + 1, Late: b[0]&0x20 != 0, Failed: b[0]&0x40 != 0, Remote: b[0]&0x80 != 0,
		ID: b[1]&15 + 1, Parent: b[1] >> 4,
		Role: b[2] & 7, Op: b[2] >> 3 & 3, Reason: b[2] >> 5 & 3, Unattributed: b[2]&0x80 != 0,
		Children: b[3] & 7, Followups: b[3] >> 3 & 7, Detached: b[3] >> 6,
		In: b[4], Out: b[5], Cache: b[6] & 0x7f, Unrecorded: b[6]&0x80 != 0,
		Fan: b[15] & 3, Start: b[15] >> 2 & 7, Dur: b[15] >> 5, Mismatch: b[12] & 7,
		Extra: b[14] & 7, Res: b[14] >> 3 & 7, Scope: b[14] >> 6,
	}
	for i := range s.Muts {
		s.Muts[i] = dfMut{Key: b[7+2*i] & 15, Kind: b[7+2*i] >> 4 % 10, Val: b[8+2*i]}
	}
	for i := range s.Links {
		s.Links[i] = dfLink{Kind: b[11+2*i] & 7, Target: b[11+2*i] >> 3 & 15, Other: b[11+2*i]&0x80 != 0}
	}
	return s
}

// dfScenario builds a FuzzDifferential input from readable steps.
type dfScenario struct{ b []byte }

// maxSpansCode and maxOpenCode index the header's tables.
func newDfScenario(maxSpansCode, maxOpenCode byte) *dfScenario {
	return &dfScenario{b: []byte{maxSpansCode&3 | maxOpenCode&3<<2}}
}

func (s *dfScenario) span(spans ...dfSpan) *dfScenario {
	for _, sp := range spans {
		s.b = append(s.b, dfOpSpan)
		s.b = append(s.b, sp.encode()...)
	}
	return s
}

func (s *dfScenario) flush() *dfScenario { s.b = append(s.b, dfOpFlush); return s }

// advance moves the clock by quarters of a second (at most 31).
func (s *dfScenario) advance(quarters byte) *dfScenario {
	s.b = append(s.b, dfOpAdvance|quarters<<3)
	return s
}

func (s *dfScenario) restart(mode byte) *dfScenario {
	s.b = append(s.b, dfOpRestart|mode<<3)
	return s
}

func (s *dfScenario) resend(batch byte) *dfScenario {
	s.b = append(s.b, dfOpResend|batch<<3)
	return s
}

func (s *dfScenario) bytes() []byte { return s.b }

// dfStep is one decoded step.
type dfStep struct {
	op   int
	arg  int
	span dfIn
}

// dfProgram is a decoded input.
type dfProgram struct {
	maxSpans, maxOpen int
	steps             []dfStep
	spans             int
}

const dfMaxSpans = 48

// decodeDf decodes a program; ok is false for inputs out of range.
func decodeDf(data []byte) (dfProgram, bool) {
	if len(data) < 2 {
		return dfProgram{}, false
	}
	p := dfProgram{
		maxSpans: []int{1000, 5, 10, 1000}[data[0]&3],
		maxOpen:  []int{100, 3, 2, 1}[data[0]>>2&3],
	}
	type raw struct {
		at   int
		span dfSpan
	}
	var spans []raw
	traceOf := map[byte]byte{}
	for b := data[1:]; len(b) > 0; {
		op := b[0]
		b = b[1:]
		switch op & 7 {
		case 0, 1, 2, 3:
			if len(b) < dfSpanSize {
				b = nil
				continue
			}
			s := decodeDfSpan(b[:dfSpanSize])
			b = b[dfSpanSize:]
			if _, ok := traceOf[s.ID]; !ok {
				traceOf[s.ID] = s.Trace
			}
			spans = append(spans, raw{at: len(p.steps), span: s})
			p.steps = append(p.steps, dfStep{op: dfOpSpan})
		default:
			p.steps = append(p.steps, dfStep{op: int(op & 7), arg: int(op >> 3)})
		}
		if len(p.steps) > 4*dfMaxSpans {
			return p, false
		}
	}
	if len(spans) == 0 || len(spans) > dfMaxSpans {
		return p, false
	}
	p.spans = len(spans)
	for _, r := range spans {
		p.steps[r.at].span = dfIn{Span: r.span.build(traceOf), res: r.span.Res, scope: r.span.Scope, extra: r.span.Extra}
	}
	return p, true
}

func dfTrace(n byte) refmodel.TraceID { return refmodel.TraceID(tid(uint64(n))) }

func dfID(n uint64) refmodel.SpanID { return refmodel.SpanID(sid(n)) }

// build turns a decoded span into the neutral span both sides read.
func (s dfSpan) build(traceOf map[byte]byte) refmodel.Span {
	name := "span"
	switch {
	case s.Role == 1 || s.Role == 5:
		name = "invoke_agent a"
	case s.Role == 2 || s.Role == 6:
		name = "background shell"
	case s.Role == 3:
		name = "continue_agent a"
	case s.Role == 4:
		name = contract.SpanNameFollowupClosed
	case s.Role == 7:
		name = "wake_agent a"
	case s.Op > 0:
		name = []string{"", "chat", "execute_tool shell", "embeddings"}[s.Op]
	}
	out := refmodel.Span{
		TraceID: dfTrace(s.Trace), SpanID: dfID(uint64(s.ID)), Name: name, Error: s.Failed,
		Start: time.Unix(0, int64(ts(int64(s.Start)))), End: time.Unix(0, int64(ts(int64(s.Start)+2*int64(s.Dur)))),
	}
	switch {
	case s.Parent == 15:
		out.ParentSpanID = out.SpanID
	case s.Parent > 0:
		out.ParentSpanID = dfID(uint64(s.Parent))
	}
	put := func(k string, v refmodel.Value) {
		out.Attributes = append(out.Attributes, refmodel.KeyValue{Key: k, Value: v})
	}
	if s.Inv < 7 {
		put(contract.AttrInvocationID, refmodel.Str(dfInvs[s.Inv]))
	}
	if r := []string{"", contract.RoleRoot, contract.RoleBackground, contract.RoleContinuation, contract.RoleFollowupClosed, contract.RoleRoot, contract.RoleBackground, contract.RoleWake}[s.Role]; r != "" {
		put(contract.AttrRole, refmodel.Str(r))
	}
	if s.Op > 0 {
		put(contract.AttrOperationName, refmodel.Str([]string{"", contract.OpChat, contract.OpExecuteTool, contract.OpEmbeddings}[s.Op]))
	}
	count := func(k string, c byte) {
		if c > 0 {
			put(k, refmodel.Int(int64(c-1)))
		}
	}
	count(contract.AttrChildren, s.Children)
	count(contract.AttrFollowups, s.Followups)
	count(contract.AttrDetached, s.Detached)
	if s.Unrecorded {
		put(contract.AttrUnrecorded, refmodel.Int(1))
	}
	if s.Remote {
		put(contract.AttrRemote, refmodel.Bool(true))
	}
	if s.Late {
		put(contract.AttrLateChild, refmodel.Bool(true))
	}
	if s.Unattributed {
		put(contract.AttrUnattributed, refmodel.Str("unknown_task"))
	}
	if r := []string{"", contract.ReasonInterrupted, contract.ReasonAbandoned, contract.ReasonConsumedBy}[s.Reason]; r != "" {
		put(contract.AttrFollowupReason, refmodel.Str(r))
	}
	for _, v := range [][]refmodel.Value{nil, {refmodel.Bool(true)}, {refmodel.Bool(false)}, {refmodel.Str("true")},
		{refmodel.Bool(true), refmodel.Bool(false)}, {refmodel.Bool(true), refmodel.Bool(true)}, {refmodel.Int(1)},
		{refmodel.Bool(false), refmodel.Bool(false)}}[s.Mismatch] {
		put(contract.AttrUsageMismatch, v)
	}
	usage := func(k string, n byte) {
		if n > 0 {
			put(k, refmodel.Int(int64(n)))
		}
	}
	usage(contract.AttrUsageInputTokens, s.In)
	usage(contract.AttrUsageOutputTokens, s.Out)
	usage(contract.AttrUsageCacheReadTokens, s.Cache)

	for i, l := range s.Links {
		if l.Kind == dfLinkNone {
			continue
		}
		target := s.ID
		if l.Target != 0 {
			target = l.Target
		}
		trace, ok := traceOf[target]
		if !ok {
			trace = s.Trace
		}
		if l.Other {
			trace = trace%4 + 1
		}
		n := 1
		if i == 0 {
			n = []int{1, 2, 3000, 20}[s.Fan]
		}
		for j := range n {
			id := uint64(target)
			if n > 2 {
				id = 0x1000 + uint64(j)
			}
			out.Links = append(out.Links, dfBuildLink(dfTrace(trace), dfID(id), l.Kind))
		}
	}
	for _, m := range s.Muts {
		dfMutate(&out, m)
	}
	out.Attributes = append(out.Attributes, dfExtra(s.Extra)...)
	return out
}

func dfBuildLink(trace refmodel.TraceID, id refmodel.SpanID, kind byte) refmodel.Link {
	l := refmodel.Link{TraceID: trace, SpanID: id}
	put := func(v string) {
		l.Attributes = append(l.Attributes, refmodel.KeyValue{Key: contract.AttrLink, Value: refmodel.Str(v)})
	}
	switch kind {
	case dfLinkFollowup:
		put(contract.LinkFollowup)
	case dfLinkConsumed:
		put(contract.LinkConsumed)
	case dfLinkDetached:
		put(contract.LinkDetachedFrom)
	case dfLinkLaunchedBy:
		put(contract.LinkLaunchedBy)
	case dfLinkTwiceEqual:
		put(contract.LinkFollowup)
		put(contract.LinkFollowup)
	case dfLinkFollowupConsumed:
		put(contract.LinkFollowup)
		put(contract.LinkConsumed)
	}
	return l
}

// dfDefault is the value a mutation starts from when the key is absent.
func dfDefault(key string) refmodel.Value {
	switch key {
	case contract.AttrRole:
		return refmodel.Str(contract.RoleBackground)
	case contract.AttrRemote, contract.AttrLateChild:
		return refmodel.Bool(true)
	case contract.AttrInvocationID:
		return refmodel.Str("p")
	case contract.AttrUnattributed, contract.AttrFollowupReason:
		return refmodel.Str(contract.ReasonAbandoned)
	case contract.AttrOperationName:
		return refmodel.Str(contract.OpChat)
	case contract.AttrLink:
		return refmodel.Str(contract.LinkFollowup)
	}
	return refmodel.Int(1)
}

// other returns a value of v's type that differs from it.
func dfOther(key string, v refmodel.Value, val byte) refmodel.Value {
	switch v.Kind {
	case refmodel.KindInt:
		if int64(val) == v.Int {
			val++
		}
		return refmodel.Int(int64(val))
	case refmodel.KindBool:
		return refmodel.Bool(!v.Bool)
	case refmodel.KindStr:
		var choices []string
		switch key {
		case contract.AttrInvocationID:
			choices = dfInvs
		case contract.AttrRole:
			choices = []string{contract.RoleRoot, contract.RoleBackground, contract.RoleContinuation, contract.RoleFollowupClosed, contract.RoleWake, contract.RoleUnrecorded}
		case contract.AttrOperationName:
			choices = contract.DefaultUsageOperations
		case contract.AttrLink:
			choices = []string{contract.LinkFollowup, contract.LinkConsumed, contract.LinkDetachedFrom}
		default:
			choices = []string{"x", "y"}
		}
		s := choices[int(val)%len(choices)]
		if s == v.Str {
			s = choices[(int(val)+1)%len(choices)]
		}
		return refmodel.Str(s)
	}
	return refmodel.Str("other")
}

// dfMutate applies one mutation to a span's (or, for invocation.link,
// its first link's) attributes.
func dfMutate(s *refmodel.Span, m dfMut) {
	if m.Key == 0 || int(m.Key) >= len(dfMutKeys) {
		return
	}
	key := dfMutKeys[m.Key]
	attrs := &s.Attributes
	if key == contract.AttrLink {
		if len(s.Links) == 0 {
			return
		}
		attrs = &s.Links[0].Attributes
	}
	at := -1
	for i, kv := range *attrs {
		if kv.Key == key {
			at = i
			break
		}
	}
	cur := dfDefault(key)
	if at >= 0 {
		cur = (*attrs)[at].Value
	}
	var v refmodel.Value
	switch m.Kind {
	case dfRepeatSame:
		if at < 0 {
			return
		}
		v = cur
	case dfRepeatOther:
		v = dfOther(key, cur, m.Val)
		if at < 0 {
			// Absent: the key appears twice, the default then another.
			*attrs = append(*attrs, refmodel.KeyValue{Key: key, Value: cur})
		}
	case dfSetEmpty:
		v = refmodel.Value{}
	case dfSetStr:
		switch cur.Kind {
		case refmodel.KindInt:
			v = refmodel.Str(strconv.FormatInt(cur.Int, 10))
		case refmodel.KindBool:
			v = refmodel.Str(strconv.FormatBool(cur.Bool))
		default:
			v = refmodel.Str("x")
		}
	case dfSetBool:
		v = refmodel.Bool(true)
	case dfSetInt:
		v = refmodel.Int(int64(m.Val))
	case dfSetDouble:
		v = refmodel.Double(float64(cur.Int) + 0.5)
	case dfSetBytes:
		v = refmodel.Value{Kind: refmodel.KindBytes, Bytes: []byte(cur.Str + "\x01")}
	case dfSetSlice:
		v = refmodel.Value{Kind: refmodel.KindSlice, Slice: []refmodel.Value{cur}}
	case dfSetMap:
		v = refmodel.Value{Kind: refmodel.KindMap, Map: []refmodel.KeyValue{{Key: "v", Value: cur}}}
	}
	if m.Kind <= dfRepeatOther || at < 0 {
		*attrs = append(*attrs, refmodel.KeyValue{Key: key, Value: v})
		return
	}
	(*attrs)[at].Value = v
}

// dfJSON writes spans as OTLP/JSON, keeping repeated keys (pcommon.Map's
// Put* would merge them), for ptrace.JSONUnmarshaler: a run of spans with
// the same resource and scope shares one resourceSpans and scopeSpans.
func dfJSON(spans []dfIn) []byte {
	var b strings.Builder
	b.WriteString(`{"resourceSpans":[`)
	for i, s := range spans {
		newRes := i == 0 || spans[i-1].res != s.res
		newScope := newRes || spans[i-1].scope != s.scope
		if i > 0 {
			switch {
			case newRes:
				b.WriteString(`]}]},`)
			case newScope:
				b.WriteString(`]},`)
			default:
				b.WriteByte(',')
			}
		}
		if newRes {
			b.WriteString(`{"resource":{"attributes":`)
			dfJSONAttrs(&b, dfResource(s.res))
			b.WriteString(`},"scopeSpans":[`)
		}
		if newScope {
			b.WriteString(`{"scope":`)
			dfJSONScope(&b, s.scope)
			b.WriteString(`,"spans":[`)
		}
		fmt.Fprintf(&b, `{"traceId":"%s","spanId":"%s"`, hex.EncodeToString(s.TraceID[:]), hex.EncodeToString(s.SpanID[:]))
		if s.ParentSpanID != (refmodel.SpanID{}) {
			fmt.Fprintf(&b, `,"parentSpanId":"%s"`, hex.EncodeToString(s.ParentSpanID[:]))
		}
		fmt.Fprintf(&b, `,"name":%s,"startTimeUnixNano":"%d","endTimeUnixNano":"%d","attributes":`, strconv.Quote(s.Name), s.Start.UnixNano(), s.End.UnixNano())
		dfJSONAttrs(&b, s.Attributes)
		if s.Error {
			b.WriteString(`,"status":{"code":2}`)
		}
		if len(s.Links) > 0 {
			b.WriteString(`,"links":[`)
			for j, l := range s.Links {
				if j > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `{"traceId":"%s","spanId":"%s","attributes":`, hex.EncodeToString(l.TraceID[:]), hex.EncodeToString(l.SpanID[:]))
				dfJSONAttrs(&b, l.Attributes)
				b.WriteByte('}')
			}
			b.WriteByte(']')
		}
		b.WriteByte('}')
	}
	if len(spans) > 0 {
		b.WriteString(`]}]}`)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

func dfJSONAttrs(b *strings.Builder, attrs []refmodel.KeyValue) {
	b.WriteByte('[')
	for i, kv := range attrs {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(b, `{"key":%s,"value":`, dfJSONString(kv.Key))
		dfJSONValue(b, kv.Value)
		b.WriteByte('}')
	}
	b.WriteByte(']')
}

func dfJSONValue(b *strings.Builder, v refmodel.Value) {
	switch v.Kind {
	case refmodel.KindEmpty:
		b.WriteString(`{}`)
	case refmodel.KindStr:
		fmt.Fprintf(b, `{"stringValue":%s}`, dfJSONString(v.Str))
	case refmodel.KindBool:
		fmt.Fprintf(b, `{"boolValue":%t}`, v.Bool)
	case refmodel.KindInt:
		fmt.Fprintf(b, `{"intValue":"%d"}`, v.Int)
	case refmodel.KindDouble:
		fmt.Fprintf(b, `{"doubleValue":%s}`, strconv.FormatFloat(v.Double, 'g', -1, 64))
	case refmodel.KindBytes:
		fmt.Fprintf(b, `{"bytesValue":"%s"}`, base64.StdEncoding.EncodeToString(v.Bytes))
	case refmodel.KindSlice:
		b.WriteString(`{"arrayValue":{"values":[`)
		for i, e := range v.Slice {
			if i > 0 {
				b.WriteByte(',')
			}
			dfJSONValue(b, e)
		}
		b.WriteString(`]}}`)
	case refmodel.KindMap:
		b.WriteString(`{"kvlistValue":{"values":`)
		dfJSONAttrs(b, v.Map)
		b.WriteString(`}}`)
	}
}
