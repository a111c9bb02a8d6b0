package ledger

import (
	"math"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/contract"
)

// ExportCounts are the counts the SpanProcessor puts on an ended span
// as it exports it: the invocation.children it counted (CountAbsent when
// it counted none) and the invocation.unrecorded and invocation.detached
// it counted when not 0 (contract v0.6 rules 3 and 4). wrap is false when
// the span is exported as it is (it counted nothing, or the span carries
// the count it stamped at its start). The exported span (span) and the
// ledger's reading of it (readFacts) both take its attributes from Keeps
// and Added, so they cannot differ.
type ExportCounts struct {
	children             int
	unrecorded, detached int32
	wrap                 bool
	// restore, when not nil, holds the ids the SDK's value length limit
	// cut on the span (restore.go).
	restore *Restored
}

// CountsOf returns how the SpanProcessor exports the ended span s.
func CountsOf(s sdktrace.ReadOnlySpan, children, unrecorded, detached int) ExportCounts {
	c := ExportCounts{children: children,
		unrecorded: int32(min(unrecorded, math.MaxInt32)), detached: int32(min(detached, math.MaxInt32))}
	c.wrap = c.unrecorded != 0 || c.detached != 0 ||
		(children != CountAbsent && !carriesCount(s.Attributes(), children))
	return c
}

// Span returns s as exported.
func (c ExportCounts) Span(s sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	switch {
	case !c.wrap:
		return s
	case c.restore != nil:
		return &restoredSpan{ReadOnlySpan: s, counts: c}
	case c.unrecorded != 0 || c.detached != 0:
		return &declaredSpan{ReadOnlySpan: s, children: c.children, unrecorded: c.unrecorded, detached: c.detached}
	}
	return &countedSpan{ReadOnlySpan: s, children: c.children}
}

// Keeps reports whether the span's own attribute kv is exported as it is
// under the counts c (a count the SpanProcessor puts replaces the span's).
func (c ExportCounts) Keeps(kv attribute.KeyValue) bool {
	if !c.wrap {
		return true
	}
	if c.restore != nil && !c.restore.keeps(kv) {
		return false
	}
	switch kv.Key {
	case contract.AttrChildren:
		return c.children == CountAbsent
	case contract.AttrUnrecorded:
		return c.unrecorded == 0
	case contract.AttrDetached:
		return c.detached == 0
	}
	return true
}

// Added returns, in buf, the attributes the counts c add after the span's
// own (those keeps keeps).
func (c ExportCounts) Added(buf *[AddedMax]attribute.KeyValue) []attribute.KeyValue {
	out := buf[:0]
	if !c.wrap {
		return out
	}
	if c.children != CountAbsent {
		out = append(out, attribute.Int(contract.AttrChildren, c.children))
	}
	if c.unrecorded != 0 {
		out = append(out, attribute.Int(contract.AttrUnrecorded, int(c.unrecorded)))
	}
	if c.detached != 0 {
		out = append(out, attribute.Int(contract.AttrDetached, int(c.detached)))
	}
	if c.restore != nil {
		out = c.restore.added(out)
	}
	return out
}

// collectAttrs returns the attributes of the span whose own are base as
// exported with the counts c: what keeps keeps, then what added adds.
func collectAttrs(base []attribute.KeyValue, c ExportCounts) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(base)+AddedMax)
	for _, kv := range base {
		if c.Keeps(kv) {
			out = append(out, kv)
		}
	}
	var buf [AddedMax]attribute.KeyValue
	return append(out, c.Added(&buf)...)
}

// carriesCount reports whether attrs hold invocation.children, every time
// as the int children (a stamp its attributes kept).
func carriesCount(attrs []attribute.KeyValue, children int) bool {
	found := false
	for _, kv := range attrs {
		if kv.Key != contract.AttrChildren {
			continue
		}
		if kv.Value.Type() != attribute.INT64 || kv.Value.AsInt64() != int64(children) {
			return false
		}
		found = true
	}
	return found
}

// countedSpan is an ended span with invocation.children added.
type countedSpan struct {
	sdktrace.ReadOnlySpan
	children int
}

// Attributes returns the span's attributes with invocation.children.
func (s *countedSpan) Attributes() []attribute.KeyValue {
	return collectAttrs(s.ReadOnlySpan.Attributes(), ExportCounts{children: s.children, wrap: true})
}

// declaredSpan is an ended span with invocation.children added, and
// invocation.unrecorded and invocation.detached when not 0 (contract
// v0.6 rules 3 and 4). It is a type of its own so that countedSpan, which
// most spans with children get, stays 24 bytes.
type declaredSpan struct {
	sdktrace.ReadOnlySpan
	children             int
	unrecorded, detached int32
}

// Attributes returns the span's attributes with its counts.
func (s *declaredSpan) Attributes() []attribute.KeyValue {
	return collectAttrs(s.ReadOnlySpan.Attributes(),
		ExportCounts{children: s.children, unrecorded: s.unrecorded, detached: s.detached, wrap: true})
}
