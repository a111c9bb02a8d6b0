package ledgerrule

import (
	"math"

	"github.com/agentledger/agentledger/contract"
)

// Key is a span attribute the rule reads.
type Key uint8

// The span attributes the rule reads, each with one type (CONTRACT.md v0.6
// rule 1).
const (
	KeyInvocationID Key = iota
	KeyRole
	KeyChildren
	KeyFollowups
	KeyUnrecorded
	KeyDetached
	KeyRemote
	KeyLateChild
	KeyUnattributed
	KeyFollowupReason
	KeyFollowupConsumer
	KeyUsageMismatch
	KeyOperation
	KeyUsageInput
	KeyUsageOutput
	KeyUsageCacheRead
	KeyUsageCacheCreation
	KeyUsageReasoning
	// KeySDKLimit is invocation.sdk_limit (sdklimit.go).
	KeySDKLimit
	// KeyDoubleInstrumented is invocation.double_instrumented
	// (sdklimit.go).
	KeyDoubleInstrumented
	numKeys
)

// NumUsage is the number of summed usage attributes; usage index i is the
// attribute of Key KeyUsageInput+i.
const NumUsage = 5

// Usage indexes, in the order of the usage keys.
const (
	UsageInput = iota
	UsageOutput
	UsageCacheRead
	UsageCacheCreation
	UsageReasoning
)

var keyNames = [numKeys]string{
	KeyInvocationID:       contract.AttrInvocationID,
	KeyRole:               contract.AttrRole,
	KeyChildren:           contract.AttrChildren,
	KeyFollowups:          contract.AttrFollowups,
	KeyUnrecorded:         contract.AttrUnrecorded,
	KeyDetached:           contract.AttrDetached,
	KeyRemote:             contract.AttrRemote,
	KeyLateChild:          contract.AttrLateChild,
	KeyUnattributed:       contract.AttrUnattributed,
	KeyFollowupReason:     contract.AttrFollowupReason,
	KeyFollowupConsumer:   contract.AttrFollowupConsumer,
	KeyUsageMismatch:      contract.AttrUsageMismatch,
	KeyOperation:          contract.AttrOperationName,
	KeyUsageInput:         contract.AttrUsageInputTokens,
	KeyUsageOutput:        contract.AttrUsageOutputTokens,
	KeyUsageCacheRead:     contract.AttrUsageCacheReadTokens,
	KeyUsageCacheCreation: contract.AttrUsageCacheCreateTokens,
	KeyUsageReasoning:     contract.AttrUsageReasoningTokens,
	KeySDKLimit:           contract.AttrSDKLimit,
	KeyDoubleInstrumented: contract.AttrDoubleInstrumented,
}

// keyKinds is each key's one type.
var keyKinds = [numKeys]Kind{
	KeyInvocationID:       KindString,
	KeyRole:               KindString,
	KeyChildren:           KindInt,
	KeyFollowups:          KindInt,
	KeyUnrecorded:         KindInt,
	KeyDetached:           KindInt,
	KeyRemote:             KindBool,
	KeyLateChild:          KindBool,
	KeyUnattributed:       KindString,
	KeyFollowupReason:     KindString,
	KeyFollowupConsumer:   KindString,
	KeyUsageMismatch:      KindBool,
	KeyOperation:          KindString,
	KeyUsageInput:         KindInt,
	KeyUsageOutput:        KindInt,
	KeyUsageCacheRead:     KindInt,
	KeyUsageCacheCreation: KindInt,
	KeyUsageReasoning:     KindInt,
	KeySDKLimit:           KindString,
	KeyDoubleInstrumented: KindBool,
}

// String returns the attribute's name.
func (k Key) String() string {
	if k < numKeys {
		return keyNames[k]
	}
	return "unknown"
}

// Lookup returns the Key of an attribute name the rule reads. A half calls
// it for every attribute of a span and converts only the values of the
// keys it knows.
func Lookup(name string) (Key, bool) {
	// The common attributes of spans that carry none of these are
	// rejected by their prefix.
	if len(name) < 12 {
		return 0, false
	}
	switch name {
	case contract.AttrInvocationID:
		return KeyInvocationID, true
	case contract.AttrRole:
		return KeyRole, true
	case contract.AttrChildren:
		return KeyChildren, true
	case contract.AttrFollowups:
		return KeyFollowups, true
	case contract.AttrUnrecorded:
		return KeyUnrecorded, true
	case contract.AttrDetached:
		return KeyDetached, true
	case contract.AttrRemote:
		return KeyRemote, true
	case contract.AttrLateChild:
		return KeyLateChild, true
	case contract.AttrUnattributed:
		return KeyUnattributed, true
	case contract.AttrFollowupReason:
		return KeyFollowupReason, true
	case contract.AttrFollowupConsumer:
		return KeyFollowupConsumer, true
	case contract.AttrUsageMismatch:
		return KeyUsageMismatch, true
	case contract.AttrOperationName:
		return KeyOperation, true
	case contract.AttrUsageInputTokens:
		return KeyUsageInput, true
	case contract.AttrUsageOutputTokens:
		return KeyUsageOutput, true
	case contract.AttrUsageCacheReadTokens:
		return KeyUsageCacheRead, true
	case contract.AttrUsageCacheCreateTokens:
		return KeyUsageCacheCreation, true
	case contract.AttrUsageReasoningTokens:
		return KeyUsageReasoning, true
	case contract.AttrSDKLimit:
		return KeySDKLimit, true
	case contract.AttrDoubleInstrumented:
		return KeyDoubleInstrumented, true
	}
	return 0, false
}

// Role is a span's invocation.role, as far as the rule tells roles apart.
type Role uint8

// The roles.
const (
	RoleNone Role = iota // absent, malformed, or a value the rule does not know
	RoleRoot
	RoleBackground
	RoleContinuation
	RoleFollowupClosed
	RoleWake
	// RoleUnrecorded: an unrecorded-span declaration (graph_unrecorded.go).
	RoleUnrecorded
)

// CountState says how a declared count reads.
type CountState uint8

// The states of a Count.
const (
	CountAbsent  CountState = iota // not declared
	CountValid                     // a provable count: N
	CountInvalid                   // declared but unprovable: never final (invalid_count)
)

// Count is a declared count of spans (invocation.children, followups,
// unrecorded, detached).
type Count struct {
	State CountState
	N     int64 // when State is CountValid: 0 <= N <= the configured bound
}

// Declared reports whether the span declared the count at all.
func (c Count) Declared() bool { return c.State != CountAbsent }

// Facts is everything the rule reads from one span's attributes.
type Facts struct {
	// InvocationID is the span's invocation; Member is false when the
	// span has no invocation.id string (it belongs to no invocation).
	InvocationID string
	Member       bool

	Role Role
	// Children, Followups, Unrecorded and Detached are the declared
	// counts. A background span without followups reads as CountInvalid
	// (a job that does not say how many followups it promises cannot be
	// proven complete).
	Children, Followups, Unrecorded, Detached Count

	// Remote and LateChild read as true when set, or malformed.
	Remote, LateChild bool
	// Unattributed is set on an unattributed turn's root (or when the
	// attribute is malformed), with its reason.
	Unattributed       bool
	UnattributedReason string
	// Abandoned: invocation.followup.reason is abandoned (v0.5).
	Abandoned bool
	// Interrupted: invocation.followup.reason is interrupted; the jobs
	// its followup links discharge are reported followup_interrupted
	// (v0.7).
	Interrupted bool
	// Consumer is invocation.followup.consumer ("" when absent).
	Consumer string
	// UsageMismatch: invocation.usage.mismatch is true, the runtime's own
	// usage report differs from the model wire's count (v0.8). A
	// malformed value reads as false: it is malformed_attribute already,
	// and no rule needs its reading.
	UsageMismatch bool
	// SDKLimit is invocation.sdk_limit: the limit that cut an id of the
	// span ("" when absent; a malformed or empty value reads as
	// LimitValueLength). The invocation is never final.
	SDKLimit string
	// DoubleInstrumented: invocation.double_instrumented is set (a
	// malformed value reads as true).
	DoubleInstrumented bool

	// ModelCall: gen_ai.operation.name is one of the usage operations.
	// Usage is read only for model calls: UsagePresent has bit i set when
	// usage index i is present, UsageInvalid when it is present but not a
	// non-negative integer (not summed: invalid_usage); Usage[i] is then
	// the value.
	ModelCall                  bool
	UsagePresent, UsageInvalid uint8
	Usage                      [NumUsage]int64

	// Malformed has bit k set for each Key k whose value has the wrong
	// type or that is repeated with different values: the invocation is
	// never final (malformed_attribute:<key> on <span name>).
	Malformed uint32
}

// HasUsage reports whether a model call carries input or output usage,
// valid or not (rule 5: one that carries neither is missing usage).
func (f *Facts) HasUsage() bool {
	return f.UsagePresent&(1<<UsageInput|1<<UsageOutput) != 0
}

// MissingUsage reports rule 5: a model call that did not fail carries
// neither input nor output usage.
func (f *Facts) MissingUsage(failed bool) bool {
	return f.ModelCall && !failed && !f.HasUsage()
}

// Config is what a reading depends on beyond the span: which operations
// are model calls, and the largest provable count.
type Config struct {
	usageOps map[string]struct{}
	maxCount int64
}

// NewConfig returns a reader configuration: usageOps are the model-call
// operation names, maxCount the largest count that can be proven (the
// per-invocation span bound).
func NewConfig(usageOps []string, maxCount int) *Config {
	c := &Config{usageOps: make(map[string]struct{}, len(usageOps)), maxCount: int64(min(maxCount, math.MaxInt32))}
	for _, op := range usageOps {
		c.usageOps[op] = struct{}{}
	}
	return c
}

// IsUsageOperation reports whether op names a model call.
func (c *Config) IsUsageOperation(op string) bool {
	_, ok := c.usageOps[op]
	return ok
}

// SpanReader reads one span's rule attributes. The zero value is ready
// for a span; Reset makes it ready for the next. A half calls Attr for
// every attribute whose key Lookup knows, in the span's order (repeats
// included), then Read.
type SpanReader struct {
	seen uint32
	// bad has a key's bit when its first value has the wrong type or a
	// repeat differs; repeated when a repeat differs.
	bad, repeated uint32
	vals          [numKeys]Value
}

// Reset forgets the span read so far.
func (r *SpanReader) Reset() { r.seen, r.bad, r.repeated = 0, 0, 0 }

// Attr reads one attribute. A repeat of a key reads as the first unless
// its value differs, which makes the key malformed.
func (r *SpanReader) Attr(k Key, v Value) {
	if k >= numKeys {
		return
	}
	bit := uint32(1) << k
	if r.seen&bit != 0 {
		if !r.vals[k].same(v) {
			r.bad |= bit
			r.repeated |= bit
		}
		return
	}
	r.seen |= bit
	r.vals[k] = v
	if v.kind != keyKinds[k] {
		r.bad |= bit
	}
}

// Read returns the facts of the attributes read since the last Reset.
func (r *SpanReader) Read(cfg *Config, f *Facts) {
	*f = Facts{Malformed: r.bad}
	has := func(k Key) bool { return r.seen&(1<<k) != 0 }
	bad := func(k Key) bool { return r.bad&(1<<k) != 0 }

	if has(KeyInvocationID) && r.vals[KeyInvocationID].kind == KindString {
		f.InvocationID = r.vals[KeyInvocationID].str
		f.Member = true
	}
	if has(KeyRole) && !bad(KeyRole) {
		switch r.vals[KeyRole].str {
		case contract.RoleRoot:
			f.Role = RoleRoot
		case contract.RoleBackground:
			f.Role = RoleBackground
		case contract.RoleContinuation:
			f.Role = RoleContinuation
		case contract.RoleFollowupClosed:
			f.Role = RoleFollowupClosed
		case contract.RoleWake:
			f.Role = RoleWake
		case contract.RoleUnrecorded:
			f.Role = RoleUnrecorded
		}
	}
	f.Children = r.count(KeyChildren, cfg)
	f.Followups = r.count(KeyFollowups, cfg)
	f.Unrecorded = r.count(KeyUnrecorded, cfg)
	f.Detached = r.count(KeyDetached, cfg)
	if f.Role == RoleBackground && !f.Followups.Declared() {
		f.Followups.State = CountInvalid
	}
	// A malformed flag reads as set: that relaxes no rule.
	f.Remote = has(KeyRemote) && (bad(KeyRemote) || r.vals[KeyRemote].Bool())
	f.LateChild = has(KeyLateChild) && (bad(KeyLateChild) || r.vals[KeyLateChild].Bool())
	if has(KeyUnattributed) {
		f.Unattributed = true
		f.UnattributedReason = r.vals[KeyUnattributed].str
		if bad(KeyUnattributed) || f.UnattributedReason == "" {
			f.UnattributedReason = "unknown"
		}
	}
	if has(KeyFollowupReason) && !bad(KeyFollowupReason) {
		f.Abandoned = r.vals[KeyFollowupReason].str == contract.ReasonAbandoned
		f.Interrupted = r.vals[KeyFollowupReason].str == contract.ReasonInterrupted
	}
	if has(KeyFollowupConsumer) && !bad(KeyFollowupConsumer) {
		f.Consumer = r.vals[KeyFollowupConsumer].str
	}
	f.UsageMismatch = has(KeyUsageMismatch) && !bad(KeyUsageMismatch) && r.vals[KeyUsageMismatch].Bool()
	f.DoubleInstrumented = has(KeyDoubleInstrumented) && (bad(KeyDoubleInstrumented) || r.vals[KeyDoubleInstrumented].Bool())
	if has(KeySDKLimit) {
		f.SDKLimit = r.vals[KeySDKLimit].str
		if bad(KeySDKLimit) || f.SDKLimit == "" {
			f.SDKLimit = LimitValueLength
		}
	}
	if has(KeyOperation) && !bad(KeyOperation) {
		f.ModelCall = cfg.IsUsageOperation(r.vals[KeyOperation].str)
	}
	const usageBits = 1<<KeyUsageInput | 1<<KeyUsageOutput | 1<<KeyUsageCacheRead |
		1<<KeyUsageCacheCreation | 1<<KeyUsageReasoning
	if !f.ModelCall {
		// Usage of a span that is not a model call is not read.
		f.Malformed &^= usageBits
		return
	}
	for i := range NumUsage {
		k := KeyUsageInput + Key(i)
		if !has(k) {
			continue
		}
		f.UsagePresent |= 1 << i
		v := r.vals[k]
		if v.kind != KindInt || v.num < 0 {
			// The wrong type is invalid_usage (v0.2 rule 5), not
			// malformed_attribute; a repeat that differs is malformed.
			f.UsageInvalid |= 1 << i
			if r.repeated&(1<<k) == 0 {
				f.Malformed &^= 1 << k
			}
			continue
		}
		f.Usage[i] = v.num
	}
}

// count reads a declared count: an int within [0, maxCount] is provable,
// anything else declared is not (and the wrong type or a differing repeat
// is also malformed).
func (r *SpanReader) count(k Key, cfg *Config) Count {
	if r.seen&(1<<k) == 0 {
		return Count{}
	}
	v := r.vals[k]
	if r.bad&(1<<k) != 0 || v.kind != KindInt || v.num < 0 || v.num > cfg.maxCount {
		return Count{State: CountInvalid}
	}
	return Count{State: CountValid, N: v.num}
}

// MalformedReasons appends a malformed_attribute reason per key set in
// mask, in Key order, naming the span.
func MalformedReasons(dst []string, mask uint32, spanName string) []string {
	for k := Key(0); k < numKeys; k++ {
		if mask&(1<<k) != 0 {
			dst = append(dst, MalformedReason(k.String(), spanName))
		}
	}
	return dst
}

// MalformedReason is the reason of a malformed attribute key of a span
// (or of one of its links).
func MalformedReason(key, spanName string) string {
	return contract.ReasonMalformedAttribute + ":" + key + " on " + spanName
}
