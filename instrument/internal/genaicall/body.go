package genaicall

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync"
)

// maxPlainBody bounds how much of a non-streamed response body is kept for
// parsing; the body the caller reads is never cut.
const maxPlainBody = 16 << 20

// PlainBody keeps a copy of a JSON response body as the caller reads it and
// calls done once: at EOF, on a read error, or on Close (complete=false
// when the body was not read to its end).
type PlainBody struct {
	rc   io.ReadCloser
	done func(b []byte, complete bool, err error)

	// mu guards buf, overflow and finished: Close may come from another
	// goroutine than Read.
	mu       sync.Mutex
	buf      bytes.Buffer
	overflow bool
	finished bool
}

// NewPlainBody returns rc watched by a PlainBody calling done.
func NewPlainBody(rc io.ReadCloser, done func(b []byte, complete bool, err error)) *PlainBody {
	return &PlainBody{rc: rc, done: done}
}

func (b *PlainBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > 0 && !b.finished {
		if b.buf.Len()+n <= maxPlainBody {
			b.buf.Write(p[:n])
		} else {
			b.overflow = true
		}
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			b.finishLocked(true, nil)
		} else {
			b.finishLocked(false, err)
		}
	}
	return n, err
}

func (b *PlainBody) Close() error {
	err := b.rc.Close()
	b.mu.Lock()
	b.finishLocked(false, nil)
	b.mu.Unlock()
	return err
}

func (b *PlainBody) finishLocked(complete bool, err error) {
	if b.finished {
		return
	}
	b.finished = true
	data := b.buf.Bytes()
	if b.overflow {
		data = nil
	}
	b.done(data, complete, err)
	b.buf = bytes.Buffer{}
}

// SSEBody passes a server-sent-event stream through to the caller event by
// event. Each event's data is shown to onEvent, which says whether the
// caller gets the event and whether it is the stream's terminal event. done
// is called once: at the terminal event or EOF (err nil, early false), on a
// read error, or when the caller closes the body before either (early).
type SSEBody struct {
	rc      io.ReadCloser
	br      *bufio.Reader
	onEvent func(data []byte) (keep, terminal bool)
	done    func(err error, early bool)

	// Only Read touches ev, out and readErr.
	ev      []byte
	out     []byte
	readErr error

	// mu guards finished and serializes onEvent with done, since Close
	// may come from another goroutine than Read.
	mu       sync.Mutex
	finished bool
}

// NewSSEBody returns rc watched by an SSEBody.
func NewSSEBody(rc io.ReadCloser, onEvent func([]byte) (bool, bool), done func(error, bool)) *SSEBody {
	return &SSEBody{rc: rc, br: bufio.NewReaderSize(rc, 16<<10), onEvent: onEvent, done: done}
}

func (b *SSEBody) Read(p []byte) (int, error) {
	for len(b.out) == 0 {
		if b.readErr != nil {
			return 0, b.readErr
		}
		line, err := b.br.ReadSlice('\n')
		b.ev = append(b.ev, line...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == nil {
			if isBlankLine(line) {
				b.dispatch()
			}
			continue
		}
		if len(b.ev) > 0 {
			b.dispatch()
		}
		b.readErr = err
		b.mu.Lock()
		if errors.Is(err, io.EOF) {
			b.finishLocked(nil, false)
		} else {
			b.finishLocked(err, false)
		}
		b.mu.Unlock()
	}
	n := copy(p, b.out)
	b.out = b.out[n:]
	return n, nil
}

func isBlankLine(line []byte) bool {
	return len(bytes.TrimRight(line, "\r\n")) == 0
}

// dispatch hands the buffered event to onEvent and queues it for the
// caller when kept.
func (b *SSEBody) dispatch() {
	data := eventData(b.ev)
	keep := true
	b.mu.Lock()
	if len(data) > 0 && !b.finished {
		var terminal bool
		keep, terminal = b.onEvent(data)
		if terminal {
			b.finishLocked(nil, false)
		}
	}
	b.mu.Unlock()
	if keep {
		b.out = append(b.out, b.ev...)
	}
	b.ev = b.ev[:0]
}

// eventData joins the data lines of one event; the common single-line
// case is returned without a copy.
func eventData(ev []byte) []byte {
	var first, joined []byte
	count := 0
	for len(ev) > 0 {
		line := ev
		if i := bytes.IndexByte(ev, '\n'); i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		rest, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("data:"))
		if !ok {
			continue
		}
		rest = bytes.TrimPrefix(rest, []byte(" "))
		count++
		switch count {
		case 1:
			first = rest
		case 2:
			joined = append(append(append([]byte(nil), first...), '\n'), rest...)
		default:
			joined = append(append(joined, '\n'), rest...)
		}
	}
	if count > 1 {
		return joined
	}
	return first
}

func (b *SSEBody) Close() error {
	err := b.rc.Close()
	b.mu.Lock()
	b.finishLocked(nil, true)
	b.mu.Unlock()
	return err
}

func (b *SSEBody) finishLocked(err error, early bool) {
	if b.finished {
		return
	}
	b.finished = true
	b.done(err, early)
}

// ErrorBody watches an error response's body to learn whether the SDK
// retries: it reads an error body it returns to the caller, and closes
// unread the body of an attempt it is about to retry.
type ErrorBody struct {
	rc   io.ReadCloser
	done func(read bool)

	// mu guards read and finished.
	mu       sync.Mutex
	read     bool
	finished bool
}

// NewErrorBody returns rc watched by an ErrorBody calling done.
func NewErrorBody(rc io.ReadCloser, done func(read bool)) *ErrorBody {
	return &ErrorBody{rc: rc, done: done}
}

func (b *ErrorBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.mu.Lock()
	if n > 0 || err != nil {
		b.read = true
	}
	if errors.Is(err, io.EOF) && !b.finished {
		b.finished = true
		b.mu.Unlock()
		b.done(true)
		return n, err
	}
	b.mu.Unlock()
	return n, err
}

func (b *ErrorBody) Close() error {
	err := b.rc.Close()
	b.mu.Lock()
	if b.finished {
		b.mu.Unlock()
		return err
	}
	b.finished = true
	read := b.read
	b.mu.Unlock()
	b.done(read)
	return err
}
