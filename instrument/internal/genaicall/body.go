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

// plainBody keeps a copy of a JSON response body as the caller reads it and
// calls done once: at EOF, on a read error, or on Close (complete=false
// when the body was not read to its end).
type plainBody struct {
	rc   io.ReadCloser
	done func(b []byte, complete bool, err error)

	// mu guards buf, overflow and finished: Close may come from another
	// goroutine than Read.
	mu       sync.Mutex
	buf      bytes.Buffer
	overflow bool
	finished bool
}

// newPlainBody returns rc watched by a plainBody calling done; size is
// the body's declared length, -1 when unknown.
func newPlainBody(rc io.ReadCloser, size int64, done func(b []byte, complete bool, err error)) *plainBody {
	b := &plainBody{rc: rc, done: done}
	if size > 0 && size <= maxPlainBody {
		b.buf.Grow(int(size))
	}
	return b
}

func (b *plainBody) Read(p []byte) (int, error) {
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

func (b *plainBody) Close() error {
	err := b.rc.Close()
	b.mu.Lock()
	b.finishLocked(false, nil)
	b.mu.Unlock()
	return err
}

func (b *plainBody) finishLocked(complete bool, err error) {
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

// sseBody passes a server-sent-event stream through to the caller event by
// event. Each event's data is shown to onEvent, which says whether the
// caller gets the event and whether it is the stream's terminal event. done
// is called once: at the terminal event or EOF (err nil, early false), on a
// read error, or when the caller closes the body before either (early).
type sseBody struct {
	rc      io.ReadCloser
	br      *bufio.Reader
	onEvent func(data []byte) (keep, terminal bool)
	done    func(err error, early bool)

	// Only Read touches ev, lineStart, inLine, out and readErr.
	ev []byte
	// lineStart is where the line being read starts in ev; inLine is set
	// while a line longer than br's buffer is read in pieces.
	lineStart int
	inLine    bool
	out       []byte
	readErr   error

	// mu guards finished and serializes onEvent with done, since Close
	// may come from another goroutine than Read.
	mu       sync.Mutex
	finished bool
}

// newSSEBody returns rc watched by an sseBody.
func newSSEBody(rc io.ReadCloser, onEvent func([]byte) (bool, bool), done func(error, bool)) *sseBody {
	return &sseBody{rc: rc, br: bufio.NewReaderSize(rc, 16<<10), onEvent: onEvent, done: done}
}

func (b *sseBody) Read(p []byte) (int, error) {
	for len(b.out) == 0 {
		if b.readErr != nil {
			return 0, b.readErr
		}
		line, err := b.br.ReadSlice('\n')
		if !b.inLine {
			b.lineStart = len(b.ev)
		}
		b.ev = append(b.ev, line...)
		// A line longer than the reader's buffer comes in pieces; only the
		// whole line can be blank, not its last piece.
		b.inLine = errors.Is(err, bufio.ErrBufferFull)
		if b.inLine {
			continue
		}
		if err == nil {
			if isBlankLine(b.ev[b.lineStart:]) {
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
func (b *sseBody) dispatch() {
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

func (b *sseBody) Close() error {
	err := b.rc.Close()
	b.mu.Lock()
	b.finishLocked(nil, true)
	b.mu.Unlock()
	return err
}

func (b *sseBody) finishLocked(err error, early bool) {
	if b.finished {
		return
	}
	b.finished = true
	b.done(err, early)
}

// errorBody watches an error response's body to learn whether the SDK
// retries: it reads an error body it returns to the caller, and closes
// unread the body of an attempt it is about to retry.
type errorBody struct {
	rc   io.ReadCloser
	done func(read bool)

	// mu guards read and finished.
	mu       sync.Mutex
	read     bool
	finished bool
}

// newErrorBody returns rc watched by an errorBody calling done.
func newErrorBody(rc io.ReadCloser, done func(read bool)) *errorBody {
	return &errorBody{rc: rc, done: done}
}

func (b *errorBody) Read(p []byte) (int, error) {
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

func (b *errorBody) Close() error {
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
