package main

import (
	"fmt"
	"time"
)

// envFlushTimeout bounds the export a drop-in waits for before it passes
// a result on to the host (the adapters' WithFlushTimeout); 0 turns the
// wait off. The same bound applies to the export of a wake span, which
// the adapters start at once when a turn the runtime started by itself
// begins (instrument.WithWakeFlush), off the runtime's path.
const envFlushTimeout = "AGENTLEDGER_FLUSH_TIMEOUT"

// defaultFlushTimeout is the flush bound without AGENTLEDGER_FLUSH_TIMEOUT.
const defaultFlushTimeout = 2 * time.Second

// readFlushTimeout reads AGENTLEDGER_FLUSH_TIMEOUT: a duration, "0" for
// no flush. It returns the adapters' option value: negative for off.
func readFlushTimeout(env environ) (time.Duration, error) {
	v, ok := env(envFlushTimeout)
	if !ok || v == "" {
		return defaultFlushTimeout, nil
	}
	d, err := time.ParseDuration(v)
	if v == "0" {
		d, err = 0, nil
	}
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration such as 2s, or 0 to pass results on without waiting for the export", envFlushTimeout, v)
	}
	if d == 0 {
		return -1, nil
	}
	return d, nil
}
