package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"

import (
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/ledgerrule"
	"github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
)

// Usage attributes, in the order of usageKeys.
const (
	usageInput         = ledgerrule.UsageInput
	usageOutput        = ledgerrule.UsageOutput
	usageCacheRead     = ledgerrule.UsageCacheRead
	usageCacheCreation = ledgerrule.UsageCacheCreation
	usageReasoning     = ledgerrule.UsageReasoning
	numUsage           = ledgerrule.NumUsage
)

// usageKeys are the summed usage attributes.
var usageKeys = [numUsage]string{
	contract.AttrUsageInputTokens,
	contract.AttrUsageOutputTokens,
	contract.AttrUsageCacheReadTokens,
	contract.AttrUsageCacheCreateTokens,
	contract.AttrUsageReasoningTokens,
}

// spanFacts is everything the ledger reads from one span, gathered in one
// pass over its attributes and links before the shard's lock is taken, so
// indexing under the lock scans no attribute map: the ledgerrule.Span its
// Graph reads, and what summaries and prices copy. The rule attributes
// are read by ledgerrule's reader, the only decoding of them; replay after
// a restart feeds the journalled attributes to the same reader
// (factReader), repeats included, so live and replayed facts are the same.
type spanFacts struct {
	ledgerrule.Span

	// model is gen_ai.response.model, else gen_ai.request.model (strings
	// only); read only for model calls when prices are configured.
	model                     string
	conversationID, agentName string // as Value.AsString
	hasConv, hasAgent         bool
}

// factReader turns one span into spanFacts: begin, then attr for each
// attribute and link/linkAttr for each link, then end. Both the live path
// (readFacts, over a ptrace.Span) and replay (decodeFacts, over the
// journal's stored form) drive it, so there is one reading.
type factReader struct {
	f                           *spanFacts
	rule                        ledgerrule.SpanReader
	link                        ledgerrule.LinkReader
	linkTrace                   ledgerrule.TraceID
	linkSpan                    ledgerrule.SpanID
	inLink                      bool
	requestModel, responseModel string
	seenConv, seenAgent         bool
	seenReq, seenResp           bool
}

// begin starts reading a span into f.
func (r *factReader) begin(f *spanFacts, name string, traceID pcommon.TraceID, spanID, parent pcommon.SpanID, start, end uint64, statusError bool) {
	*f = spanFacts{Span: ledgerrule.Span{Name: name, Trace: ledgerrule.TraceID(traceID), ID: ledgerrule.SpanID(spanID),
		Parent: ledgerrule.SpanID(parent), Start: start, End: end, Failed: statusError}}
	r.f = f
	r.rule.Reset()
	r.inLink = false
	r.requestModel, r.responseModel = "", ""
	r.seenConv, r.seenAgent, r.seenReq, r.seenResp = false, false, false, false
}

// attr reads one span attribute.
func (r *factReader) attr(k string, v pcommon.Value) {
	if key, ok := ledgerrule.Lookup(k); ok {
		r.rule.Attr(key, ruleValue(v))
		return
	}
	// Attributes copied into summaries, not read by the rule: the first
	// of repeated keys counts.
	switch k {
	case contract.AttrConversationID:
		if !r.seenConv {
			r.seenConv = true
			r.f.hasConv = true
			r.f.conversationID = v.AsString()
		}
	case contract.AttrAgentName:
		if !r.seenAgent {
			r.seenAgent = true
			r.f.hasAgent = true
			r.f.agentName = v.AsString()
		}
	case contract.AttrRequestModel:
		if !r.seenReq {
			r.seenReq = true
			if v.Type() == pcommon.ValueTypeStr {
				r.requestModel = v.Str()
			}
		}
	case contract.AttrResponseModel:
		if !r.seenResp {
			r.seenResp = true
			if v.Type() == pcommon.ValueTypeStr {
				r.responseModel = v.Str()
			}
		}
	}
}

// linkStart starts reading a link of the span.
func (r *factReader) linkStart(traceID pcommon.TraceID, spanID pcommon.SpanID) {
	r.linkEnd()
	r.inLink = true
	r.link = ledgerrule.LinkReader{}
	r.linkTrace, r.linkSpan = ledgerrule.TraceID(traceID), ledgerrule.SpanID(spanID)
}

// linkAttr reads one attribute of the current link.
func (r *factReader) linkAttr(k string, v pcommon.Value) {
	if k == contract.AttrLink {
		r.link.Attr(ruleValue(v))
	}
}

// linkEnd finishes the current link, if any.
func (r *factReader) linkEnd() {
	if !r.inLink {
		return
	}
	r.inLink = false
	kind, malformed := r.link.Kind()
	if malformed {
		r.f.LinkMalformed = true
	}
	switch kind {
	case ledgerrule.LinkFollowup, ledgerrule.LinkConsumed, ledgerrule.LinkDetachedFrom:
		f := r.f
		f.Links.Add(ledgerrule.Link{Trace: r.linkTrace, Span: r.linkSpan, Kind: kind})
	}
}

// end finishes the span's facts; cfg says which operations are model
// calls and bounds the counts.
func (r *factReader) end(cfg *ledgerConfig) {
	r.linkEnd()
	f := r.f
	r.rule.Read(cfg.rule, &f.Facts)
	f.model = r.responseModel
	if f.model == "" {
		f.model = r.requestModel
	}
}

// ruleValue converts a pdata value for the rule's reader. Only scalars
// carry content; a slice, map or bytes value is of the wrong type for
// every rule attribute whatever it holds.
func ruleValue(v pcommon.Value) ledgerrule.Value {
	switch v.Type() {
	case pcommon.ValueTypeStr:
		return ledgerrule.StringValue(v.Str())
	case pcommon.ValueTypeInt:
		return ledgerrule.IntValue(v.Int())
	case pcommon.ValueTypeBool:
		return ledgerrule.BoolValue(v.Bool())
	case pcommon.ValueTypeDouble:
		return ledgerrule.DoubleValue(v.Double())
	case pcommon.ValueTypeBytes:
		return ledgerrule.OtherValue(ledgerrule.KindBytes)
	case pcommon.ValueTypeSlice:
		return ledgerrule.OtherValue(ledgerrule.KindSlice)
	case pcommon.ValueTypeMap:
		return ledgerrule.OtherValue(ledgerrule.KindMap)
	}
	return ledgerrule.OtherValue(ledgerrule.KindEmpty)
}

// readFacts reads a live span's facts (every attribute in map order,
// repeats included, and every link).
func readFacts(f *spanFacts, sp ptrace.Span, cfg *ledgerConfig) {
	var r factReader
	r.begin(f, sp.Name(), sp.TraceID(), sp.SpanID(), sp.ParentSpanID(),
		uint64(sp.StartTimestamp()), uint64(sp.EndTimestamp()), sp.Status().Code() == ptrace.StatusCodeError)
	for k, v := range sp.Attributes().All() {
		r.attr(k, v)
	}
	f.Dropped = droppedOf(sp)
	links := sp.Links()
	for i := 0; i < links.Len(); i++ {
		l := links.At(i)
		r.linkStart(l.TraceID(), l.SpanID())
		for k, v := range l.Attributes().All() {
			r.linkAttr(k, v)
		}
	}
	r.end(cfg)
}

// decodeFacts decodes a stored span straight into the ledger's reader, as
// readFacts reads a live one: every stored attribute, repeats included,
// in stored order, so that replay reads the same facts as the live path
// did (CONTRACT.md v0.6 rule 7).
func decodeFacts(d *journal.Decoder, f *spanFacts, cfg *ledgerConfig) {
	h, ok := d.Header()
	if !ok {
		return
	}
	var r factReader
	r.begin(f, h.Name, h.TraceID, h.SpanID, h.Parent, h.Start, h.End, h.Code == ptrace.StatusCodeError)
	f.Dropped = ledgerrule.Dropped{Attributes: h.Dropped.Attributes, Links: h.Dropped.Links, LinkAttributes: h.Dropped.LinkAttributes}
	if h.IDOmitted {
		// Stored without it (journal.Encoder.Fact): it was this string.
		r.attr(contract.AttrInvocationID, pcommon.NewValueStr(d.ID))
	}
	n := d.Count(2)
	for i := 0; i < n && d.Err == nil; i++ {
		k := d.Key()
		v := pcommon.NewValueEmpty()
		d.Value(v, 0)
		r.attr(k, v)
	}
	nl := d.Count(25)
	for i := 0; i < nl && d.Err == nil; i++ {
		r.linkStart(d.TraceID(), d.SpanID())
		na := d.Count(2)
		for j := 0; j < na && d.Err == nil; j++ {
			k := d.Key()
			v := pcommon.NewValueEmpty()
			d.Value(v, 0)
			r.linkAttr(k, v)
		}
	}
	r.end(cfg)
}

// droppedOf reads what the SDK's limits dropped from a span, as OTLP
// carries it: dropped_attributes_count and dropped_links_count on the span
// and dropped_attributes_count on each link.
func droppedOf(sp ptrace.Span) ledgerrule.Dropped {
	d := ledgerrule.Dropped{
		Attributes: ledgerrule.DroppedCount(sp.DroppedAttributesCount()),
		Links:      ledgerrule.DroppedCount(sp.DroppedLinksCount()),
	}
	links := sp.Links()
	for i := 0; i < links.Len(); i++ {
		if n := links.At(i).DroppedAttributesCount(); n > 0 {
			d.LinkAttributes = min(d.LinkAttributes+n, ^uint32(0)/2)
		}
	}
	return d
}
