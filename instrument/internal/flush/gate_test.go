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
