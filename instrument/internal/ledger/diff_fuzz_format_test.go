package ledger

import (
	"math"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/refmodel"
)

// FuzzLedgerDifferential's byte format. An input is a 1-byte header, then
// steps, each an opcode byte; a span step is followed by ldSpanSize bytes.
//
//	header: bit 0 max spans per invocation (0 default, 1 ldSmallMaxSpans),
//	        bit 1 remote settle (0 none, 1 ldSettle)
//	opcode & 7: 0-4, 7 span (delivered at once)
//	            5   advance the manual clock by (opcode>>3) * 250ms
//	            6   deliver again an earlier span, index (opcode>>3) mod count
//
// A span (ldSpan) is 11 bytes:
//
//	0  inv (0-1: p q r, p then q) | trace-1 (2-3) | Error status (4) |
//	   gen_ai.operation.name (5-7: none chat chat execute_tool invoke_agent
//	   embeddings int(1) chat-then-execute_tool)
//	1  id-1 (0-2) | parent (3-6: 0 and 9-12 none, 1-8 that id, 13-15
//	   itself) | invocation.late_child = true (7)
//	2  role (0-2: none root background continuation followup_closed
//	   ["background"] root background-then-root) | children (3-5, ldCount;
//	   never repeated: 7 reads as 1)
//	3  followups (0-2, ldCount) | detached (3-5, ldCount) | id not a string (6)
//	4  unrecorded (0-2, ldCount) | remote (3-5: absent true false "true"
//	   true-then-false true-twice absent absent) | late_child extra value
//	   (6-7: none "true" false true)
//	5  unattributed (0-1: none unknown_task int none) | followup.reason
//	   (2-3: none abandoned interrupted int) | usage present (4 input,
//	   5 output, 6 cache read and creation, 7 reasoning)
//	6  input, 7 output: value (0-5; 63 is MaxInt64-1), how (6-7: int,
//	   negative, wrong type, repeated: equal for an odd value, else value
//	   and value+1)
//	8  cache read (0-3) and cache creation (4-7) tokens
//	9, 10 two links (ldLink): kind (0-2: none followup consumed
//	   detached_from launched_by no-attribute int(1) followup), target id-1
//	   (3-5), in another trace than the target's (6); bit 7 of byte 9
//	   (low) and of byte 10 (high): invocation.usage.mismatch (v0.8: none,
//	   true (twice for an even id), false, malformed: the string "true"
//	   for an odd id, true then false for an even one)
//
// A count (ldCount) is 0 absent, 1-3 the value 0-2, 4 -1, 5 1<<40, 6 the
// string "1", 7 the int 1 then the int 0. A link's target trace is that of
// the first span with the target's id in the input (the linking span's own
// trace when none has it), flipped to the next trace when "another trace".
const ldSpanSize = 11

// Opcodes.
const (
	ldOpSpan    = 0
	ldOpAdvance = 5
	ldOpResend  = 6
)

const (
	ldSmallMaxSpans = 6
	ldSettle        = time.Second
	ldMaxSpans      = 48
	ldMaxSteps      = 128
)

// Count encodings.
const (
	ldCountAbsent = 0
	ldCountNeg    = 4
	ldCountHuge   = 5
	ldCountWrong  = 6
	ldCountRepeat = 7
)

// ldN is the encoding of the valid count n (0-2).
func ldN(n byte) byte { return n + 1 }

// Usage value modes (bits 6-7 of bytes 6 and 7).
const (
	ldUsageInt    = 0
	ldUsageNeg    = 1 << 6
	ldUsageWrong  = 2 << 6
	ldUsageRepeat = 3 << 6
)

// Link kinds.
const (
	ldLinkNone = iota
	ldLinkFollowup
	ldLinkConsumed
	ldLinkDetached
	ldLinkLaunchedBy
	ldLinkPlain
	ldLinkWrongType
	ldLinkFollowup2
)

var ldInvs = []string{"p", "q", "r"}

// ldLink is one link of a span.
type ldLink struct {
	Kind   byte
	Target byte // span id 1-8
	Other  bool // in another trace than the target's
}

// ldSpan is one span of a scenario.
type ldSpan struct {
	Inv                                       byte // 0-2 p q r, 3 p then q
	Trace                                     byte // 1-4
	Err                                       bool
	Op                                        byte
	ID, Parent                                byte // id 1-8; parent 0 none, 1-8, 13 itself
	Late                                      bool
	Role                                      byte
	Children, Followups, Detached, Unrecorded byte // ldCount
	IDNotString                               bool
	Remote, LateExtra                         byte
	Unattributed, Reason                      byte
	UsageMask                                 byte // 1 input, 2 output, 4 cache, 8 reasoning
	In, Out, Cache                            byte
	Links                                     [2]ldLink
	Mismatch                                  byte // invocation.usage.mismatch, 0-3
}

func ldBit(b bool, n uint) byte {
	if b {
		return 1 << n
	}
	return 0
}

func (s ldSpan) encode() []byte {
	b := make([]byte, ldSpanSize)
	b[0] = s.Inv&3 | (s.Trace-1)&3<<2 | ldBit(s.Err, 4) | s.Op&7<<5
	b[1] = (s.ID-1)&7 | s.Parent&15<<3 | ldBit(s.Late, 7)
	b[2] = s.Role&7 | s.Children&7<<3
	b[3] = s.Followups&7 | s.Detached&7<<3 | ldBit(s.IDNotString, 6)
	b[4] = s.Unrecorded&7 | s.Remote&7<<3 | s.LateExtra&3<<6
	b[5] = s.Unattributed&3 | s.Reason&3<<2 | s.UsageMask&15<<4
	b[6], b[7], b[8] = s.In, s.Out, s.Cache
	for i, l := range s.Links {
		b[9+i] = l.Kind&7 | (l.Target-1)&7<<3 | ldBit(l.Other, 6) | s.Mismatch>>i&1<<7
	}
	return b
}

func decodeLdSpan(b []byte) ldSpan {
	s := ldSpan{
		Inv: b[0] & 3, Trace: b[0]>>2&3 + 1, Err: b[0]&0x10 != 0, Op: b[0] >> 5,
		ID: b[1]&7 + 1, Parent: b[1] >> 3 & 15, Late: b[1]&0x80 != 0,
		Role: b[2] & 7, Children: b[2] >> 3 & 7,
		Followups: b[3] & 7, Detached: b[3] >> 3 & 7, IDNotString: b[3]&0x40 != 0,
		Unrecorded: b[4] & 7, Remote: b[4] >> 3 & 7, LateExtra: b[4] >> 6,
		Unattributed: b[5] & 3, Reason: b[5] >> 2 & 3, UsageMask: b[5] >> 4,
		In: b[6], Out: b[7], Cache: b[8], Mismatch: b[9]>>7 | b[10]>>7<<1,
	}
	switch {
	case s.Parent >= 9 && s.Parent <= 12:
		s.Parent = 0
	case s.Parent >= 13:
		s.Parent = 13
	}
	for i := range s.Links {
		s.Links[i] = ldLink{Kind: b[9+i] & 7, Target: b[9+i]>>3&7 + 1, Other: b[9+i]&0x40 != 0}
	}
	return s
}

// ldScenario builds a FuzzLedgerDifferential input from readable steps.
type ldScenario struct{ b []byte }

func newLdScenario(smallMax, settle bool) *ldScenario {
	return &ldScenario{b: []byte{ldBit(smallMax, 0) | ldBit(settle, 1)}}
}

func (s *ldScenario) span(spans ...ldSpan) *ldScenario {
	for _, sp := range spans {
		s.b = append(s.b, ldOpSpan)
		s.b = append(s.b, sp.encode()...)
	}
	return s
}

// advance moves the clock by quarters of a second (at most 31).
func (s *ldScenario) advance(quarters byte) *ldScenario {
	s.b = append(s.b, ldOpAdvance|quarters<<3)
	return s
}

// resend delivers the i-th span (mod count) again.
func (s *ldScenario) resend(i byte) *ldScenario {
	s.b = append(s.b, ldOpResend|i<<3)
	return s
}

func (s *ldScenario) bytes() []byte { return s.b }

// ldStep is one decoded step.
type ldStep struct {
	op   int
	arg  int
	span ldBuilt
}

// ldBuilt is one span in both forms.
type ldBuilt struct {
	stub tracetest.SpanStub
	ref  refmodel.Span
}

// ldProgram is a decoded input.
type ldProgram struct {
	maxSpans int
	settle   time.Duration
	steps    []ldStep
}

// decodeLd decodes a program; ok is false for inputs out of range.
func decodeLd(data []byte) (ldProgram, bool) {
	if len(data) < 2 {
		return ldProgram{}, false
	}
	p := ldProgram{maxSpans: defaultMaxSpans}
	if data[0]&1 != 0 {
		p.maxSpans = ldSmallMaxSpans
	}
	if data[0]&2 != 0 {
		p.settle = ldSettle
	}
	type raw struct {
		at   int
		span ldSpan
	}
	var spans []raw
	traceOf := map[byte]byte{}
	for b := data[1:]; len(b) > 0; {
		op := b[0]
		b = b[1:]
		switch op & 7 {
		case ldOpAdvance, ldOpResend:
			p.steps = append(p.steps, ldStep{op: int(op & 7), arg: int(op >> 3)})
		default:
			if len(b) < ldSpanSize {
				b = nil
				continue
			}
			s := decodeLdSpan(b[:ldSpanSize])
			b = b[ldSpanSize:]
			if _, ok := traceOf[s.ID]; !ok {
				traceOf[s.ID] = s.Trace
			}
			spans = append(spans, raw{at: len(p.steps), span: s})
			p.steps = append(p.steps, ldStep{op: ldOpSpan})
		}
		if len(p.steps) > ldMaxSteps {
			return p, false
		}
	}
	if len(spans) == 0 || len(spans) > ldMaxSpans {
		return p, false
	}
	for i, r := range spans {
		p.steps[r.at].span = r.span.build(traceOf, i)
	}
	return p, true
}

func ldTraceID(n byte) trace.TraceID { return trace.TraceID{0xa0, n} }

func ldSpanID(n byte) trace.SpanID { return trace.SpanID{0xb0, n} }

func ldSC(tr, id byte) trace.SpanContext {
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: ldTraceID(tr), SpanID: ldSpanID(id), TraceFlags: trace.FlagsSampled})
}

// refValue converts an attribute value for the model.
func refValue(v attribute.Value) refmodel.Value {
	switch v.Type() {
	case attribute.STRING:
		return refmodel.Str(v.AsString())
	case attribute.INT64:
		return refmodel.Int(v.AsInt64())
	case attribute.BOOL:
		return refmodel.Bool(v.AsBool())
	case attribute.FLOAT64:
		return refmodel.Double(v.AsFloat64())
	case attribute.STRINGSLICE:
		var out []refmodel.Value
		for _, s := range v.AsStringSlice() {
			out = append(out, refmodel.Str(s))
		}
		return refmodel.Value{Kind: refmodel.KindSlice, Slice: out}
	}
	return refmodel.Value{}
}

func refAttrs(attrs []attribute.KeyValue) []refmodel.KeyValue {
	out := make([]refmodel.KeyValue, 0, len(attrs))
	for _, kv := range attrs {
		out = append(out, refmodel.KeyValue{Key: string(kv.Key), Value: refValue(kv.Value)})
	}
	return out
}

// build turns a decoded span (the i-th of the input) into the stub the
// ledger reads and the neutral span the model reads, with the same
// attributes in the same order, repeats included.
func (s ldSpan) build(traceOf map[byte]byte, i int) ldBuilt {
	var attrs []attribute.KeyValue
	put := func(kv ...attribute.KeyValue) { attrs = append(attrs, kv...) }
	switch {
	case s.IDNotString:
		put(attribute.Int(contract.AttrInvocationID, 1))
	case s.Inv == 3:
		put(attribute.String(contract.AttrInvocationID, "p"), attribute.String(contract.AttrInvocationID, "q"))
	default:
		put(attribute.String(contract.AttrInvocationID, ldInvs[s.Inv]))
	}
	name := "span"
	switch s.Role {
	case 1, 6:
		name = "invoke_agent a"
	case 2, 5, 7:
		name = "background shell"
	case 3:
		name = "continue_agent a"
	case 4:
		name = contract.SpanNameFollowupClosed
	default:
		if n := []string{"", "chat m", "chat m", "execute_tool shell", "invoke_agent sub", "embeddings m", "op", "chat m"}[s.Op]; n != "" {
			name = n
		}
	}
	switch s.Role {
	case 1, 6:
		put(attribute.String(contract.AttrRole, contract.RoleRoot))
	case 2:
		put(attribute.String(contract.AttrRole, contract.RoleBackground))
	case 3:
		put(attribute.String(contract.AttrRole, contract.RoleContinuation))
	case 4:
		put(attribute.String(contract.AttrRole, contract.RoleFollowupClosed))
	case 5:
		put(attribute.StringSlice(contract.AttrRole, []string{contract.RoleBackground}))
	case 7:
		put(attribute.String(contract.AttrRole, contract.RoleBackground), attribute.String(contract.AttrRole, contract.RoleRoot))
	}
	switch s.Op {
	case 1, 2:
		put(attribute.String(contract.AttrOperationName, contract.OpChat))
	case 3:
		put(attribute.String(contract.AttrOperationName, contract.OpExecuteTool))
	case 4:
		put(attribute.String(contract.AttrOperationName, contract.OpInvokeAgent))
	case 5:
		put(attribute.String(contract.AttrOperationName, contract.OpEmbeddings))
	case 6:
		put(attribute.Int(contract.AttrOperationName, 1))
	case 7:
		put(attribute.String(contract.AttrOperationName, contract.OpChat), attribute.String(contract.AttrOperationName, contract.OpExecuteTool))
	}
	count := func(key string, c byte, repeat bool) {
		switch c {
		case ldCountAbsent:
		case 1, 2, 3:
			put(attribute.Int(key, int(c-1)))
		case ldCountNeg:
			put(attribute.Int(key, -1))
		case ldCountHuge:
			put(attribute.Int64(key, 1<<40))
		case ldCountWrong:
			put(attribute.String(key, "1"))
		case ldCountRepeat:
			put(attribute.Int(key, 1))
			if repeat {
				put(attribute.Int(key, 0))
			}
		}
	}
	// invocation.children is the SpanProcessor's count, passed on its
	// own (childrenOf): never repeated.
	count(contract.AttrChildren, s.Children, false)
	count(contract.AttrFollowups, s.Followups, true)
	count(contract.AttrDetached, s.Detached, true)
	count(contract.AttrUnrecorded, s.Unrecorded, true)
	switch s.Remote {
	case 1:
		put(attribute.Bool(contract.AttrRemote, true))
	case 2:
		put(attribute.Bool(contract.AttrRemote, false))
	case 3:
		put(attribute.String(contract.AttrRemote, "true"))
	case 4:
		put(attribute.Bool(contract.AttrRemote, true), attribute.Bool(contract.AttrRemote, false))
	case 5:
		put(attribute.Bool(contract.AttrRemote, true), attribute.Bool(contract.AttrRemote, true))
	}
	if s.Late {
		put(attribute.Bool(contract.AttrLateChild, true))
	}
	switch s.LateExtra {
	case 1:
		put(attribute.String(contract.AttrLateChild, "true"))
	case 2:
		put(attribute.Bool(contract.AttrLateChild, false))
	case 3:
		put(attribute.Bool(contract.AttrLateChild, true))
	}
	switch s.Unattributed {
	case 1:
		put(attribute.String(contract.AttrUnattributed, "unknown_task"))
	case 2:
		put(attribute.Int(contract.AttrUnattributed, 1))
	}
	switch s.Reason {
	case 1:
		put(attribute.String(contract.AttrFollowupReason, contract.ReasonAbandoned))
	case 2:
		put(attribute.String(contract.AttrFollowupReason, contract.ReasonInterrupted))
	case 3:
		put(attribute.Int(contract.AttrFollowupReason, 1))
	}
	even := s.ID%2 == 0
	switch {
	case s.Mismatch == 1 && even:
		put(attribute.Bool(contract.AttrUsageMismatch, true), attribute.Bool(contract.AttrUsageMismatch, true))
	case s.Mismatch == 1:
		put(attribute.Bool(contract.AttrUsageMismatch, true))
	case s.Mismatch == 2:
		put(attribute.Bool(contract.AttrUsageMismatch, false))
	case s.Mismatch == 3 && even:
		put(attribute.Bool(contract.AttrUsageMismatch, true), attribute.Bool(contract.AttrUsageMismatch, false))
	case s.Mismatch == 3:
		put(attribute.String(contract.AttrUsageMismatch, "true"))
	}
	usage := func(key string, b byte) {
		v := int64(b & 63)
		if v == 63 {
			v = math.MaxInt64 - 1
		}
		switch b &^ 63 {
		case ldUsageInt:
			put(attribute.Int64(key, v))
		case ldUsageNeg:
			put(attribute.Int64(key, -v-1))
		case ldUsageWrong:
			if v&1 == 0 {
				put(attribute.String(key, "5"))
			} else {
				put(attribute.Float64(key, float64(v)))
			}
		case ldUsageRepeat:
			put(attribute.Int64(key, v))
			if v&1 == 1 {
				put(attribute.Int64(key, v))
			} else {
				put(attribute.Int64(key, v+1))
			}
		}
	}
	if s.UsageMask&1 != 0 {
		usage(contract.AttrUsageInputTokens, s.In)
	}
	if s.UsageMask&2 != 0 {
		usage(contract.AttrUsageOutputTokens, s.Out)
	}
	if s.UsageMask&4 != 0 {
		put(attribute.Int64(contract.AttrUsageCacheReadTokens, int64(s.Cache&15)),
			attribute.Int64(contract.AttrUsageCacheCreateTokens, int64(s.Cache>>4)))
	}
	if s.UsageMask&8 != 0 {
		put(attribute.Int64(contract.AttrUsageReasoningTokens, int64(s.In&7)))
	}

	var links []sdktrace.Link
	for _, l := range s.Links {
		if l.Kind == ldLinkNone {
			continue
		}
		tr, ok := traceOf[l.Target]
		if !ok {
			tr = s.Trace
		}
		if l.Other {
			tr = tr%4 + 1
		}
		var la []attribute.KeyValue
		switch l.Kind {
		case ldLinkFollowup, ldLinkFollowup2:
			la = append(la, attribute.String(contract.AttrLink, contract.LinkFollowup))
		case ldLinkConsumed:
			la = append(la, attribute.String(contract.AttrLink, contract.LinkConsumed))
		case ldLinkDetached:
			la = append(la, attribute.String(contract.AttrLink, contract.LinkDetachedFrom))
		case ldLinkLaunchedBy:
			la = append(la, attribute.String(contract.AttrLink, contract.LinkLaunchedBy))
		case ldLinkWrongType:
			la = append(la, attribute.Int(contract.AttrLink, 1))
		}
		links = append(links, sdktrace.Link{SpanContext: ldSC(tr, l.Target), Attributes: la})
	}

	start := stubBase.Add(time.Duration(i) * time.Millisecond)
	st := tracetest.SpanStub{
		Name: name, SpanContext: ldSC(s.Trace, s.ID),
		StartTime: start, EndTime: start.Add(5 * time.Millisecond),
		Attributes: attrs, Links: links,
	}
	switch {
	case s.Parent == 13:
		st.Parent = st.SpanContext
	case s.Parent > 0:
		st.Parent = ldSC(s.Trace, s.Parent)
	}
	if s.Err {
		st.Status = sdktrace.Status{Code: codes.Error}
	}

	ref := refmodel.Span{
		TraceID: refmodel.TraceID(st.SpanContext.TraceID()), SpanID: refmodel.SpanID(st.SpanContext.SpanID()),
		Name: name, Error: s.Err, Start: st.StartTime, End: st.EndTime, Attributes: refAttrs(attrs),
	}
	if st.Parent.IsValid() {
		ref.ParentSpanID = refmodel.SpanID(st.Parent.SpanID())
	}
	for _, l := range links {
		ref.Links = append(ref.Links, refmodel.Link{
			TraceID: refmodel.TraceID(l.SpanContext.TraceID()), SpanID: refmodel.SpanID(l.SpanContext.SpanID()),
			Attributes: refAttrs(l.Attributes),
		})
	}
	return ldBuilt{stub: st, ref: ref}
}
