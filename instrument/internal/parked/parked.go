// Package parked lets the instrument SpanProcessor end the spans a client
// wrapper holds open on purpose (a model call whose attempt failed, kept
// for the SDK's retry) before it flushes or shuts down its pipeline, so
// that a process exiting within the retry window still exports them.
//
// A wrapper gives each span it may hold a context carrying its Holder
// (ContextWithHolder); the SpanProcessor, whose OnStart runs inside the
// span's start, adds the Holder to its Holders, which keep it weakly: a
// wrapper that is no longer used is not kept alive.
package parked

import (
	"context"
	"sync"
	"weak"
)

// Holder ends the spans its wrapper holds open.
type Holder struct {
	end func()
	// self is the Holder's weak pointer, made once.
	self weak.Pointer[Holder]
}

// NewHolder returns a Holder whose EndParked calls end.
func NewHolder(end func()) *Holder {
	h := &Holder{end: end}
	h.self = weak.Make(h)
	return h
}

// EndParked ends every span the wrapper holds open, at the time its last
// attempt ended.
func (h *Holder) EndParked() { h.end() }

type holderKey struct{}

// ContextWithHolder returns ctx carrying h, for starting a span h may hold.
func ContextWithHolder(ctx context.Context, h *Holder) context.Context {
	return context.WithValue(ctx, holderKey{}, h)
}

// HolderFromContext returns the Holder in ctx, or nil.
func HolderFromContext(ctx context.Context) *Holder {
	h, _ := ctx.Value(holderKey{}).(*Holder)
	return h
}

// Holders is the set of Holders whose spans one pipeline sees, held
// weakly. It is safe for concurrent use.
type Holders struct {
	// mu guards set.
	mu  sync.Mutex
	set map[weak.Pointer[Holder]]struct{}
}

// Add adds h.
func (hs *Holders) Add(h *Holder) {
	wp := h.self
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if _, ok := hs.set[wp]; ok {
		return
	}
	if hs.set == nil {
		hs.set = make(map[weak.Pointer[Holder]]struct{})
	}
	hs.sweepLocked()
	hs.set[wp] = struct{}{}
}

// EndParked calls EndParked on every live Holder, outside the lock (ending
// a span runs the pipeline's OnEnd).
func (hs *Holders) EndParked() {
	hs.mu.Lock()
	hs.sweepLocked()
	live := make([]*Holder, 0, len(hs.set))
	for wp := range hs.set {
		if h := wp.Value(); h != nil {
			live = append(live, h)
		}
	}
	hs.mu.Unlock()
	for _, h := range live {
		h.EndParked()
	}
}

// Len returns the number of Holders kept (for tests).
func (hs *Holders) Len() int {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.sweepLocked()
	return len(hs.set)
}

// sweepLocked drops Holders that were collected.
func (hs *Holders) sweepLocked() {
	for wp := range hs.set {
		if wp.Value() == nil {
			delete(hs.set, wp)
		}
	}
}
