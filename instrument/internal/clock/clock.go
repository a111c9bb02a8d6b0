// Package clock is the time source of the in-process ledger: its arrival
// times and its timers (remote settle, open timeout, retention). The
// ledger uses System; tests inject a manual clock through
// instrumenttest.WithClock, which reaches the ledger's configuration by
// NewOption, so that the test hook stays out of instrument's main API.
package clock

import "time"

// Clock is the time source of the ledger.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending call scheduled by Clock.AfterFunc.
type Timer interface {
	// Stop prevents the call if it has not run yet; it reports whether it
	// did.
	Stop() bool
}

// System is the system clock.
type System struct{}

// Now returns time.Now().
func (System) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (System) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// NewOption returns an instrument.SpanProcessorOption that sets the
// ledger's clock; package instrument sets it at init, so that
// instrumenttest can build the option without instrument exporting it.
var NewOption func(Clock) any
