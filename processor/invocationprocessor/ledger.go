package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"math"
	"slices"
	"sort"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/internal/contract"
)

// maxAnomalies bounds the distinct anomaly entries kept per invocation, so a
// stream of oddly named spans cannot grow one invocation without limit.
const maxAnomalies = 64

// reasonInvalidCount is the blocking reason for an invocation.children or
// invocation.followups value that cannot be trusted (wrong type, negative,
// larger than max_spans_per_invocation, or missing on a background span).
const reasonInvalidCount = "invalid_count"

// reasonSpanLimit is the incomplete reason used when max_spans_per_invocation
// was hit; the same kind appears in the anomalies, as the contract lists it.
const reasonSpanLimit = "span_limit"

// anomalyUnpricedModel marks a model call whose model has no entry in the
// configured price table (only when prices are configured).
const anomalyUnpricedModel = "unpriced_model"

// anomalyExtraRoot marks a second root span (another span ID) in one
// invocation; it is counted as an ordinary member.
const anomalyExtraRoot = "extra_root"

// phase is where an invocation is in its life.
type phase uint8

const (
	phaseOpen   phase = iota // accepting spans, obligations may be open
	phaseClosed              // a final or incomplete summary was emitted; kept for retention
)

// spanState is what an invocation remembers per span ID: whether the span
// itself arrived, and the obligations it declares or that point at it.
// DeclaredChildren and DeclaredFollowups are -1 when nothing was declared.
type spanState struct {
	Name              string `json:"name,omitempty"`
	LinkedBy          string `json:"linked_by,omitempty"`
	DeclaredChildren  int    `json:"declared_children"`
	ArrivedChildren   int    `json:"arrived_children"`
	DeclaredFollowups int    `json:"declared_followups"`
	ArrivedFollowups  int    `json:"arrived_followups"`
	Arrived           bool   `json:"arrived"`
	Remote            bool   `json:"remote"`
}

// usage holds the five summed gen_ai.usage values.
type usage struct {
	Input         int64 `json:"input"`
	Output        int64 `json:"output"`
	CacheRead     int64 `json:"cache_read"`
	CacheCreation int64 `json:"cache_creation"`
	Reasoning     int64 `json:"reasoning"`
}

// earlyCall is a model call that arrived before the root, kept until the
// root's end time can classify it as before or after the result.
type earlyCall struct {
	Start  uint64 `json:"start"`
	Input  int64  `json:"input"`
	Output int64  `json:"output"`
}

// spanRef names a span in another trace (continuation roots).
type spanRef struct {
	TraceID pcommon.TraceID `json:"trace_id"`
	SpanID  pcommon.SpanID  `json:"span_id"`
}

// invocation is the state of one invocation. Its exported fields are plain
// data (no pointers into pdata, no locks) so a storage extension can persist
// it; index holds the shard's bookkeeping, which is rebuilt, not stored.
type invocation struct {
	ID    string `json:"id"`
	Phase phase  `json:"phase"`

	// Times of the processor's clock, in Unix nanoseconds.
	FirstArrival  int64 `json:"first_arrival"`
	LastArrival   int64 `json:"last_arrival"`
	LastDischarge int64 `json:"last_discharge"`
	LastSummary   int64 `json:"last_summary"`

	// Open counts unmet obligations: the root (until it arrives), declared
	// children and followups not yet arrived. See LEDGER.md.
	Open    int      `json:"open"`
	Invalid []string `json:"invalid,omitempty"`

	RootArrived    bool            `json:"root_arrived"`
	RootTraceID    pcommon.TraceID `json:"root_trace_id"`
	RootSpanID     pcommon.SpanID  `json:"root_span_id"`
	RootStart      uint64          `json:"root_start"`
	RootEnd        uint64          `json:"root_end"`
	ConversationID string          `json:"conversation_id,omitempty"`
	AgentName      string          `json:"agent_name,omitempty"`
	Resource       map[string]any  `json:"resource,omitempty"`
	FirstTraceID   pcommon.TraceID `json:"first_trace_id"`
	MinStart       uint64          `json:"min_start"`
	LatestEnd      uint64          `json:"latest_end"`
	HasRemote      bool            `json:"has_remote"`
	SpanLimitHit   bool            `json:"span_limit_hit"`

	Spans  map[pcommon.SpanID]spanState `json:"spans"`
	Traces map[pcommon.TraceID]struct{} `json:"traces"`
	Early  []earlyCall                  `json:"early,omitempty"`
	Conts  []spanRef                    `json:"continuation_roots,omitempty"`

	Usage          usage   `json:"usage"`
	AfterInput     int64   `json:"after_input"`
	AfterOutput    int64   `json:"after_output"`
	Cost           float64 `json:"cost"`
	Indexed        int64   `json:"indexed"`
	Duplicates     int64   `json:"duplicates"`
	ModelCalls     int64   `json:"model_calls"`
	BackgroundJobs int64   `json:"background_jobs"`
	Continuations  int64   `json:"continuations"`

	Anomalies   []string `json:"anomalies,omitempty"`
	PendingSent bool     `json:"pending_sent"`
	Revision    int64    `json:"revision"`
	Forced      string   `json:"forced,omitempty"`
	Dirty       bool     `json:"dirty"`

	index invIndex
}

// invIndex is the shard's bookkeeping for one invocation.
type invIndex struct {
	heapIdx    int
	due        int64
	prev, next *invocation
	touchedGen uint64
}

func newInvocation(id string, now int64) *invocation {
	return &invocation{
		ID:            id,
		FirstArrival:  now,
		LastArrival:   now,
		LastDischarge: now,
		Open:          1,
		Spans:         make(map[pcommon.SpanID]spanState, 8),
		Traces:        make(map[pcommon.TraceID]struct{}, 1),
		index:         invIndex{heapIdx: -1},
	}
}

// ledgerConfig is the part of Config the per-span path needs, prepared once.
type ledgerConfig struct {
	maxSpans     int
	settle       int64
	openTimeout  int64
	retention    int64
	emitPending  bool
	usageOps     map[string]struct{}
	prices       map[string]Price
	pricesActive bool
}

// addResult tells the caller what indexing one span did, for telemetry.
type addResult uint8

const (
	addIndexed addResult = iota
	addDuplicate
	addSpanLimit
)

func (inv *invocation) addAnomaly(a string) {
	if slices.Contains(inv.Anomalies, a) || len(inv.Anomalies) >= maxAnomalies {
		return
	}
	inv.Anomalies = append(inv.Anomalies, a)
}

func (inv *invocation) addInvalid(r string) {
	if slices.Contains(inv.Invalid, r) || len(inv.Invalid) >= maxAnomalies {
		return
	}
	inv.Invalid = append(inv.Invalid, r)
}

// state returns a copy of the span ID's state, or a fresh one; callers
// store it back. Values, not pointers, keep one allocation per span off the
// hot path.
func (inv *invocation) state(id pcommon.SpanID) spanState {
	if st, ok := inv.Spans[id]; ok {
		return st
	}
	return spanState{DeclaredChildren: -1, DeclaredFollowups: -1}
}

func (inv *invocation) discharge(now int64) {
	inv.Open--
	inv.LastDischarge = now
}

// validCount reads an obligation count; ok is false when it cannot be
// trusted.
func validCount(v pcommon.Value, maxSpans int) (int, bool) {
	if v.Type() != pcommon.ValueTypeInt {
		return 0, false
	}
	n := v.Int()
	if n < 0 || n > int64(maxSpans) {
		return 0, false
	}
	return int(n), true
}

// add indexes one span of the invocation in O(1) amortised time (plus its
// links), updating the open obligation count as LEDGER.md describes.
func (inv *invocation) add(sp ptrace.Span, res pcommon.Resource, now int64, cfg *ledgerConfig) addResult {
	id := sp.SpanID()
	if st, ok := inv.Spans[id]; ok && st.Arrived {
		inv.Duplicates++
		return addDuplicate
	}
	if inv.SpanLimitHit || len(inv.Spans) >= cfg.maxSpans {
		if !inv.SpanLimitHit {
			inv.SpanLimitHit = true
			inv.addAnomaly(reasonSpanLimit)
			inv.Dirty = true
		}
		return addSpanLimit
	}
	name := sp.Name()
	attrs := sp.Attributes()
	if inv.Phase == phaseClosed {
		inv.addAnomaly(contract.AnomalyLateSpan + ":" + name)
		inv.Dirty = true
	}

	st := inv.state(id)
	st.Arrived = true
	st.Name = name
	inv.Indexed++
	inv.LastArrival = now
	tid := sp.TraceID()
	role := ""
	if v, ok := attrs.Get(contract.AttrRole); ok && v.Type() == pcommon.ValueTypeStr {
		role = v.Str()
	}
	if len(inv.Traces) == 0 {
		inv.FirstTraceID = tid
		if role != contract.RoleRoot {
			inv.Resource = res.Attributes().AsRaw() // the root's replaces it
		}
	}
	inv.Traces[tid] = struct{}{}
	if start := uint64(sp.StartTimestamp()); inv.MinStart == 0 || start < inv.MinStart {
		inv.MinStart = start
	}
	if end := uint64(sp.EndTimestamp()); end > inv.LatestEnd {
		inv.LatestEnd = end
	}

	if v, ok := attrs.Get(contract.AttrRemote); ok {
		// A remote flag of the wrong type is taken as remote: waiting for
		// settle is the conservative reading.
		if v.Type() != pcommon.ValueTypeBool || v.Bool() {
			st.Remote = true
			inv.HasRemote = true
		}
	}

	if role == contract.RoleRoot {
		if inv.RootArrived {
			inv.addAnomaly(anomalyExtraRoot + ":" + name)
		} else {
			inv.setRoot(sp, res, now)
		}
	}

	if v, ok := attrs.Get(contract.AttrChildren); ok {
		if n, ok := validCount(v, cfg.maxSpans); ok {
			st.DeclaredChildren = n
			if n > st.ArrivedChildren {
				inv.Open += n - st.ArrivedChildren
			} else if st.ArrivedChildren > n && !st.Remote {
				inv.addAnomaly(contract.AnomalyExtraChildren + ":" + name)
			}
		} else {
			inv.addInvalid(reasonInvalidCount + ":" + name)
		}
	}

	switch role {
	case contract.RoleBackground:
		inv.BackgroundJobs++
		n, valid := 0, false
		if v, ok := attrs.Get(contract.AttrFollowups); ok {
			n, valid = validCount(v, cfg.maxSpans)
		}
		if valid {
			st.DeclaredFollowups = n
			if n > st.ArrivedFollowups {
				inv.Open += n - st.ArrivedFollowups
			}
		} else {
			inv.addInvalid(reasonInvalidCount + ":" + name)
		}
	case contract.RoleContinuation:
		inv.Continuations++
		inv.Conts = append(inv.Conts, spanRef{TraceID: tid, SpanID: id})
	}
	inv.Spans[id] = st

	if pid := sp.ParentSpanID(); !pid.IsEmpty() {
		p := inv.state(pid)
		before := p.ArrivedChildren
		p.ArrivedChildren++
		if p.Arrived && p.DeclaredChildren >= 0 {
			if before < p.DeclaredChildren {
				inv.discharge(now)
			} else if !p.Remote {
				inv.addAnomaly(contract.AnomalyExtraChildren + ":" + p.Name)
			}
		}
		inv.Spans[pid] = p
	}

	links := sp.Links()
	for i := 0; i < links.Len(); i++ {
		l := links.At(i)
		v, ok := l.Attributes().Get(contract.AttrLink)
		if !ok || v.Type() != pcommon.ValueTypeStr || v.Str() != contract.LinkFollowup {
			continue
		}
		t := inv.state(l.SpanID())
		before := t.ArrivedFollowups
		t.ArrivedFollowups++
		if t.LinkedBy == "" {
			t.LinkedBy = name
		}
		if t.Arrived && t.DeclaredFollowups >= 0 && before < t.DeclaredFollowups {
			inv.discharge(now)
		}
		inv.Spans[l.SpanID()] = t
	}

	if v, ok := attrs.Get(contract.AttrOperationName); ok && v.Type() == pcommon.ValueTypeStr {
		if _, isModel := cfg.usageOps[v.Str()]; isModel {
			inv.addModelCall(sp, cfg)
		}
	}
	return addIndexed
}

func (inv *invocation) setRoot(sp ptrace.Span, res pcommon.Resource, now int64) {
	inv.RootArrived = true
	inv.discharge(now)
	inv.RootTraceID = sp.TraceID()
	inv.RootSpanID = sp.SpanID()
	inv.RootStart = uint64(sp.StartTimestamp())
	inv.RootEnd = uint64(sp.EndTimestamp())
	inv.Resource = res.Attributes().AsRaw()
	attrs := sp.Attributes()
	if v, ok := attrs.Get(contract.AttrConversationID); ok {
		inv.ConversationID = v.AsString()
	}
	if v, ok := attrs.Get(contract.AttrAgentName); ok {
		inv.AgentName = v.AsString()
	}
	for _, e := range inv.Early {
		if e.Start > inv.RootEnd {
			inv.AfterInput += e.Input
			inv.AfterOutput += e.Output
		}
	}
	inv.Early = nil
}

// readUsage returns a usage attribute's value if it is a non-negative int64
// that keeps *sum from overflowing; otherwise it records invalid_usage.
func (inv *invocation) readUsage(attrs pcommon.Map, key, spanName string, sum *int64) (int64, bool) {
	v, ok := attrs.Get(key)
	if !ok {
		return 0, false
	}
	if v.Type() != pcommon.ValueTypeInt || v.Int() < 0 || v.Int() > math.MaxInt64-*sum {
		inv.addAnomaly(contract.AnomalyInvalidUsage + ":" + key + " on " + spanName)
		return 0, false
	}
	n := v.Int()
	*sum += n
	return n, true
}

func (inv *invocation) addModelCall(sp ptrace.Span, cfg *ledgerConfig) {
	inv.ModelCalls++
	attrs := sp.Attributes()
	name := sp.Name()
	in, _ := inv.readUsage(attrs, contract.AttrUsageInputTokens, name, &inv.Usage.Input)
	out, _ := inv.readUsage(attrs, contract.AttrUsageOutputTokens, name, &inv.Usage.Output)
	cr, _ := inv.readUsage(attrs, contract.AttrUsageCacheReadTokens, name, &inv.Usage.CacheRead)
	cc, _ := inv.readUsage(attrs, contract.AttrUsageCacheCreateTokens, name, &inv.Usage.CacheCreation)
	_, _ = inv.readUsage(attrs, contract.AttrUsageReasoningTokens, name, &inv.Usage.Reasoning)

	// After-result parts never exceed the totals, so they cannot overflow
	// where the totals did not.
	start := uint64(sp.StartTimestamp())
	if inv.RootArrived {
		if start > inv.RootEnd {
			inv.AfterInput += in
			inv.AfterOutput += out
		}
	} else if in != 0 || out != 0 {
		inv.Early = append(inv.Early, earlyCall{Start: start, Input: in, Output: out})
	}

	if !cfg.pricesActive {
		return
	}
	model := ""
	if v, ok := attrs.Get(contract.AttrResponseModel); ok && v.Type() == pcommon.ValueTypeStr {
		model = v.Str()
	}
	if model == "" {
		if v, ok := attrs.Get(contract.AttrRequestModel); ok && v.Type() == pcommon.ValueTypeStr {
			model = v.Str()
		}
	}
	p, ok := cfg.prices[model]
	if !ok {
		inv.addAnomaly(anomalyUnpricedModel + ":" + model)
		return
	}
	inv.Cost += callCost(p, in, out, cr, cc)
}

// callCost prices one model call. Semconv input counts include cache reads
// and cache creations, so only the remainder is charged at the input rate.
func callCost(p Price, in, out, cacheRead, cacheCreation int64) float64 {
	uncached := in - cacheRead - cacheCreation
	if uncached < 0 {
		uncached = 0
	}
	return (float64(uncached)*p.Input + float64(out)*p.Output +
		float64(cacheRead)*p.CacheRead + float64(cacheCreation)*p.CacheCreation) / 1e6
}

// obligationsMet reports conditions 1-3 of CONTRACT.md (and that nothing
// made them unprovable).
func (inv *invocation) obligationsMet() bool {
	return inv.RootArrived && inv.Open == 0 && len(inv.Invalid) == 0 && !inv.SpanLimitHit
}

// settled reports condition 4. It is checked over the whole invocation: the
// latest arrival anywhere is at least as late as the latest in any remote
// subtree, so this never declares final earlier than the contract allows,
// and it needs no walk up the parent chain per span.
func (inv *invocation) settled(now int64, cfg *ledgerConfig) bool {
	return !inv.HasRemote || now-inv.LastArrival >= cfg.settle
}

// reasons lists why the invocation is not final, each "kind:detail",
// deterministic in order: root_missing, then obligations sorted, then
// unprovable counts, then remote settling, then the forced reason.
func (inv *invocation) reasons(now int64, cfg *ledgerConfig) []string {
	var out []string
	if !inv.RootArrived {
		out = append(out, contract.ReasonRootMissing)
	}
	var obl []string
	for _, st := range inv.Spans {
		if !st.Arrived {
			continue
		}
		if st.DeclaredChildren > st.ArrivedChildren {
			obl = append(obl, contract.ReasonMissingChildren+":"+st.Name)
		}
		if st.DeclaredFollowups > st.ArrivedFollowups {
			obl = append(obl, contract.ReasonOpenFollowup+":"+st.Name)
		}
		if st.Remote && inv.Phase == phaseOpen && !inv.settled(now, cfg) {
			obl = append(obl, contract.ReasonRemoteSettling+":"+st.Name)
		}
	}
	sort.Strings(obl)
	out = append(out, slices.Compact(obl)...)
	inv2 := slices.Clone(inv.Invalid)
	sort.Strings(inv2)
	out = append(out, inv2...)
	if inv.SpanLimitHit {
		out = append(out, reasonSpanLimit)
	}
	if inv.Forced != "" && inv.Forced != reasonSpanLimit {
		out = append(out, inv.Forced)
	}
	return out
}

// anomalies lists the sticky anomalies and, for a final summary, foreign
// followups: followup links whose target is not a member of this invocation
// (it belongs to another one, so the link discharged nothing). Before final
// a missing target may simply not have arrived yet, so it is not reported.
func (inv *invocation) anomalies(final bool) []string {
	out := slices.Clone(inv.Anomalies)
	for _, st := range inv.Spans {
		if !final {
			break
		}
		if !st.Arrived && st.ArrivedFollowups > 0 {
			a := contract.AnomalyForeignFollowup + ":" + st.LinkedBy
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	sort.Strings(out)
	return out
}
