package flush

import "io"

// maxHeld bounds what a Gate holds of one line: past it, the start of a
// line too long to hold is passed on as it comes (the line cannot be
// edited then).
const maxHeld = 1 << 20

// Gate passes a runtime's output on to the host byte for byte and in
// order, but holds each line back until the adapter has handled it (and,
// for a result, exported its invocation): the host cannot act on a line
// it has not got whole. It sits between the runtime's stdout and the
// bufio.Reader a read loop reads lines from (an io.TeeReader writes to
// it): Write gets what the reader takes from the runtime, Release passes
// on what the reader has handed out.
//
// A bufio.Reader takes more from the runtime only when what it holds has
// no newline left, so when Write is called the bytes held are the start
// of one line not yet complete. A line is held whole up to maxHeld bytes;
// the start of a longer one is passed on when more comes, which bounds
// what is held.
type Gate struct {
	w    io.Writer
	held []byte
	// cut is set when the start of the line being read was passed on.
	cut bool
}

// NewGate returns a Gate in front of w.
func NewGate(w io.Writer) *Gate { return &Gate{w: w} }

// Write holds b. A write error of the host is returned: the reader then
// stops, as with the host's own pipe.
func (g *Gate) Write(b []byte) (int, error) {
	if len(g.held) > maxHeld {
		_, err := g.w.Write(g.held)
		g.held, g.cut = g.held[:0], true
		if err != nil {
			return 0, err
		}
	}
	g.held = append(g.held, b...)
	return len(b), nil
}

// Release passes on the line the reader handed out last: everything held
// but the buffered bytes it has not handed out. edit, when not nil, may
// change the line first (it gets the line with its newline, if any, and
// must keep it), or drop it by returning nothing; it is not called for a
// line whose start was passed on.
func (g *Gate) Release(buffered int, edit func([]byte) []byte) error {
	n := len(g.held) - buffered
	if n <= 0 {
		return nil
	}
	line := g.held[:n]
	if edit != nil && !g.cut {
		line = edit(line)
	}
	_, err := g.w.Write(line)
	g.held = append(g.held[:0], g.held[n:]...)
	g.cut = false
	return err
}
