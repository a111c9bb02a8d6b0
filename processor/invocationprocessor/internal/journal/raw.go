package journal // import "github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"

import (
	"encoding/binary"
	"math"
)

// RawMap writes attributes held as raw values (pcommon.Map.AsRaw), as
// Attrs writes a pcommon.Map: the same tags, so a map reads back as
// either. A value is written as pcommon.Value.FromRaw would make it (an
// int or a uint as an int64, a float32 as a float64, a type FromRaw
// refuses as an empty value), so what is read back builds the same
// attributes as the map it was written from. The entries are in the map's
// iteration order.
func (e *Encoder) RawMap(m map[string]any, depth int) {
	e.Uvarint(uint64(len(m)))
	for k, v := range m {
		e.Key(k)
		e.RawValue(v, depth)
	}
}

// RawValue writes one raw value (see RawMap).
func (e *Encoder) RawValue(v any, depth int) {
	switch v := v.(type) {
	case string:
		e.Byte1(tagStr)
		e.Str(v)
	case int64:
		e.rawInt(v)
	case int:
		e.rawInt(int64(v))
	case int8:
		e.rawInt(int64(v))
	case int16:
		e.rawInt(int64(v))
	case int32:
		e.rawInt(int64(v))
	case uint:
		e.rawInt(int64(v))
	case uint8:
		e.rawInt(int64(v))
	case uint16:
		e.rawInt(int64(v))
	case uint32:
		e.rawInt(int64(v))
	case uint64:
		e.rawInt(int64(v))
	case float64:
		e.rawDouble(v)
	case float32:
		e.rawDouble(float64(v))
	case bool:
		e.Byte1(tagBool)
		if v {
			e.Byte1(1)
		} else {
			e.Byte1(0)
		}
	case []byte:
		e.Byte1(tagBytes)
		e.BytesLP(v)
	case []any:
		e.Byte1(tagSlice)
		if depth >= MaxValueDepth {
			e.tooDeep()
			e.Uvarint(0)
			return
		}
		e.Uvarint(uint64(len(v)))
		for _, x := range v {
			e.RawValue(x, depth+1)
		}
	case map[string]any:
		e.Byte1(tagMap)
		if depth >= MaxValueDepth {
			e.tooDeep()
			e.Uvarint(0)
			return
		}
		e.RawMap(v, depth+1)
	default: // nil, and what FromRaw refuses: an empty value
		e.Byte1(tagEmpty)
	}
}

func (e *Encoder) rawInt(v int64) {
	e.Byte1(tagInt)
	e.Varint(v)
}

func (e *Encoder) rawDouble(v float64) {
	e.Byte1(tagDouble)
	e.B = binary.LittleEndian.AppendUint64(e.B, math.Float64bits(v))
}

// RawMap reads what RawMap (or Attrs) wrote as raw values, as
// pcommon.Map.AsRaw returns them; nil for no entries. A repeated key
// keeps its last value, as pcommon.Map.AsRaw keeps it.
func (d *Decoder) RawMap(depth int) map[string]any {
	n := d.Count(2)
	if n == 0 {
		return nil
	}
	m := make(map[string]any, n)
	for i := 0; i < n && d.Err == nil; i++ {
		k := d.Key()
		m[k] = d.RawValue(depth)
	}
	return m
}

// RawValue reads one value (see RawMap).
func (d *Decoder) RawValue(depth int) any {
	switch tag := d.Byte1(); tag {
	case tagEmpty:
		return nil
	case tagStr:
		return d.Str()
	case tagInt:
		return d.Varint()
	case tagDouble:
		if p := d.Fixed(8); p != nil {
			return math.Float64frombits(binary.LittleEndian.Uint64(p))
		}
		return nil
	case tagBool:
		switch b := d.Byte1(); b {
		case 0, 1:
			return b == 1
		default:
			d.Fail("bad bool %d", b)
			return nil
		}
	case tagBytes:
		return append([]byte{}, d.BytesLP()...)
	case tagSlice:
		if depth >= MaxValueDepth {
			d.Fail("value nested deeper than %d", MaxValueDepth)
			return nil
		}
		n := d.Count(1)
		out := make([]any, 0, n)
		for i := 0; i < n && d.Err == nil; i++ {
			out = append(out, d.RawValue(depth+1))
		}
		return out
	case tagMap:
		if depth >= MaxValueDepth {
			d.Fail("value nested deeper than %d", MaxValueDepth)
			return nil
		}
		m := d.RawMap(depth + 1)
		if m == nil {
			m = map[string]any{}
		}
		return m
	default:
		d.Fail("unknown value tag %d", tag)
		return nil
	}
}
