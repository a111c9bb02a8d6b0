package instrument

import (
	"context"

	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/instrument/internal/ledger"
)

// This file declares the dropped spans of an invocation that no parent
// declares: a span started from a context that carries only the
// invocation id (ContextWithInvocation(context.Background(), id)), with
// trace.WithNewRoot from an ended span's context, or under an ended
// parent. Such a span is counted in invocation.unrecorded on an open,
// sampled turn span (root or continuation) of its invocation in the same
// pipeline, so that the collector reads it too (CONTRACT.md, SDK
// settings).
//
// Each pipeline hears only of its own spans: a span is declared in the
// SpanProcessor whose provider started it (a SpanProcessor learns its
// providers from the spans it sees start).
//
// With no turn open, the span is declared by a span of its own, exported
// past the sampler (declaration.go), which both halves read.

// declareOrphanDropLocked counts a span st of invocation st.id that is
// not sampled and that no parent or context span declared, on an open
// turn of the invocation. It reports false when none is open. p.mu must
// be held.
func (p *SpanProcessor) declareOrphanDropLocked(id string) bool {
	rec := p.turnsByID[id]
	if rec == nil || !rec.span.SpanContext().IsSampled() {
		return false
	}
	rec.noteUnrecorded()
	return true
}

// indexTurnLocked indexes rec, a turn span, by its invocation. p.mu must
// be held.
func (p *SpanProcessor) indexTurnLocked(rec *spanRecord) {
	if p.turnsByID == nil {
		p.turnsByID = make(map[string]*spanRecord)
	}
	p.turnsByID[rec.invocation] = rec
}

// unindexTurnLocked removes rec, an ending turn span, from the index,
// when it is the one indexed. p.mu must be held.
func (p *SpanProcessor) unindexTurnLocked(rec *spanRecord) {
	if p.turnsByID[rec.invocation] == rec {
		delete(p.turnsByID, rec.invocation)
	}
}

// tellLedgerDrop tells the Ledger of a dropped span of invocation id
// named name that no span of this pipeline declares: its usage is never
// exported, so the invocation is never final (not_sampled:<name>). An
// invocation the Ledger does not hold (its root was not sampled, or it
// ran in another pipeline) is left alone.
func (p *SpanProcessor) tellLedgerDrop(id, name string) {
	if p.ledger.l.Holds(id) {
		p.ledger.l.UnrecordedSpan(id, name)
	}
}

// noteProviderLocked records that provider tp, whose resource is res,
// starts spans through this SpanProcessor. p.mu must be held.
func (p *SpanProcessor) noteProviderLocked(tp trace.TracerProvider, res *resource.Resource) {
	if tp == nil || tp == p.lastProvider {
		return
	}
	p.lastProvider = tp
	for _, known := range p.providers {
		if known == tp {
			return
		}
	}
	if len(p.providers) < maxProviders {
		p.providers = append(p.providers, tp)
		p.resources = append(p.resources, res)
	}
}

// serves reports whether tp's spans pass through this SpanProcessor, and
// the resource of tp's spans.
func (p *SpanProcessor) serves(tp trace.TracerProvider) (*resource.Resource, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, known := range p.providers {
		if known == tp {
			return p.resources[i], true
		}
	}
	return nil, false
}

// endedInvocation returns the invocation id an ended SDK span of ctx
// carries, or "".
func endedInvocation(ctx context.Context) string {
	ro, ok := trace.SpanFromContext(ctx).(sdktrace.ReadOnlySpan)
	if !ok || ro.EndTime().IsZero() {
		return ""
	}
	return ledger.ReadStartAttrs(ro.Attributes()).ID
}
