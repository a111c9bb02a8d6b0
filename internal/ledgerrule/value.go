package ledgerrule

import "math"

// Kind is the type of an attribute value, as OTLP's AnyValue has them.
type Kind uint8

// The kinds of Value.
const (
	KindEmpty Kind = iota
	KindString
	KindBool
	KindInt
	KindDouble
	KindBytes
	KindSlice
	KindMap
)

var kindNames = [...]string{"empty", "string", "bool", "int", "double", "bytes", "slice", "map"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "unknown"
}

// Value is an attribute value as the reader sees it: its kind and, for the
// scalar kinds, its value. A half converts its own representation to a
// Value only for the keys Lookup knows, so the conversion costs nothing
// for the others. Values of the kinds bytes, slice and map carry no
// content: no rule attribute has such a type, so they are malformed
// whatever they hold.
type Value struct {
	kind Kind
	str  string
	num  int64 // an int, a bool (0 or 1) or a double's bits
}

// StringValue returns a string Value.
func StringValue(s string) Value { return Value{kind: KindString, str: s} }

// IntValue returns an int Value.
func IntValue(n int64) Value { return Value{kind: KindInt, num: n} }

// BoolValue returns a bool Value.
func BoolValue(b bool) Value {
	v := Value{kind: KindBool}
	if b {
		v.num = 1
	}
	return v
}

// DoubleValue returns a double Value.
func DoubleValue(f float64) Value { return Value{kind: KindDouble, num: int64(math.Float64bits(f))} }

// OtherValue returns a Value of a kind without content (empty, bytes,
// slice, map). A scalar kind passed here reads as empty.
func OtherValue(k Kind) Value {
	switch k {
	case KindBytes, KindSlice, KindMap:
		return Value{kind: k}
	}
	return Value{}
}

// Kind returns the value's kind.
func (v Value) Kind() Kind { return v.kind }

// Str returns a string value ("" for other kinds).
func (v Value) Str() string { return v.str }

// Int returns an int value (0 for other kinds).
func (v Value) Int() int64 {
	if v.kind != KindInt {
		return 0
	}
	return v.num
}

// Bool returns a bool value (false for other kinds).
func (v Value) Bool() bool { return v.kind == KindBool && v.num != 0 }

// same reports whether a repeat of a key with w reads as the first
// reading v: equal kind and value. Values without content never repeat
// the same (they are malformed in any case).
func (v Value) same(w Value) bool {
	switch v.kind {
	case KindString, KindBool, KindInt, KindDouble:
		return v == w
	}
	return false
}
