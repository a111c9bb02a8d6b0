//go:build unix

package main

import (
	"os"
	"syscall"
)

// allocated is the disk space a file's blocks take.
func allocated(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}
