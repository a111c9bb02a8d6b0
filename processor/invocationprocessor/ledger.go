package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"github.com/agentledger/agentledger/internal/ledgerrule"

	"math"
	"slices"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/agentledger/agentledger/contract"
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
// it; index holds the shard's bookkeeping and lookup tables, which are
// rebuilt on demand, not stored.
type invocation struct {
	// ID is the ledger key: the invocation.id, joined to its tenant when
	// the processor has tenants (ledgerKey, tenant.go). Summaries and
	// status views carry the two apart.
	ID string `json:"id"`

	// Times of the processor's clock, in Unix nanoseconds.
	FirstArrival  int64 `json:"first_arrival"`
	LastArrival   int64 `json:"last_arrival"`
	LastDischarge int64 `json:"last_discharge"`
	LastSummary   int64 `json:"last_summary"`
	// RootArrival is when the root span arrived (0 before): the pending
	// summary is due pending_delay after it. It is not stored on its own:
	// a restart replays the root at its journalled time (storage.go).
	RootArrival int64 `json:"root_arrival"`

	// Open counts unmet obligations: the root (until it arrives), declared
	// children and followups not yet arrived. See LEDGER.md.
	Open int `json:"open"`
	// Invalid lists counts that cannot be proven (invalid_count): the
	// invocation waits for open_timeout and is never final.
	Invalid []string `json:"invalid,omitempty"`
	// Taints lists what makes the invocation never final although its
	// counts may be met (CONTRACT v0.2 rules 3, 5, 7): it closes
	// incomplete as soon as conditions 1-4 otherwise hold.
	Taints []string `json:"taints,omitempty"`

	// The flags are together so that the struct has no padding between
	// them.
	Phase        phase `json:"phase"`
	RootArrived  bool  `json:"root_arrived"`
	HasRemote    bool  `json:"has_remote"`
	SpanLimitHit bool  `json:"span_limit_hit"`
	PendingSent  bool  `json:"pending_sent"`
	// Dirty is set when a span arrived after the latest final or
	// incomplete summary: a revision is owed.
	Dirty bool `json:"dirty"`

	RootTraceID    pcommon.TraceID `json:"root_trace_id"`
	RootSpanID     pcommon.SpanID  `json:"root_span_id"`
	RootStart      uint64          `json:"root_start"`
	RootEnd        uint64          `json:"root_end"`
	ConversationID string          `json:"conversation_id,omitempty"`
	AgentName      string          `json:"agent_name,omitempty"`
	Resource       map[string]any  `json:"resource,omitempty"`
	MinStart       uint64          `json:"min_start"`
	LatestEnd      uint64          `json:"latest_end"`

	// Spans holds the full state of every span ID while the invocation is
	// open; once closed, only of span IDs that still owe or are owed
	// something (and of referenced spans that never arrived). Closed holds
	// the rest after close: what duplicates and revisions need. Both are
	// unordered, pointer-free slices with one entry per span ID, searched
	// linearly while small and through index.spans() and index.closed() once
	// large.
	Spans  []spanEntry  `json:"spans"`
	Closed []closedSpan `json:"closed,omitempty"`
	// Names interns span names; spanState and closedSpan refer to them by
	// index.
	Names []string `json:"names"`
	// Traces lists the invocation's trace IDs in arrival order; spans
	// refer to them by index.
	Traces []pcommon.TraceID `json:"traces"`
	// LinkTraces lists the traces followup links named for targets that
	// had not arrived, when no span of the invocation arrived in them
	// (spanState.Trace below noIndex refers to them); not counted in the
	// summary's traces.
	LinkTraces        []pcommon.TraceID `json:"link_traces,omitempty"`
	Early             []earlyCall       `json:"early,omitempty"`
	ContinuationRoots []spanRef         `json:"continuation_roots,omitempty"`

	Usage          usage   `json:"usage"`
	AfterInput     int64   `json:"after_input"`
	AfterOutput    int64   `json:"after_output"`
	Cost           float64 `json:"cost"`
	Indexed        int64   `json:"indexed"`
	Duplicates     int64   `json:"duplicates"`
	ModelCalls     int64   `json:"model_calls"`
	BackgroundJobs int64   `json:"background_jobs"`
	Continuations  int64   `json:"continuations"`

	// JobTimes holds each background span's start and end, for the status
	// extension (status.go).
	JobTimes []jobTimes `json:"job_times,omitempty"`

	// Detached holds the invocation.detached obligations (detached.go):
	// nil unless a span declared one or linked with detached_from.
	Detached []detachedCount `json:"-"`

	Anomalies []string `json:"anomalies,omitempty"`
	Revision  int64    `json:"revision"`
	Forced    string   `json:"forced,omitempty"`

	index invIndex
}

// invIndex is the shard's bookkeeping for one invocation, and lookup
// tables derived from the stored fields.
type invIndex struct {
	heapIdx    int
	due        int64
	prev, next *invocation
	touchedGen uint64
	// seq orders invocations across shards: when opened while open, when
	// closed while closed (the global bounds evict the lowest).
	seq uint64
	// tenant, tprev and tnext place the invocation in its tenant's list
	// of the shard (quota.go); bytes is its last byte estimate, counted
	// in the bounds (bytes.go).
	tenant       *tenantState
	tprev, tnext *invocation
	bytes        int64

	// maps holds the lookup maps of an invocation grown beyond linear
	// search: nil for most invocations, which so carry one pointer
	// instead of four.
	maps *lookupMaps
}

// lookupMaps look up an invocation's Names, Traces, Spans and Closed.
type lookupMaps struct {
	// names and traces look up Names and Traces once they hold more than
	// smallIndex entries; nil until then, and after close.
	names  map[string]int32
	traces map[pcommon.TraceID]int32
	// linkTraces looks up LinkTraces the same way.
	linkTraces map[pcommon.TraceID]int32
	// spans and closed map span IDs to their index in Spans and Closed
	// once those hold more than smallSpans entries; nil until then.
	spans, closed map[pcommon.SpanID]int32
}

// lookup returns the invocation's lookup maps, allocating them on first
// use.
func (x *invIndex) lookup() *lookupMaps {
	if x.maps == nil {
		x.maps = &lookupMaps{}
	}
	return x.maps
}

// names, traces, spans and closed return the lookup maps, nil when there
// are none.
func (x *invIndex) names() map[string]int32 {
	if x.maps == nil {
		return nil
	}
	return x.maps.names
}

func (x *invIndex) traces() map[pcommon.TraceID]int32 {
	if x.maps == nil {
		return nil
	}
	return x.maps.traces
}

func (x *invIndex) linkTraces() map[pcommon.TraceID]int32 {
	if x.maps == nil {
		return nil
	}
	return x.maps.linkTraces
}

func (x *invIndex) spans() map[pcommon.SpanID]int32 {
	if x.maps == nil {
		return nil
	}
	return x.maps.spans
}

func (x *invIndex) closed() map[pcommon.SpanID]int32 {
	if x.maps == nil {
		return nil
	}
	return x.maps.closed
}

// setSpanMaps sets the span lookups, releasing lookupMaps when none is
// left.
func (x *invIndex) setSpanMaps(spans, closed map[pcommon.SpanID]int32) {
	if x.maps == nil && spans == nil && closed == nil {
		return
	}
	m := x.lookup()
	m.spans, m.closed = spans, closed
	if m.names == nil && m.traces == nil && m.linkTraces == nil && spans == nil && closed == nil {
		x.maps = nil
	}
}

// invocationBlock is an invocation allocated together with room for its
// first names, traces and continuation root: most invocations need no
// more, and one allocation serves them all.
type invocationBlock struct {
	inv    invocation
	names  [6]string
	traces [2]pcommon.TraceID
	roots  [1]spanRef
}

func newInvocation(id string, now int64) *invocation {
	b := &invocationBlock{inv: invocation{
		ID:            id,
		FirstArrival:  now,
		LastArrival:   now,
		LastDischarge: now,
		Open:          1,
		index:         invIndex{heapIdx: -1},
	}}
	b.inv.Names = b.names[:0]
	b.inv.Traces = b.traces[:0]
	b.inv.ContinuationRoots = b.roots[:0]
	return &b.inv
}

// smallIndex is how many names or traces are searched linearly before a
// lookup map is built: most invocations have a few of each.
const smallIndex = 8

// nameIndex interns a span name.
func (inv *invocation) nameIndex(name string) int32 {
	names := inv.index.names()
	if names == nil {
		if i := slices.Index(inv.Names, name); i >= 0 {
			return int32(i)
		}
		if len(inv.Names) >= smallIndex {
			names = make(map[string]int32, 2*len(inv.Names))
			for i, n := range inv.Names {
				names[n] = int32(i)
			}
			inv.index.lookup().names = names
		}
	} else if i, ok := names[name]; ok {
		return i
	}
	i := int32(len(inv.Names))
	if inv.Names == nil {
		inv.Names = make([]string, 0, 4)
	}
	inv.Names = append(inv.Names, name)
	if names != nil {
		names[name] = i
	}
	return i
}

// name returns an interned name, "" for noName.
func (inv *invocation) name(i int32) string {
	if i < 0 || int(i) >= len(inv.Names) {
		return ""
	}
	return inv.Names[i]
}

// traceIndex returns the trace's index, or -1 when the invocation has no
// span in it.
func (inv *invocation) traceIndex(t pcommon.TraceID) int32 {
	traces := inv.index.traces()
	if traces == nil {
		return int32(slices.Index(inv.Traces, t))
	}
	if i, ok := traces[t]; ok {
		return i
	}
	return -1
}

// addTrace registers a trace and returns its index.
func (inv *invocation) addTrace(t pcommon.TraceID) int32 {
	if i := inv.traceIndex(t); i >= 0 {
		return i
	}
	traces := inv.index.traces()
	if traces == nil && len(inv.Traces) >= smallIndex {
		traces = make(map[pcommon.TraceID]int32, 2*len(inv.Traces))
		for i, t := range inv.Traces {
			traces[t] = int32(i)
		}
		inv.index.lookup().traces = traces
	}
	i := int32(len(inv.Traces))
	if inv.Traces == nil {
		inv.Traces = make([]pcommon.TraceID, 0, 2)
	}
	inv.Traces = append(inv.Traces, t)
	if traces != nil {
		traces[t] = i
	}
	return i
}

// ledgerConfig is the part of Config the per-span path needs, prepared once.
type ledgerConfig struct {
	maxSpans     int
	settle       int64
	openTimeout  int64
	retention    int64
	emitPending  bool
	pendingDelay int64
	usageOps     map[string]struct{}
	// rule configures the reader of spans (internal/ledgerrule).
	rule         *ledgerrule.Config
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

// addTaint records a reason the invocation can never be final. The list is
// bounded like the anomalies, but never emptied: one entry suffices.
func (inv *invocation) addTaint(r string) {
	if slices.Contains(inv.Taints, r) || len(inv.Taints) >= maxAnomalies {
		return
	}
	inv.Taints = append(inv.Taints, r)
}

func (inv *invocation) discharge(now int64) {
	inv.Open--
	inv.LastDischarge = now
}

// add indexes one span of the invocation, from the facts readFacts read
// of it (links are read here), in O(1) amortised time (plus its links),
// updating the open obligation count as LEDGER.md describes and applying
// CONTRACT.md's v0.2 rules.
//
// resources shares the resource attributes kept for summaries with the
// shard's other invocations.
func (inv *invocation) add(f *spanFacts, res pcommon.Resource, resources *resourceCache, now int64, cfg *ledgerConfig) addResult {
	id := f.spanID
	name := f.name
	traceIdx := inv.traceIndex(f.traceID)
	// self is the span ID's state in Spans, looked up once: -1 when the ID
	// is new to the invocation (or closed, and so a duplicate).
	self := inv.spanAt(id)
	if prior, ok := inv.arrivedTrace(id, self); ok {
		inv.Duplicates++
		if prior != traceIdx {
			// Rule 3: the later of two spans sharing an ID is not indexed.
			inv.addTaint(contract.ReasonSpanIDReused + ":" + name)
			inv.Dirty = inv.Dirty || inv.Phase == phaseClosed
		}
		return addDuplicate
	}
	// Every span ID held counts toward the bound (v0.6 rule 5): one held
	// already, as a parent or link target, takes no more room.
	if inv.SpanLimitHit || (self < 0 && !inv.room(cfg)) {
		return addSpanLimit
	}
	if inv.Phase == phaseClosed {
		inv.addAnomaly(contract.AnomalyLateSpan + ":" + name)
		inv.Dirty = true
	}

	inv.Indexed++
	inv.LastArrival = now
	if len(inv.Traces) == 0 && f.role != roleRoot {
		inv.Resource = resources.of(res) // the root's replaces it
	}
	traceIdx = inv.addTrace(f.traceID)
	if inv.MinStart == 0 || f.start < inv.MinStart {
		inv.MinStart = f.start
	}
	if f.end > inv.LatestEnd {
		inv.LatestEnd = f.end
	}

	// A span ID nothing referred to before has no children yet: it cannot
	// close a cycle.
	fresh := self < 0
	if fresh {
		if inv.Spans == nil {
			// The first span (often the root) sizes Spans for the
			// children it declares, so reserveSpans need not grow it.
			if n, ok := count(f.children); ok {
				inv.Spans = make([]spanEntry, 0, max(firstSpans, 1+min(int(n), maxReserve)))
			}
		}
		self = inv.appendSpan(id, newSpanState())
	}
	st := &inv.Spans[self]
	if st.Trace != noIndex && !inv.sameTrace(st.Trace, traceIdx) {
		// Children named this span as parent, or followup links named it,
		// from another trace before it arrived (v0.6 rule 2): none of them
		// is its child or discharges it.
		if st.ArrivedChildren > 0 || st.LateChildren > 0 {
			inv.addTaint(contract.ReasonMalformedParentage + ":" + inv.name(st.childName()))
			st.ArrivedChildren, st.LateChildren = 0, 0
		}
		if st.ArrivedFollowups > 0 {
			inv.addTaint(contract.ReasonMalformedLink + ":" + inv.name(st.linkedBy()))
			st.ArrivedFollowups = 0
			st.Job &^= jobInterrupted
		}
	}
	st.arrive(f.parent)
	st.Name = inv.nameIndex(name)
	st.Trace = traceIdx
	// A remote flag of the wrong type is taken as remote: waiting for
	// settle is the conservative reading.
	if f.has(factRemote) {
		st.Remote = true
		inv.HasRemote = true
	}
	late := f.has(factLateChild)
	if st.LateChildren > 0 && !st.Remote {
		inv.addAnomaly(contract.AnomalyExtraChildren + ":" + name)
	}

	if f.role == roleRoot {
		if inv.RootArrived {
			inv.addAnomaly(anomalyExtraRoot + ":" + name)
		} else {
			inv.setRoot(f, resources.of(res), now)
		}
	}
	if f.has(factUnattributed) {
		inv.addTaint(contract.ReasonUnattributedWakeup + ":" + f.unattributed)
	}
	if f.malformed != 0 {
		// CONTRACT.md v0.6 rule 1: malformed, never absent.
		for _, r := range ledgerrule.MalformedReasons(nil, f.malformed, name) {
			inv.addTaint(r)
		}
	}
	if f.has(factLinkMalformed) {
		inv.addTaint(ledgerrule.LinkMalformedReason(name))
	}
	if f.unrecorded.Declared() {
		if n, ok := count(f.unrecorded); !ok {
			inv.addInvalid(reasonInvalidCount + ":" + name)
		} else if n > 0 {
			// v0.6 rule 3: a span of the invocation was never exported.
			inv.addTaint(contract.ReasonNotSampled + ":" + name)
		}
	}
	if f.has(factAbandoned) {
		// The followup it closes is discharged, but whether the
		// notification still starts a continuation is unknown (v0.5).
		inv.addTaint(contract.ReasonAbandonedFollowup + ":" + name)
	}
	if f.has(factUsageMismatch) {
		// v0.8: the runtime's own usage report of the turn differs from
		// the wire's count; the count stays the usage.
		inv.addAnomaly(contract.AnomalyUsageMismatch + ":" + name)
	}

	expected := 0 // children declared and not arrived: room to reserve
	if f.children.Declared() {
		if n, ok := count(f.children); ok {
			st.DeclaredChildren = n
			if n > st.ArrivedChildren {
				inv.Open += int(n - st.ArrivedChildren)
				expected = int(n - st.ArrivedChildren)
			} else if st.ArrivedChildren > n && !st.Remote {
				inv.addAnomaly(contract.AnomalyExtraChildren + ":" + name)
			}
		} else {
			inv.addInvalid(reasonInvalidCount + ":" + name)
		}
	}

	switch f.role {
	case roleBackground:
		inv.BackgroundJobs++
		inv.noteJob(id, f.start, f.end)
		if n, valid := count(f.followups); valid {
			st.DeclaredFollowups = n
			if n > st.ArrivedFollowups {
				inv.Open += int(n - st.ArrivedFollowups)
			}
		} else {
			inv.addInvalid(reasonInvalidCount + ":" + name)
		}
		if late && f.parent.IsEmpty() {
			// Rule 6: a job started when nothing of its invocation was open.
			inv.addAnomaly(contract.AnomalyOrphanJob + ":" + name)
		}
		st.Job |= jobBackground
		inv.noteInterrupted(st)
	case roleContinuation:
		inv.Continuations++
		inv.ContinuationRoots = append(inv.ContinuationRoots, spanRef{TraceID: f.traceID, SpanID: id})
	}
	// st is not used below: reserving, attaching and linking may grow
	// Spans.
	nameIdx := st.Name
	if len(inv.Detached) > 0 {
		inv.arriveDetached(f)
	}
	if f.detached.Declared() {
		inv.declareDetached(f, nameIdx, cfg)
	}
	inv.reserveSpans(expected)
	if !f.parent.IsEmpty() {
		inv.attachToParent(self, fresh, id, f.parent, traceIdx, nameIdx, late, now, cfg)
	}
	inv.applyLinks(f, nameIdx, now, cfg)

	if f.has(factModelCall) {
		inv.addModelCall(f, cfg)
	}
	if inv.Phase == phaseClosed {
		inv.compactTouched(id, f.parent, f.links)
	}
	return addIndexed
}

func (inv *invocation) setRoot(f *spanFacts, resource map[string]any, now int64) {
	inv.RootArrived = true
	inv.RootArrival = now
	inv.discharge(now)
	inv.RootTraceID = f.traceID
	inv.RootSpanID = f.spanID
	inv.RootStart = f.start
	inv.RootEnd = f.end
	inv.Resource = resource
	if f.has(factConversationID) {
		inv.ConversationID = f.conversationID
	}
	if f.has(factAgentName) {
		inv.AgentName = f.agentName
	}
	for _, e := range inv.Early {
		if e.Start > inv.RootEnd {
			inv.AfterInput += e.Input
			inv.AfterOutput += e.Output
		}
	}
	inv.Early = nil
}

// readUsage returns usage attribute i's value if it is a non-negative
// int64 that keeps *sum from overflowing; otherwise the count is not
// summed and the invocation can never be final (invalid_usage, v0.2 rule
// 5).
func (inv *invocation) readUsage(f *spanFacts, i int, sum *int64) int64 {
	if f.usagePresent&(1<<i) == 0 {
		return 0
	}
	n := f.usage[i]
	if f.usageInt&(1<<i) == 0 || n < 0 || n > math.MaxInt64-*sum {
		inv.addTaint(contract.ReasonInvalidUsage + ":" + usageKeys[i] + " on " + f.name)
		return 0
	}
	*sum += n
	return n
}

func (inv *invocation) addModelCall(f *spanFacts, cfg *ledgerConfig) {
	inv.ModelCalls++
	const inOrOut = 1<<usageInput | 1<<usageOutput
	if f.usagePresent&inOrOut == 0 && !f.has(factStatusError) {
		// Rule 5: a call that did not fail was billed; zero is not its usage.
		inv.addTaint(contract.ReasonUsageMissing + ":" + f.name)
	}
	in := inv.readUsage(f, usageInput, &inv.Usage.Input)
	out := inv.readUsage(f, usageOutput, &inv.Usage.Output)
	cr := inv.readUsage(f, usageCacheRead, &inv.Usage.CacheRead)
	cc := inv.readUsage(f, usageCacheCreation, &inv.Usage.CacheCreation)
	_ = inv.readUsage(f, usageReasoning, &inv.Usage.Reasoning)

	// After-result parts never exceed the totals, so they cannot overflow
	// where the totals did not.
	if inv.RootArrived {
		if f.start > inv.RootEnd {
			inv.AfterInput += in
			inv.AfterOutput += out
		}
	} else if in != 0 || out != 0 {
		if inv.Early == nil {
			inv.Early = make([]earlyCall, 0, 4)
		}
		inv.Early = append(inv.Early, earlyCall{Start: f.start, Input: in, Output: out})
	}

	if !cfg.pricesActive {
		return
	}
	p, ok := cfg.prices[f.model]
	if !ok {
		inv.addAnomaly(anomalyUnpricedModel + ":" + f.model)
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
