package parked

import (
	"context"
	"runtime"
	"testing"
)

func TestHoldersEndParkedAndForgetCollected(t *testing.T) {
	var hs Holders
	ended := 0
	h := NewHolder(func() { ended++ })
	if HolderFromContext(ContextWithHolder(context.Background(), h)) != h || HolderFromContext(context.Background()) != nil {
		t.Fatal("context round trip")
	}
	hs.Add(h)
	hs.Add(h)
	if n := hs.Len(); n != 1 {
		t.Fatalf("len %d, want 1", n)
	}
	hs.EndParked()
	if ended != 1 {
		t.Fatalf("ended %d", ended)
	}
	runtime.KeepAlive(h)
	h = nil
	for i := 0; i < 3 && hs.Len() > 0; i++ {
		runtime.GC()
	}
	if n := hs.Len(); n != 0 {
		t.Errorf("a collected Holder is still kept: len %d", n)
	}
	hs.EndParked()
	if ended != 1 {
		t.Errorf("a collected Holder was ended")
	}
}
