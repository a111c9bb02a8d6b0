package wireproxy

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
)

// What the adapters' attribution shares: which call's owner asked for a
// tool, whether two owners are one invocation, and how an invocation a
// request may have been is kept from final.

// DefaultMaxTools bounds the tool use ids a ToolOwners remembers.
const DefaultMaxTools = 4096

// ToolOwners remembers, for each tool use a response asked for (told by
// Decision.OnTool), the context of that call's owner: the request that
// returns the tool's result is that owner's. The oldest ids are
// forgotten first, beyond its bound. It is not safe for concurrent use;
// the adapter guards it with its own lock.
type ToolOwners struct {
	max   int
	owner map[string]context.Context
	order []string
}

// NewToolOwners returns a ToolOwners of at most max ids (DefaultMaxTools
// when max <= 0).
func NewToolOwners(max int) *ToolOwners {
	if max <= 0 {
		max = DefaultMaxTools
	}
	return &ToolOwners{max: max, owner: make(map[string]context.Context)}
}

// Remember records ctx as the owner of tool use id.
func (o *ToolOwners) Remember(id string, ctx context.Context) {
	if _, ok := o.owner[id]; !ok {
		o.order = append(o.order, id)
		if len(o.order) > o.max {
			delete(o.owner, o.order[0])
			o.order = o.order[1:]
		}
	}
	o.owner[id] = ctx
}

// Owner returns the owner of tool use id, if remembered.
func (o *ToolOwners) Owner(id string) (context.Context, bool) {
	ctx, ok := o.owner[id]
	return ctx, ok
}

// SameInvocation reports whether a and b are contexts of one invocation:
// the same span, or the same invocation id in their baggage.
func SameInvocation(a, b context.Context) bool {
	ia, ib := instrument.InvocationIDFromContext(a), instrument.InvocationIDFromContext(b)
	return trace.SpanContextFromContext(a).Equal(trace.SpanContextFromContext(b)) || (ia != "" && ia == ib)
}

// SpanNameAmbiguous names the span KeepFromFinal records.
const SpanNameAmbiguous = contract.OpChat + " ambiguous"

// KeepFromFinal records, in ctx's invocation, a model call of unknown
// usage: a request that may have been its, whose owner the evidence did
// not settle. The span carries no usage and no error status, so the
// invocation closes incomplete (usage_missing:chat ambiguous), never final
// without that request. attrs describe why (the adapter's own key).
func KeepFromFinal(tracer trace.Tracer, ctx context.Context, attrs ...attribute.KeyValue) {
	_, span := tracer.Start(ctx, SpanNameAmbiguous,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(append([]attribute.KeyValue{attribute.String(contract.AttrOperationName, contract.OpChat)}, attrs...)...))
	instrument.NoteUnrecorded(ctx, span, SpanNameAmbiguous)
	span.End()
}
