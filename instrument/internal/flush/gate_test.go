package flush

import (
	"bufio"
	"bytes"
	"io"
	"strings"
	"testing"
)

// readAll reads src line by line through a Gate as an adapter's read loop
// does, checking at each line that the host has got only the lines before
// it, and editing the lines that start with "edit".
func readAll(t *testing.T, src string, bufSize int) string {
	t.Helper()
	var host bytes.Buffer
	g := NewGate(&host)
	r := bufio.NewReaderSize(io.TeeReader(iotestHalf(strings.NewReader(src)), g), bufSize)
	var lines []string
	for {
		line, err := r.ReadString('\n')
		if line != "" {
			if got := host.String(); !strings.HasPrefix(strings.Join(lines, ""), got) && len(line) <= maxHeld {
				t.Fatalf("before %q was released the host had %q", line, got)
			}
			if strings.Contains(host.String(), line) && len(line) > 64 && len(line) <= maxHeld {
				t.Fatalf("the host had %q before its release", line)
			}
			var edit func([]byte) []byte
			if strings.HasPrefix(line, "edit") {
				edit = func(b []byte) []byte { return append([]byte("EDITED "), b...) }
				line = "EDITED " + line
			}
			lines = append(lines, line)
			if err := g.Release(r.Buffered(), edit); err != nil {
				t.Fatal(err)
			}
		}
		if err != nil {
			break
		}
	}
	if host.String() != strings.Join(lines, "") {
		t.Fatalf("the host got %d bytes, want %d", host.Len(), len(strings.Join(lines, "")))
	}
	if len(g.held) > maxHeld+bufSize {
		t.Fatalf("held %d bytes", len(g.held))
	}
	return host.String()
}

// iotestHalf returns a reader that reads at most 7 bytes at a time, so
// that lines straddle the reader's fills.
func iotestHalf(r io.Reader) io.Reader { return smallReader{r} }

type smallReader struct{ r io.Reader }

func (s smallReader) Read(b []byte) (int, error) {
	if len(b) > 7 {
		b = b[:7]
	}
	return s.r.Read(b)
}

func TestGatePassesLinesWholeAfterRelease(t *testing.T) {
	src := "first line\nedit this one\n" + strings.Repeat("long ", 100) + "\nno newline at the end"
	got := readAll(t, src, 16)
	want := strings.Replace(src, "edit this one", "EDITED edit this one", 1)
	if got != want {
		t.Fatalf("host got %q, want %q", got, want)
	}
}

func TestGateBoundsALineTooLongToHold(t *testing.T) {
	long := "edit" + strings.Repeat("x", 3*maxHeld) + "\n"
	var host bytes.Buffer
	g := NewGate(&host)
	r := bufio.NewReaderSize(io.TeeReader(strings.NewReader(long+"after\n"), g), 4096)
	var read int
	for read < len(long) {
		chunk, err := r.ReadSlice('\n')
		read += len(chunk)
		if err != nil && err != bufio.ErrBufferFull {
			t.Fatal(err)
		}
		if len(g.held) > maxHeld+4096 {
			t.Fatalf("held %d bytes of a line", len(g.held))
		}
	}
	edited := false
	if err := g.Release(r.Buffered(), func(b []byte) []byte { edited = true; return b }); err != nil {
		t.Fatal(err)
	}
	if edited || host.String() != long {
		t.Fatalf("edited %v, host got %d bytes, want the %d of the line unchanged", edited, host.Len(), len(long))
	}
}

// FuzzGate checks the Gate's invariant under any input, read size and
// buffer size: the host gets every line, edited or dropped as the read
// loop says, whole and in order, and nothing of a line before the
// loop released the one before it.
func FuzzGate(f *testing.F) {
	f.Add([]byte("a\nb\n\nc"), uint8(3), uint16(16))
	f.Add([]byte("drop me\nedit me\nkeep"), uint8(1), uint16(16))
	f.Add([]byte(strings.Repeat("x", 5000)+"\nedit\n"), uint8(200), uint16(64))
	f.Fuzz(func(t *testing.T, src []byte, readSize uint8, bufSize uint16) {
		if readSize == 0 {
			readSize = 1
		}
		if len(src) > maxHeld {
			return // lines past maxHeld are TestGateBoundsALineTooLongToHold's
		}
		size := int(bufSize)%4096 + 16
		var host bytes.Buffer
		g := NewGate(&host)
		r := bufio.NewReaderSize(io.TeeReader(&chunkReader{b: src, n: int(readSize)}, g), size)
		var want bytes.Buffer
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 {
				if !bytes.Equal(host.Bytes(), want.Bytes()) {
					t.Fatalf("before line %q was released the host had %q, want %q", line, host.Bytes(), want.Bytes())
				}
				var edit func([]byte) []byte
				switch {
				case bytes.HasPrefix(line, []byte("drop")):
					edit = func([]byte) []byte { return nil }
				case bytes.HasPrefix(line, []byte("edit")):
					edit = func(b []byte) []byte { return append([]byte("E"), b...) }
					want.WriteString("E")
					want.Write(line)
				default:
					want.Write(line)
				}
				if err := g.Release(r.Buffered(), edit); err != nil {
					t.Fatal(err)
				}
			}
			if err != nil {
				break
			}
		}
		if !bytes.Equal(host.Bytes(), want.Bytes()) {
			t.Fatalf("the host got %q, want %q", host.Bytes(), want.Bytes())
		}
	})
}

// chunkReader reads n bytes at a time.
type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := min(c.n, len(p), len(c.b))
	copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}
