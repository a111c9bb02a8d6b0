package instrument

import (
	"encoding/binary"
	"math"
)

// nameRef is a span name held by an invocation: -1-i for name i of the
// ledger's nameTable, 1+o for the name at offset o of the invocation's
// own nameList, 0 for none.
type nameRef int32

// maxInterned and maxInternedLen bound a ledger's nameTable: at most
// 4096 names of at most 128 bytes.
const (
	maxInterned    = 4096
	maxInternedLen = 128
)

// nameTable interns the span names a Ledger sees, which repeat ("chat
// gpt-4o", "execute_tool shell"): an invocation's nodes name them by
// number, and an invocation whose names are all interned keeps no copy
// of them. It holds at most maxInterned names and never forgets one;
// beyond, an invocation keeps its own copies. The Ledger's mutex guards
// it.
type nameTable struct {
	ids   map[string]int32
	names []string
}

// ref returns the reference of an interned name, and false when name is
// not interned and cannot be.
func (t *nameTable) ref(name string) (nameRef, bool) {
	id, ok := t.ids[name]
	if !ok {
		if len(t.names) >= maxInterned || len(name) > maxInternedLen {
			return 0, false
		}
		if t.ids == nil {
			t.ids = make(map[string]int32)
		}
		id = int32(len(t.names))
		t.ids[name] = id
		t.names = append(t.names, name)
	}
	return nameRef(-1 - id), true
}

// nameList holds the span names of one invocation: references to the
// ledger's nameTable, and the names the table has no room for back to
// back, each after its length as a uvarint, in a buffer without
// pointers (made when first needed). Names are read back only for
// reasons and anomalies.
type nameList struct {
	table *nameTable
	buf   []byte
}

// add returns a reference to name; 0 (no name) once the buffer would
// outgrow a nameRef.
func (l *nameList) add(name string) nameRef {
	if ref, ok := l.table.ref(name); ok {
		return ref
	}
	if len(l.buf) > math.MaxInt32-binary.MaxVarintLen64-len(name) {
		return 0
	}
	if l.buf == nil {
		l.buf = make([]byte, 0, 256)
	}
	ref := nameRef(len(l.buf) + 1)
	l.buf = binary.AppendUvarint(l.buf, uint64(len(name)))
	l.buf = append(l.buf, name...)
	return ref
}

// get returns the name ref stands for.
func (l *nameList) get(ref nameRef) string {
	switch {
	case ref < 0:
		return l.table.names[-1-ref]
	case ref == 0:
		return ""
	}
	n, k := binary.Uvarint(l.buf[ref-1:])
	start := int(ref-1) + k
	return string(l.buf[start : start+int(n)])
}
