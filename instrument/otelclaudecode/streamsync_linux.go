package otelclaudecode

import (
	"syscall"
	"unsafe"
)

// pipeBuffered returns the bytes waiting in the pipe fd (FIONREAD).
func pipeBuffered(fd uintptr) (int, error) {
	var n int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&n))); errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
