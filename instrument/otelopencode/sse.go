package otelopencode

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
)

// maxEventBytes bounds one event's data; OpenCode events carry whole tool
// outputs, so the bound is generous.
const maxEventBytes = 16 << 20

// sseReader splits a text/event-stream body into the data of its events
// (multi-line data joined with "\n", comments and other fields skipped).
type sseReader struct {
	sc   *bufio.Scanner
	data bytes.Buffer
}

func newSSEReader(r io.Reader) *sseReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventBytes)
	return &sseReader{sc: sc}
}

// next returns the data of the next event, or an error (io.EOF at a clean
// end of the stream).
func (s *sseReader) next() ([]byte, error) {
	s.data.Reset()
	has := false
	for s.sc.Scan() {
		line := s.sc.Bytes()
		if len(line) == 0 {
			if has {
				return bytes.Clone(s.data.Bytes()), nil
			}
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if len(field) == 0 {
			continue // a comment
		}
		if string(field) != "data" {
			continue
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if has {
			s.data.WriteByte('\n')
		}
		s.data.Write(value)
		has = true
	}
	if err := s.sc.Err(); err != nil {
		return nil, fmt.Errorf("otelopencode: reading event stream: %w", err)
	}
	if has {
		return bytes.Clone(s.data.Bytes()), nil
	}
	return nil, io.EOF
}
