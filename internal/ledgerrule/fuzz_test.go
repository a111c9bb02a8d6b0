package ledgerrule

import (
	"slices"
	"testing"
)

// valueFromByte draws a Value of any kind, from a small alphabet so that
// repeats with equal values are common.
func valueFromByte(b byte) Value {
	switch b % 8 {
	case 0:
		return IntValue(int64(b/8) - 2)
	case 1:
		return StringValue([]string{"root", "background", "continuation", "chat", "abandoned", "", "x", "followup"}[b/8%8])
	case 2:
		return BoolValue(b&8 != 0)
	case 3:
		return DoubleValue(float64(b / 8))
	case 4:
		return OtherValue(KindSlice)
	case 5:
		return OtherValue(KindMap)
	case 6:
		return OtherValue(KindBytes)
	}
	return OtherValue(KindEmpty)
}

// FuzzSpanReader checks the reader's invariants on arbitrary attribute
// sequences: a key is malformed exactly when a value of it has the wrong
// type or its values differ (usage aside, whose wrong type is
// invalid_usage), and the facts do not depend on the attributes' order.
func FuzzSpanReader(f *testing.F) {
	f.Add([]byte{2, 0, 2, 8}) // children 2 then ... (pairs: key, value)
	f.Add([]byte{1, 9, 3, 8, 12, 25, 12, 0})
	f.Add([]byte{0, 49, 0, 57})
	cfg := NewConfig([]string{"chat"}, 4)
	f.Fuzz(func(t *testing.T, data []byte) {
		var attrs []struct {
			k Key
			v Value
		}
		for i := 0; i+1 < len(data) && len(attrs) < 64; i += 2 {
			attrs = append(attrs, struct {
				k Key
				v Value
			}{Key(data[i] % byte(numKeys)), valueFromByte(data[i+1])})
		}
		readOrder := func(order []int) Facts {
			var r SpanReader
			for _, i := range order {
				r.Attr(attrs[i].k, attrs[i].v)
			}
			var f Facts
			r.Read(cfg, &f)
			return f
		}
		order := make([]int, len(attrs))
		for i := range order {
			order[i] = i
		}
		got := readOrder(order)
		slices.Reverse(order)
		rev := readOrder(order)

		modelCall := got.ModelCall
		for k := Key(0); k < numKeys; k++ {
			var vals []Value
			for _, a := range attrs {
				if a.k == k {
					vals = append(vals, a.v)
				}
			}
			differ := false
			wrong := false
			for i, v := range vals {
				differ = differ || (i > 0 && !v.same(vals[0]))
				wrong = wrong || v.kind != keyKinds[k]
			}
			want := differ || wrong
			if k >= KeyUsageInput && k <= KeyUsageReasoning {
				// Usage of the wrong type is invalid_usage; only a
				// differing repeat is malformed, and only on a model call.
				want = modelCall && differ
			}
			if bad := got.Malformed&(1<<k) != 0; bad != want {
				t.Fatalf("%s: malformed %v, want %v (values %v)", k, bad, want, vals)
			}
		}
		if got.Malformed != rev.Malformed {
			t.Fatalf("malformed depends on order: %b vs %b", got.Malformed, rev.Malformed)
		}
		// v0.8: a span flags a usage mismatch exactly when its
		// invocation.usage.mismatch is well formed and true.
		var mismatch []Value
		for _, a := range attrs {
			if a.k == KeyUsageMismatch {
				mismatch = append(mismatch, a.v)
			}
		}
		wantMismatch := len(mismatch) > 0 && got.Malformed&(1<<KeyUsageMismatch) == 0 && mismatch[0].Bool()
		if got.UsageMismatch != wantMismatch {
			t.Fatalf("UsageMismatch %v, want %v (values %v)", got.UsageMismatch, wantMismatch, mismatch)
		}
		// Where nothing is malformed, the facts do not depend on order.
		if got.Malformed == 0 && got != rev {
			t.Fatalf("facts depend on order:\n%+v\n%+v", got, rev)
		}
		// A count is provable only from one int value in range.
		for _, c := range []Count{got.Children, got.Followups, got.Unrecorded, got.Detached} {
			if c.State == CountValid && (c.N < 0 || c.N > 4) {
				t.Fatalf("count out of range read as valid: %+v", c)
			}
		}
	})
}
