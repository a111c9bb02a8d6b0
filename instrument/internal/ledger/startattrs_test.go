package ledger

import (
	"math/rand/v2"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/ledgerrule"
)

// readStartAttrsFull is ReadStartAttrs reading every rule key through the
// rule's reader, as it did before it skipped the keys a start does not
// need: the reference for TestReadStartAttrsAgreesWithFullReading.
func readStartAttrsFull(attrs []attribute.KeyValue) StartAttrs {
	var a StartAttrs
	var r ledgerrule.SpanReader
	sessionSeen, agentSeen := false, false
	for _, kv := range attrs {
		if k, ok := ledgerrule.Lookup(string(kv.Key)); ok {
			r.Attr(k, ruleValue(kv.Value))
			a.Marked = a.Marked || k == ledgerrule.KeyInvocationID || k == ledgerrule.KeyRole
			if k == ledgerrule.KeyOperation && a.Operation == "" && kv.Value.Type() == attribute.STRING {
				a.Operation = kv.Value.AsString()
			}
			continue
		}
		switch kv.Key {
		case contract.AttrConversationID:
			if !sessionSeen {
				sessionSeen, a.Session = true, kv.Value.AsString()
			}
		case contract.AttrAgentName:
			if !agentSeen {
				agentSeen, a.Agent = true, kv.Value.AsString()
			}
		}
	}
	a.read(&r)
	return a
}

// TestReadStartAttrsAgreesWithFullReading: random start attributes, from
// a small alphabet of the rule's keys and others with values of every
// type (repeats, wrong types and empty strings included), read the same
// as through the full reader.
func TestReadStartAttrsAgreesWithFullReading(t *testing.T) {
	keys := []string{
		contract.AttrInvocationID, contract.AttrRole, contract.AttrUnattributed, contract.AttrLateChild,
		contract.AttrOperationName, contract.AttrChildren, contract.AttrFollowups, contract.AttrRemote,
		contract.AttrUsageInputTokens, contract.AttrConversationID, contract.AttrAgentName, contract.AttrToolName,
		contract.AttrFollowupReason, contract.AttrUnrecorded, "other",
	}
	values := []attribute.Value{
		attribute.StringValue(""), attribute.StringValue("inv-1"), attribute.StringValue("inv-2"),
		attribute.StringValue(contract.RoleRoot), attribute.StringValue(contract.RoleBackground),
		attribute.StringValue(contract.RoleContinuation), attribute.StringValue(contract.OpChat),
		attribute.Int64Value(0), attribute.Int64Value(3), attribute.BoolValue(true), attribute.BoolValue(false),
		attribute.Float64Value(1.5), attribute.StringSliceValue([]string{"a"}), {},
	}
	r := rand.New(rand.NewPCG(5, 6))
	for n := range 20000 {
		attrs := make([]attribute.KeyValue, r.IntN(7))
		for i := range attrs {
			attrs[i] = attribute.KeyValue{Key: attribute.Key(keys[r.IntN(len(keys))]), Value: values[r.IntN(len(values))]}
		}
		if got, want := ReadStartAttrs(attrs), readStartAttrsFull(attrs); got != want {
			t.Fatalf("case %d %v: read %+v, full reading %+v", n, attrs, got, want)
		}
	}
}
