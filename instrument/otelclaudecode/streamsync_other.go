//go:build !linux

package otelclaudecode

import "errors"

// pipeBuffered cannot ask the pipe here: requests whose owner only the
// stream tells are then attributed as if it could not be read (fail
// closed).
func pipeBuffered(uintptr) (int, error) {
	return 0, errors.New("otelclaudecode: FIONREAD not supported")
}
