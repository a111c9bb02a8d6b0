package ledgerrule

import "github.com/agentledger/agentledger/contract"

// Dropped is what an OpenTelemetry SDK's span limits took from a span on
// its way out: attributes beyond AttributeCountLimit, links beyond
// LinkCountLimit, and attributes of its links beyond
// AttributePerLinkCountLimit (OTLP's dropped_attributes_count and
// dropped_links_count on the span and on each link). The rule cannot tell
// which were lost: any of them may have been a rule or usage attribute
// (gen_ai.operation.name, a usage count, invocation.children) or a
// followup link, so a span that lost any is never final (sdk_limit).
type Dropped struct {
	Attributes, Links, LinkAttributes uint32
}

// Any reports whether the SDK dropped anything from the span.
func (d Dropped) Any() bool { return d != Dropped{} }

// The details of ReasonSDKLimit: what the SDK's limits took or cut.
const (
	LimitAttributes     = "attributes"
	LimitLinks          = "links"
	LimitLinkAttributes = "link_attributes"
	// LimitValueLength: a string the rule reads (an invocation or session
	// id) was cut by AttributeValueLengthLimit; the instrumentation that
	// saw it restored the value and said so with invocation.sdk_limit.
	LimitValueLength = "attribute_value_length"
)

// SDKLimitReason is the reason of a span whose SDK dropped or cut what
// (one of the Limit constants): "sdk_limit:<what> on <span name>".
func SDKLimitReason(what, spanName string) string {
	return contract.ReasonSDKLimit + ":" + what + " on " + spanName
}

// sdkLimitTaints applies what the SDK's limits did to the span: the
// invocation can never be final.
func (g *Graph) sdkLimitTaints(s *Span) {
	if s.Dropped.Any() {
		if s.Dropped.Attributes > 0 {
			g.AddTaint(SDKLimitReason(LimitAttributes, s.Name))
		}
		if s.Dropped.Links > 0 {
			g.AddTaint(SDKLimitReason(LimitLinks, s.Name))
		}
		if s.Dropped.LinkAttributes > 0 {
			g.AddTaint(SDKLimitReason(LimitLinkAttributes, s.Name))
		}
	}
	if s.SDKLimit != "" {
		g.AddTaint(SDKLimitReason(s.SDKLimit, s.Name))
	}
	if s.DoubleInstrumented {
		g.AddTaint(contract.ReasonDoubleInstrumented + ":" + s.Name)
	}
}

// DroppedCount converts an SDK's dropped count (an int or an OTLP uint32)
// for Dropped, 0 for anything below 1.
func DroppedCount[T int | uint32](n T) uint32 {
	if n <= 0 {
		return 0
	}
	if uint64(n) > uint64(^uint32(0)) {
		return ^uint32(0)
	}
	return uint32(n)
}
