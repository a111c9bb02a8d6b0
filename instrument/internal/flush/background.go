package flush

import "sync"

// Background runs a Flusher's flushes on a goroutine of their own, for
// what must reach the collector soon but must not hold up the runtime: a
// wake span (instrument's Tracker, WithWakeFlush), which announces a turn
// that is running. Asks made while a flush runs coalesce into one more
// flush after it (a span ended after a flush started may miss it), so at
// most one flush runs and at most one waits. Each flush is bounded by the
// Flusher's timeout; no goroutine outlives the last flush.
type Background struct {
	f Flusher
	// done, when set, is called after each flush, once its outcome is
	// settled (a test hook).
	done func(error)
	// mu guards running and again.
	mu      sync.Mutex
	running bool
	again   bool
}

// NewBackground returns the Background of f, or nil when f flushes
// nothing; Kick on nil does nothing.
func NewBackground(f Flusher) *Background {
	if !f.Enabled() {
		return nil
	}
	return &Background{f: f}
}

// Kick asks for a flush of everything ended so far and returns at once.
func (b *Background) Kick() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running {
		b.again = true
		return
	}
	b.running = true
	go b.run()
}

func (b *Background) run() {
	for {
		// A failure reaches the OpenTelemetry error handler; the spans go
		// on the exporter's schedule.
		err := b.f.Flush()
		b.mu.Lock()
		more := b.again
		b.again = false
		b.running = more
		b.mu.Unlock()
		if b.done != nil {
			b.done(err)
		}
		if !more {
			return
		}
	}
}
