// Package instrumenttest holds the test hooks of package instrument, kept
// out of its main API: a clock for the ledger, so that a test drives the
// remote settle time, the open timeout and the retention without waiting
// for a real timer.
//
//	sp := instrument.NewSpanProcessor(next, instrumenttest.WithClock(clk))
package instrumenttest

import (
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/clock"
)

// Clock is the time source of the ledger: its arrival times and its
// timers. It has two methods: Now() time.Time, and AfterFunc(d
// time.Duration, f func()) Timer, which calls f in its own goroutine once d
// has passed.
type Clock = clock.Clock

// Timer is a pending call scheduled by Clock.AfterFunc. Its one method,
// Stop() bool, prevents the call if it has not run yet and reports whether
// it did.
type Timer = clock.Timer

// WithClock sets the clock of the ledger's arrival times and timers
// (remote settle, open timeout, retention). The system clock is used when
// it is not given or nil.
func WithClock(clk Clock) instrument.SpanProcessorOption {
	return clock.NewOption(clk).(instrument.SpanProcessorOption)
}
