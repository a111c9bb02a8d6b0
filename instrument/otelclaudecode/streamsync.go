package otelclaudecode

import (
	"io"
	"os"
	"sync"
	"syscall"
	"time"
)

// streamSync lets the model-wire proxy wait until the Client has handled
// every line the CLI printed before it sent a request: the CLI prints a
// task's start, a prompt's start and a result before the requests that
// follow them, so what the stream says is then up to date for that
// request.
//
// The reader takes bytes from the pipe and counts them under mu, so that
// a barrier's count of the bytes taken plus those still in the pipe
// (FIONREAD) is exact; it then waits until the lines up to there have
// been handled.
type streamSync struct {
	rc syscall.RawConn // nil when the pipe cannot be asked (not *os.File)

	// mu guards taken, pos and advanced.
	mu sync.Mutex
	// taken counts the bytes read from the pipe; pos those handled (taken
	// minus what the line reader still buffers).
	taken, pos int64
	// advanced is closed, and replaced, whenever pos grows.
	advanced chan struct{}
}

func newStreamSync(r io.Reader) *streamSync {
	s := &streamSync{advanced: make(chan struct{})}
	if f, ok := r.(*os.File); ok {
		if rc, err := f.SyscallConn(); err == nil {
			s.rc = rc
		}
	}
	return s
}

// reader returns r counting what it takes.
func (s *streamSync) reader(r io.Reader) io.Reader {
	if s.rc == nil {
		return countingReader{s, r}
	}
	return rawReader{s}
}

type countingReader struct {
	s *streamSync
	r io.Reader
}

func (c countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.s.mu.Lock()
	c.s.taken += int64(n)
	c.s.mu.Unlock()
	return n, err
}

// rawReader reads the pipe with read(2) under mu, waiting for data
// outside it (the runtime's poller).
type rawReader struct{ s *streamSync }

func (r rawReader) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var n int
	var rerr error
	err := r.s.rc.Read(func(fd uintptr) bool {
		r.s.mu.Lock()
		defer r.s.mu.Unlock()
		n, rerr = syscall.Read(int(fd), b)
		if rerr == syscall.EAGAIN {
			return false
		}
		if rerr == syscall.EINTR {
			return false
		}
		if n > 0 {
			r.s.taken += int64(n)
		}
		return true
	})
	switch {
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, rerr
	case n <= 0:
		return 0, io.EOF
	}
	return n, nil
}

// handled records that every line the reader took is handled but the
// buffered bytes.
func (s *streamSync) handled(buffered int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pos := s.taken - int64(buffered); pos > s.pos {
		s.pos = pos
		close(s.advanced)
		s.advanced = make(chan struct{})
	}
}

// wait waits until every byte the CLI had written when it was called is
// handled, for at most max; it returns false when it could not tell or
// gave up. Once exited is closed nothing more comes: true.
func (s *streamSync) wait(max time.Duration, exited <-chan struct{}) bool {
	if s.rc == nil {
		return false
	}
	var target int64
	ok := false
	err := s.rc.Control(func(fd uintptr) {
		s.mu.Lock()
		defer s.mu.Unlock()
		n, err := pipeBuffered(fd)
		if err == nil {
			target, ok = s.taken+int64(n), true
		}
	})
	if err != nil || !ok {
		return false
	}
	timer := time.NewTimer(max)
	defer timer.Stop()
	for {
		s.mu.Lock()
		pos, advanced := s.pos, s.advanced
		s.mu.Unlock()
		if pos >= target {
			return true
		}
		select {
		case <-advanced:
		case <-exited:
			return true
		case <-timer.C:
			return false
		}
	}
}
