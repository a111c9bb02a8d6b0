package journal // import "github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"

import (
	"fmt"
	"math"

	"go.opentelemetry.io/collector/pdata/pcommon"
)

// MaxValueDepth is the deepest nesting of slices and maps the journal
// stores in one attribute value: a scalar has depth 0, a slice of scalars
// depth 1, a map holding such a slice depth 2. The encoder and the decoder
// share it, so whatever one writes the other reads; the processor refuses
// a batch with a deeper value in what it journals before acknowledging it
// (CONTRACT.md, "What the processor accepts"), so nothing acknowledged is
// ever cut. The decoder's bound also keeps a damaged record from
// recursing without end.
const MaxValueDepth = 64

// ErrTooDeep is wrapped by the encoder's error for a value nested deeper
// than MaxValueDepth.
var ErrTooDeep = fmt.Errorf("attribute value nested deeper than %d levels", MaxValueDepth)

func (e *Encoder) tooDeep() {
	if e.Err == nil {
		e.Err = ErrTooDeep
	}
}

// ValueDepth returns v's depth (see MaxValueDepth), counting no further
// than MaxValueDepth+1: a deeper value is reported as MaxValueDepth+1,
// and the walk stays bounded whatever the receiver decoded.
func ValueDepth(v pcommon.Value) int { return valueDepth(v, 0) }

// valueDepth is v's depth when v sits under above containers, plus above.
func valueDepth(v pcommon.Value, above int) int {
	if above > MaxValueDepth {
		return above
	}
	deepest := above
	switch v.Type() {
	case pcommon.ValueTypeSlice:
		deepest = above + 1
		sl := v.Slice()
		for i := 0; i < sl.Len() && deepest <= MaxValueDepth; i++ {
			deepest = max(deepest, valueDepth(sl.At(i), above+1))
		}
	case pcommon.ValueTypeMap:
		deepest = above + 1
		for _, e := range v.Map().All() {
			if deepest > MaxValueDepth {
				break
			}
			deepest = max(deepest, valueDepth(e, above+1))
		}
	}
	return deepest
}

// TooDeep returns the first attribute of m that keep accepts (all when
// nil) whose value is nested deeper than MaxValueDepth, and its depth
// (counted up to MaxValueDepth+1).
func TooDeep(m pcommon.Map, keep func(string) bool) (key string, depth int, found bool) {
	for k, v := range m.All() {
		switch v.Type() {
		case pcommon.ValueTypeSlice, pcommon.ValueTypeMap:
		default:
			continue
		}
		if keep != nil && !keep(k) {
			continue
		}
		if d := ValueDepth(v); d > MaxValueDepth {
			return k, d, true
		}
	}
	return "", 0, false
}

// enum writes an OTLP enum (span kind, status code) as the wire has it,
// any int32: a uvarint of its 32 bits, one byte for the defined values
// (the byte earlier versions wrote), so any value the receiver hands over
// reads back the same.
func (e *Encoder) enum(v int32) { e.Uvarint(uint64(uint32(v))) }

// enum reads what Encoder.enum wrote.
func (d *Decoder) enum() int32 {
	v := d.Uvarint()
	if v > math.MaxUint32 {
		d.Fail("enum %d beyond 32 bits", v)
		return 0
	}
	return int32(uint32(v))
}
