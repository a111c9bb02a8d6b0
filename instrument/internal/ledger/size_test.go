package ledger

import (
	"testing"
	"unsafe"
)

// TestStateSizeClasses guards the common path's memory: the ledger keeps
// an Invocation per invocation (at most 760 bytes, which with the
// allocator's 8-byte header for objects with pointers above 512 bytes is
// the 768-byte size class), and a span with children costs a countedSpan
// of 24 bytes.
func TestStateSizeClasses(t *testing.T) {
	if n := unsafe.Sizeof(Invocation{}); n > 760 {
		t.Errorf("Invocation is %d bytes, above 760 (the 768-byte size class with its header)", n)
	}
	if n := unsafe.Sizeof(countedSpan{}); n > 24 {
		t.Errorf("countedSpan is %d bytes, above 24", n)
	}
}
