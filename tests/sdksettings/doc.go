// Package sdksettings replays, into the collector's processor, the spans
// the in-process instrumentation exports under SDK settings that lose or
// cut what a span carries (issue 31), and checks that the two halves give
// the same answer. It holds tests only.
package sdksettings
