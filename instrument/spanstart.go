package instrument

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/ledger"
	"github.com/agentledger/agentledger/instrument/internal/parked"
)

// spanStart is what SpanProcessor.OnStart learns of a starting span, step
// by step.
type spanStart struct {
	// sc is the span's context, psc its parent's.
	sc, psc trace.SpanContext
	attrs   ledger.StartAttrs
	// id is the span's invocation; ledgered says the ledger sees the span
	// (it has an id and is sampled).
	id       string
	ledgered bool
	// local: the parent is a span of this process.
	local bool
	// counted: the parent's record counts the span in invocation.children;
	// late: the parent (or context span) of the same invocation had
	// ended; dropped: the span is not sampled and its parent (or context
	// span) counts it in invocation.unrecorded.
	counted, late, dropped bool
	// detachedFrom is the span whose context started the span as the root
	// of a new trace, when it declares it (rule 4).
	detachedFrom trace.SpanContext
	// inv is the ledger's state of the invocation, when known.
	inv *ledger.Invocation
	// cut holds the ids the SDK's value length limit cut, and the
	// double-instrumentation mark, or nil (spanids.go).
	cut *ledger.Restored
	// modelCall: the span is a model call by its start attributes;
	// inCall: its local parent is a model call or inside one.
	modelCall, inCall bool
}

// fromParentLocked reads the span's invocation from its local parent and
// counts it there: in invocation.children when sampled, in
// invocation.unrecorded when not. A parent this processor does not track
// ended already (the span is a late child) or belongs to a provider
// without this processor. p.mu must be held.
func (p *SpanProcessor) fromParentLocked(parent context.Context, st *spanStart) {
	sampled := st.sc.IsSampled()
	if prec := p.lookupOpen(st.psc.TraceID(), st.psc.SpanID()); prec != nil {
		st.inCall = prec.has(recordInCall)
		if st.modelCall && st.inCall {
			// Two instrumentations of one call (an SDK's own gen_ai span
			// and a wrapper's, or two wrappers): its usage would count
			// twice. The span is exported marked (never final).
			st.restored().Double = true
		}
		if st.id != "" && st.cut == nil && isCut(st.id, prec.invocation) {
			// The span's own invocation.id was cut; its parent's record
			// holds it whole.
			st.id = prec.invocation
			st.cut = &ledger.Restored{ID: st.id}
		}
		if st.id == "" {
			st.id = prec.baggageID(parent)
			st.ledgered = st.id != "" && sampled
		}
		if st.id == "" {
			st.id = prec.invocation
			st.ledgered = sampled
		}
		if sampled && st.id == prec.invocation {
			prec.children++
			st.counted = true
			st.inv = prec.inv
		} else if st.id != "" && st.id == prec.invocation && prec.span.SpanContext().IsSampled() {
			// Recorded, never exported (rule 3): the parent declares it.
			prec.noteUnrecorded()
			st.dropped = true
		}
		return
	}
	if st.id == "" {
		st.id = baggageInvocationID(parent)
		st.ledgered = st.id != "" && sampled
	}
	if ps, ok := trace.SpanFromContext(parent).(sdktrace.ReadOnlySpan); ok &&
		ps.SpanContext().SpanID() == st.psc.SpanID() && !ps.EndTime().IsZero() {
		pid := ledger.ReadStartAttrs(ps.Attributes()).ID
		if st.id == "" {
			st.id = pid
			st.ledgered = st.id != "" && sampled
		}
		st.late = pid != "" && pid == st.id
	}
}

// trackLocked makes the span's record, and registers a Tracker's turn
// span (a root or continuation) in p.turns; it returns nil beyond
// WithMaxOpenSpans. p.mu must be held.
func (p *SpanProcessor) trackLocked(s sdktrace.ReadWriteSpan, st *spanStart, ours bool) *spanRecord {
	if p.openCount >= p.max {
		return nil
	}
	rec := p.newRecord()
	rec.invocation, rec.span, rec.inv, rec.trace = st.id, s, st.inv, st.sc.TraceID()
	rec.set(recordDropped, st.dropped)
	rec.set(recordInCall, st.inCall || st.modelCall)
	p.markLocked(rec, st.cut)
	if st.local {
		rec.parent = st.psc.SpanID()
	}
	if ours && st.id != "" && (st.attrs.Role == contract.RoleRoot || st.attrs.Role == contract.RoleContinuation) {
		rec.turn = true
		p.turns[turnKey{st.sc.TraceID(), st.id}] = rec
		p.indexTurnLocked(rec)
	}
	p.addOpen(st.sc.SpanID(), rec)
	return rec
}

// noteOwner tells a Tracker that its pipeline has this processor (it says
// so loudly when none answers), and learns of the model call a client
// wrapper may hold open for a retry.
func (p *SpanProcessor) noteOwner(parent context.Context, ours, client bool) {
	if ours {
		if probe, ok := parent.Value(probeKey{}).(*startProbe); ok {
			probe.processor = p
		}
	} else if client {
		if h := parked.HolderFromContext(parent); h != nil {
			p.holders.Add(h)
		}
	}
}

// stamp sets the span's start attributes: invocation.id and a provisional
// invocation.children of 0 on a tracked span (rec not nil), invocation.id
// and invocation.remote on an untracked one, invocation.late_child, and
// the detached_from link.
func (p *SpanProcessor) stamp(parent context.Context, s sdktrace.ReadWriteSpan, rec *spanRecord, st *spanStart) {
	if rec != nil {
		// invocation.children is stamped 0 now, in the same call as
		// invocation.id: OnEnd passes a span whose count stayed 0 on as
		// it is, and wraps the others with their count.
		stamp := rec.stamp[:0]
		if st.id != "" && st.id != st.attrs.ID {
			stamp = append(stamp, attribute.String(contract.AttrInvocationID, st.id))
		}
		stamp = append(stamp, attribute.Int(contract.AttrChildren, 0))
		s.SetAttributes(stamp...)
	} else {
		// Without invocation.children nobody declares this span's
		// children, so it is marked remote: the processor and the ledger
		// then wait remote_settle for its subtree instead of calling the
		// invocation final while a child may still come.
		p.untracked.Add(parent, 1)
		if st.id != "" {
			s.SetAttributes(attribute.String(contract.AttrInvocationID, st.id), attribute.Bool(contract.AttrRemote, true))
		}
	}
	if st.late {
		s.SetAttributes(attribute.Bool(AttrLateChild, true))
		p.lateChildren.Add(parent, 1)
	}
	if st.detachedFrom.IsValid() {
		s.AddLink(trace.Link{SpanContext: st.detachedFrom,
			Attributes: []attribute.KeyValue{attribute.String(contract.AttrLink, contract.LinkDetachedFrom)}})
	}
}
