package refmodel

import (
	"bytes"
	"math"
	"time"
)

// TraceID is a 16-byte trace ID.
type TraceID [16]byte

// SpanID is an 8-byte span ID; the zero SpanID means none.
type SpanID [8]byte

// Kind is the OTLP type of a Value.
type Kind uint8

// Kinds of Value, one per OTLP AnyValue case.
const (
	KindEmpty Kind = iota
	KindStr
	KindBool
	KindInt
	KindDouble
	KindBytes
	KindSlice
	KindMap
)

// Value is an attribute value of any OTLP type.
type Value struct {
	Kind   Kind
	Str    string
	Bool   bool
	Int    int64
	Double float64
	Bytes  []byte
	Slice  []Value
	Map    []KeyValue
}

// Str returns a string Value.
func Str(s string) Value { return Value{Kind: KindStr, Str: s} }

// Int returns an int Value.
func Int(n int64) Value { return Value{Kind: KindInt, Int: n} }

// Bool returns a bool Value.
func Bool(b bool) Value { return Value{Kind: KindBool, Bool: b} }

// Double returns a double Value.
func Double(f float64) Value { return Value{Kind: KindDouble, Double: f} }

// Equal reports whether two values have the same type and value. NaN is
// equal to nothing, so a repeated NaN reads as malformed.
func (v Value) Equal(w Value) bool {
	if v.Kind != w.Kind {
		return false
	}
	switch v.Kind {
	case KindEmpty:
		return true
	case KindStr:
		return v.Str == w.Str
	case KindBool:
		return v.Bool == w.Bool
	case KindInt:
		return v.Int == w.Int
	case KindDouble:
		return v.Double == w.Double && !math.IsNaN(v.Double)
	case KindBytes:
		return bytes.Equal(v.Bytes, w.Bytes)
	case KindSlice:
		if len(v.Slice) != len(w.Slice) {
			return false
		}
		for i := range v.Slice {
			if !v.Slice[i].Equal(w.Slice[i]) {
				return false
			}
		}
		return true
	case KindMap:
		if len(v.Map) != len(w.Map) {
			return false
		}
		for i := range v.Map {
			if v.Map[i].Key != w.Map[i].Key || !v.Map[i].Value.Equal(w.Map[i].Value) {
				return false
			}
		}
		return true
	}
	return false
}

// KeyValue is one attribute; a span's or link's attributes are an ordered
// list of them in which a key may repeat.
type KeyValue struct {
	Key   string
	Value Value
}

// Link is a span link.
type Link struct {
	TraceID    TraceID
	SpanID     SpanID
	Attributes []KeyValue
	// DroppedAttributes is OTLP's dropped_attributes_count of the link.
	DroppedAttributes uint32
}

// Span is one span as a collector receives it.
type Span struct {
	TraceID      TraceID
	SpanID       SpanID
	ParentSpanID SpanID
	Name         string
	// Error is true when the span's status code is Error.
	Error      bool
	Start, End time.Time
	Attributes []KeyValue
	Links      []Link
	// DroppedAttributes and DroppedLinks are OTLP's dropped counts: what
	// the SDK's span limits took from the span.
	DroppedAttributes, DroppedLinks uint32
}

// Arrival is a span delivered at a moment of the collector's clock.
type Arrival struct {
	Span Span
	At   time.Time
}

// Config is what of the processor's configuration the rule reads.
type Config struct {
	// MaxSpans is max_spans_per_invocation.
	MaxSpans int
	// UsageOperations are the gen_ai.operation.name values of model calls.
	UsageOperations []string
	// RemoteSettle is remote_settle.
	RemoteSettle time.Duration
}

// Totals are what a final summary must say.
type Totals struct {
	Input, Output, CacheRead, CacheCreation, Reasoning int64
	ModelCalls                                         int64
}

// Verdict is the model's answer for one invocation at one moment.
type Verdict struct {
	// Final is true when the contract proves the invocation final now.
	Final bool
	// Totals are the sums over the invocation's indexed model calls; when
	// Final they are exactly what the summary must carry.
	Totals Totals
	// Reasons holds the kinds of reason that forbid final (e.g.
	// "missing_children", "remote_settling"), each with the details
	// ("missing_children:chat") that produced it.
	Reasons map[string][]string
	// Members counts the indexed spans.
	Members int
	// Anomalies are the anomalies the model computes, sorted, each once:
	// only followup_interrupted:<job name> (v0.7) and
	// usage_mismatch:<span name> (v0.8), whether final or not.
	Anomalies []string
}
