package instrument

import (
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/ledger"
)

// This file exports unrecorded-span declarations (CONTRACT.md, "What the
// SDK dropped or cut is a fact"): when the sampler drops a span of an
// invocation and no open span of the invocation in this pipeline can
// count it (no turn open: the root and continuations ended, or the span's
// parent is another process's), the SpanProcessor hands its next
// processor, past the sampler, a zero-length root span of its own trace
// named as the dropped span, with invocation.role = unrecorded and
// invocation.unrecorded = 1. The collector reads it as
// not_sampled:<span name> and is never final without the dropped usage;
// when it had already said final, the declaration is a late member and
// its revision is incomplete. The Ledger reads the same span, as
// exported.

// declareDrop exports a declaration for a dropped span named name of
// invocation id and reads it into the Ledger. res is the resource of the
// provider that dropped the span, at the time of the drop. An invocation
// whose root a Tracker of this process saw unsampled, and of which this
// pipeline's Ledger holds nothing, is recorded nowhere: nothing is
// declared for it (another pipeline may run the same id with a sampled
// root: its Ledger holds it).
func (p *SpanProcessor) declareDrop(id, name string, res *resource.Resource, at time.Time) {
	if id == "" || (ledger.RootNotSampled(id) && !p.ledger.l.Holds(id)) {
		return
	}
	s := declarationSpan(id, name, res, at)
	var f ledger.Facts
	counts := ledger.CountsOf(s, 0, 0, 0)
	p.ledger.l.Read(&f, s, counts)
	if p.next != nil {
		if p.reporter != nil {
			p.reporter.handed(s.SpanContext(), id)
		}
		p.next.OnEnd(counts.Span(s))
	}
	p.ledger.l.Apply(s, &f, nil)
}

// declarationSpan builds the declaration of a dropped span. It is built
// as the SDK's test snapshot, which implements every method of
// sdktrace.ReadOnlySpan (the interface is closed to other
// implementations), with the ids whole: no span limit applies to it.
func declarationSpan(id, name string, res *resource.Resource, at time.Time) sdktrace.ReadOnlySpan {
	if res == nil {
		res = resource.Empty()
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    newTraceID(),
		SpanID:     newSpanID(),
		TraceFlags: trace.FlagsSampled,
	})
	return tracetest.SpanStub{
		Name:        name,
		SpanContext: sc,
		SpanKind:    trace.SpanKindInternal,
		StartTime:   at,
		EndTime:     at,
		Attributes: []attribute.KeyValue{
			attribute.String(contract.AttrInvocationID, id),
			attribute.String(contract.AttrRole, contract.RoleUnrecorded),
			attribute.Int(contract.AttrChildren, 0),
			attribute.Int(contract.AttrUnrecorded, 1),
		},
		InstrumentationScope: instrumentation.Scope{Name: ScopeName, Version: Version()},
		Resource:             res,
	}.Snapshot()
}

// newTraceID returns a random, valid trace ID.
func newTraceID() trace.TraceID {
	for {
		var t trace.TraceID
		hi, lo := rand.Uint64(), rand.Uint64()
		for i := range 8 {
			t[i], t[8+i] = byte(hi>>(8*i)), byte(lo>>(8*i))
		}
		if t.IsValid() {
			return t
		}
	}
}

// newSpanID returns a random, valid span ID.
func newSpanID() trace.SpanID {
	for {
		var s trace.SpanID
		v := rand.Uint64()
		for i := range 8 {
			s[i] = byte(v >> (8 * i))
		}
		if s.IsValid() {
			return s
		}
	}
}
