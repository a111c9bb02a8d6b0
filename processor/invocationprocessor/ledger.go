package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/agentledger/agentledger/internal/ledgerrule"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
)

// reasonSpanLimit is the incomplete reason used when max_spans_per_invocation
// was hit; the same kind appears in the anomalies, as the contract lists it.
const reasonSpanLimit = ledgerrule.ReasonSpanLimit

// anomalyUnpricedModel marks a model call whose model has no entry in the
// configured price table (only when prices are configured).
const anomalyUnpricedModel = "unpriced_model"

// phase is where an invocation is in its life.
type phase uint8

const (
	phaseOpen   phase = iota // accepting spans, obligations may be open
	phaseClosed              // a final or incomplete summary was emitted; kept for retention
)

// invocation is the state of one invocation: its Graph, which the
// finality rule (internal/ledgerrule) keeps, and what the processor adds
// for summaries, status views, timers and storage. index holds the
// shard's bookkeeping, rebuilt on demand, not stored: a restart replays
// the journal (storage_load.go).
type invocation struct {
	ledgerrule.Graph

	// ID is the ledger key: the invocation.id, joined to its tenant when
	// the processor has tenants (ledgerKey, tenant.go). Summaries and
	// status views carry the two apart.
	ID string

	// Times of the processor's clock, in Unix nanoseconds.
	FirstArrival int64
	LastSummary  int64
	// RootArrival is when the root span arrived (0 before): the pending
	// summary is due pending_delay after it (pendingDue). An open
	// invocation's is not stored on its own: a restart replays the root at
	// its journalled time (storage_load.go); a closed invocation's record
	// keeps it (encodeClosed).
	RootArrival int64

	Phase       phase
	PendingSent bool
	// keptOwing is set when retention ended while the closed invocation
	// owed work: it is kept until owingRetentionEnd.
	keptOwing bool

	RootTraceID       pcommon.TraceID
	RootSpanID        pcommon.SpanID
	ConversationID    string
	AgentName         string
	Resource          map[string]any
	ContinuationRoots []summary.SpanRef

	Cost float64

	// JobTimes holds each background span's start and end, for the status
	// extension (status.go).
	JobTimes []jobTimes

	Revision int64
	Forced   string
	// rare holds what few invocations need: nil for most (invRare).
	rare *invRare

	index invIndex
}

// invRare is the part of an invocation few need, so that the others
// carry one pointer instead of its fields.
type invRare struct {
	// timeline records the invocation's spans for the status extension's
	// timeline page (timeline.go): only when the processor publishes to
	// one.
	timeline timeline
	// writtenOff is what an open_timeout close wrote off of what the
	// invocation owed (owes.go).
	writtenOff []owedKey
}

// rareOf returns inv.rare, allocating it on first use.
func (inv *invocation) rareOf() *invRare {
	if inv.rare == nil {
		inv.rare = &invRare{}
	}
	return inv.rare
}

// writtenOff is what an open_timeout close wrote off of what the
// invocation owed (owes.go); nil for almost all.
func (inv *invocation) writtenOff() []owedKey {
	if inv.rare == nil {
		return nil
	}
	return inv.rare.writtenOff
}

// invIndex is the shard's bookkeeping for one invocation.
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
}

// invocationBlock is an invocation allocated together with room for its
// first names and traces: most invocations need no more, and one
// allocation serves them all. Five names and two traces cover an agent's
// turn with a background job and its continuation (the root, a model
// call, a tool, the job, the continuation in its own trace). The block
// must stay at most 696 bytes, so that with the 8-byte header Go's
// allocator puts before an object of pointers larger than 512 bytes it
// takes the 704-byte size class, not 768 (TestInvocationBlockSize,
// BenchmarkOpenInvocations); continuation roots, which only invocations
// with a continuation have, are allocated apart for that.
type invocationBlock struct {
	inv    invocation
	names  [5]string
	traces [2]ledgerrule.TraceID
}

// maxInvocationBlock is the largest invocationBlock that takes the
// 704-byte size class with its allocation header.
const maxInvocationBlock = 704 - 8

func newInvocation(id string, now int64) *invocation {
	b := &invocationBlock{inv: invocation{
		ID:           id,
		FirstArrival: now,
		index:        invIndex{heapIdx: -1},
	}}
	b.inv.Init(now)
	b.inv.Names = b.names[:0]
	b.inv.Traces = b.traces[:0]
	return &b.inv
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
	// rule configures the reader of spans, graph the finality rule
	// (internal/ledgerrule).
	rule         *ledgerrule.Config
	graph        ledgerrule.GraphConfig
	prices       map[string]Price
	pricesActive bool
	// timelineSpans is status_spans when the processor publishes to a
	// status extension, else 0: no spans are recorded.
	timelineSpans int
}

// addResult tells the caller what indexing one span did, for telemetry.
type addResult uint8

const (
	addIndexed addResult = iota
	// addIndexedUnrecorded: indexed, but past status_spans, so not
	// recorded for the status page.
	addIndexedUnrecorded
	addDuplicate
	addSpanLimit
)

// add indexes one span of the invocation through its Graph, which
// applies CONTRACT.md's rule, and keeps what the processor adds: the
// resource and root identity for summaries, job times for the status
// extension, continuation roots and cost.
//
// resources shares the resource attributes kept for summaries with the
// shard's other invocations, names the span and agent names.
func (inv *invocation) add(f *spanFacts, res pcommon.Resource, resources *resourceCache, names *nameCache, now int64, cfg *ledgerConfig) addResult {
	firstTrace := len(inv.Traces) == 0
	known := len(inv.Names)
	r := inv.Arrive(&f.Span, now, &cfg.graph)
	switch r.Outcome {
	case ledgerrule.Duplicate, ledgerrule.Reused:
		return addDuplicate
	case ledgerrule.SpanLimit:
		return addSpanLimit
	}
	// A name new to the invocation is the receiver's copy: the shard's is
	// kept instead, so that open invocations share their names as closed
	// ones do (shareNames).
	for i := known; i < len(inv.Names); i++ {
		inv.Names[i] = names.share(inv.Names[i])
	}
	if firstTrace && f.Role != ledgerrule.RoleRoot {
		inv.Resource = resources.of(res) // the root's replaces it
	}
	if r.Root {
		inv.setRoot(f, resources.of(res), names, now)
	}
	recorded := inv.noteSpan(f, &r, cfg.timelineSpans)
	switch f.Role {
	case ledgerrule.RoleBackground:
		inv.noteJob(pcommon.SpanID(f.ID), f.Start, f.End)
	case ledgerrule.RoleContinuation:
		inv.ContinuationRoots = append(inv.ContinuationRoots, summary.SpanRef{TraceID: pcommon.TraceID(f.Trace), SpanID: pcommon.SpanID(f.ID)})
	case ledgerrule.RoleWake:
		// A wake may be all there is of a turn nobody owns yet: it names
		// the session, so the session owes the turn from its arrival.
		if !inv.RootArrived && inv.ConversationID == "" && f.hasConv {
			inv.ConversationID = f.conversationID
		}
		if !inv.RootArrived && inv.AgentName == "" && f.hasAgent {
			inv.AgentName = names.share(f.agentName)
		}
	}
	if f.ModelCall && cfg.pricesActive {
		p, ok := cfg.prices[f.model]
		if !ok {
			inv.AddAnomaly(anomalyUnpricedModel + ":" + f.model)
		} else {
			inv.Cost += callCost(p, r.Call.Input, r.Call.Output, r.Call.CacheRead, r.Call.CacheCreation)
		}
	}
	if !recorded {
		return addIndexedUnrecorded
	}
	return addIndexed
}

func (inv *invocation) setRoot(f *spanFacts, resource map[string]any, names *nameCache, now int64) {
	inv.RootArrival = now
	inv.RootTraceID = pcommon.TraceID(f.Trace)
	inv.RootSpanID = pcommon.SpanID(f.ID)
	inv.Resource = resource
	if f.hasConv {
		inv.ConversationID = f.conversationID
	}
	if f.hasAgent {
		inv.AgentName = names.share(f.agentName)
	}
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
