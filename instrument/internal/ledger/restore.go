package ledger

import (
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/ledgerrule"
)

// AddedMax bounds the attributes ExportCounts add to a span: three counts
// and, on a span whose ids the SDK cut, the invocation id, the role, the
// session id and invocation.sdk_limit.
const AddedMax = 7

// Restored holds the full ids of a span whose invocation.id or
// gen_ai.conversation.id the SDK's AttributeValueLengthLimit cut. The
// SpanProcessor knows them from one source no limit cuts (the baggage, its
// record of the parent, the Tracker's own session), so that the ledger and
// the exporter key the span by its invocation and session, not by a cut
// name; the span is exported with them and with invocation.sdk_limit
// naming the limit, which makes the invocation never final in both
// halves (ReasonSDKLimit). The SDK's limits apply when attributes are
// set, not to what a processor hands on: the restored values reach the
// exporter whole.
type Restored struct {
	// ID is the full invocation id; Role and Session the Tracker's role
	// and session of the span ("" when they were not cut).
	ID, Role, Session string
	// Double: the span is a model call inside another model call of the
	// same process (exported with invocation.double_instrumented).
	Double bool
}

// cut reports whether an id was cut (rather than only Double set).
func (r *Restored) cut() bool { return r.ID != "" || r.Role != "" || r.Session != "" }

// Restore returns c with the span's ids restored (r not nil).
func (c ExportCounts) Restore(r *Restored) ExportCounts {
	c.restore = r
	c.wrap = true
	return c
}

// keeps reports whether the span's own attribute kv is exported: not the
// cut ids, nor an invocation.sdk_limit the span set itself.
func (r *Restored) keeps(kv attribute.KeyValue) bool {
	switch kv.Key {
	case contract.AttrInvocationID:
		return r.ID == ""
	case contract.AttrSDKLimit:
		return !r.cut()
	case contract.AttrDoubleInstrumented:
		return !r.Double
	case contract.AttrConversationID:
		return r.Session == ""
	case contract.AttrRole:
		return r.Role == ""
	}
	return true
}

// added appends the restored ids and the limit's name.
func (r *Restored) added(out []attribute.KeyValue) []attribute.KeyValue {
	if r.Double {
		out = append(out, attribute.Bool(contract.AttrDoubleInstrumented, true))
	}
	if !r.cut() {
		return out
	}
	if r.ID != "" {
		out = append(out, attribute.String(contract.AttrInvocationID, r.ID))
	}
	if r.Role != "" {
		out = append(out, attribute.String(contract.AttrRole, r.Role))
	}
	if r.Session != "" {
		out = append(out, attribute.String(contract.AttrConversationID, r.Session))
	}
	return append(out, attribute.String(contract.AttrSDKLimit, ledgerrule.LimitValueLength))
}

// restoredSpan is an ended span exported with its counts and its cut ids
// restored.
type restoredSpan struct {
	sdktrace.ReadOnlySpan
	counts ExportCounts
}

// Attributes returns the span's attributes as exported.
func (s *restoredSpan) Attributes() []attribute.KeyValue {
	return collectAttrs(s.ReadOnlySpan.Attributes(), s.counts)
}
