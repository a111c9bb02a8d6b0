package genaicall

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"
)

// chunkReader returns at most a random small number of bytes per Read, so
// events and lines are split at every possible place.
type chunkReader struct {
	r   io.Reader
	rnd *rand.Rand
}

func (c *chunkReader) Read(p []byte) (int, error) {
	n := 1 + c.rnd.IntN(7)
	if n > len(p) {
		n = len(p)
	}
	return c.r.Read(p[:n])
}

// The caller reads exactly the upstream bytes minus the dropped events,
// however the upstream splits them, and every event's data is seen once.
func TestSSEBodyPassThrough(t *testing.T) {
	events := []string{
		"data: {\"a\":1}\n\n",
		": keep-alive comment\n\n",
		"event: message_start\ndata: {\"type\":\"message_start\"}\n\n",
		"data: {\"drop\":true}\n\n",
		"data: line one\ndata: line two\n\n",
		"data: {\"crlf\":true}\r\n\r\n",
		"data: [DONE]\n\n",
	}
	upstream := strings.Join(events, "")
	var want strings.Builder
	for _, e := range events {
		if !strings.Contains(e, "drop") {
			want.WriteString(e)
		}
	}
	for seed := range uint64(50) {
		var seen []string
		var ends []string
		rnd := rand.New(rand.NewPCG(seed, 1))
		var src io.Reader = &chunkReader{r: strings.NewReader(upstream), rnd: rnd}
		if seed == 0 {
			src = iotest.OneByteReader(strings.NewReader(upstream))
		}
		b := newSSEBody(io.NopCloser(src), func(data []byte) (bool, bool) {
			seen = append(seen, string(data))
			return !bytes.Contains(data, []byte("drop")), bytes.Equal(data, []byte("[DONE]"))
		}, func(err error, early bool) {
			ends = append(ends, fmt.Sprint(err, early))
		})
		got, err := io.ReadAll(&chunkReader{r: b, rnd: rnd})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want.String() {
			t.Fatalf("seed %d: got %q\nwant %q", seed, got, want.String())
		}
		wantSeen := `[{"a":1} {"type":"message_start"} {"drop":true} line one` + "\n" + `line two {"crlf":true} [DONE]]`
		if fmt.Sprint(seen) != wantSeen {
			t.Fatalf("seed %d: events %q", seed, seen)
		}
		_ = b.Close()
		if fmt.Sprint(ends) != "[<nil> false]" {
			t.Fatalf("seed %d: ends %v", seed, ends)
		}
	}
}

// Closing before the terminal event ends the stream once, early; a read
// error ends it once with the error.
func TestSSEBodyEarlyAndError(t *testing.T) {
	var ends []string
	done := func(err error, early bool) { ends = append(ends, fmt.Sprint(err, early)) }
	b := newSSEBody(io.NopCloser(strings.NewReader("data: 1\n\ndata: 2\n\n")), func([]byte) (bool, bool) { return true, false }, done)
	buf := make([]byte, 4)
	_, _ = b.Read(buf)
	_ = b.Close()
	_ = b.Close()
	boom := errors.New("boom")
	b = newSSEBody(io.NopCloser(io.MultiReader(strings.NewReader("data: 1\n\n"), iotest.ErrReader(boom))), func([]byte) (bool, bool) { return true, false }, done)
	if _, err := io.ReadAll(b); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	_ = b.Close()
	if fmt.Sprint(ends) != "[<nil> true boom false]" {
		t.Fatalf("ends = %v", ends)
	}
}

// A long line (beyond the reader's buffer) is passed through whole.
func TestSSEBodyLongLine(t *testing.T) {
	long := "data: " + strings.Repeat("x", 100<<10) + "\n\n"
	var n int
	b := newSSEBody(io.NopCloser(strings.NewReader(long)), func(d []byte) (bool, bool) { n = len(d); return true, false }, func(error, bool) {})
	got, err := io.ReadAll(b)
	if err != nil || string(got) != long || n != 100<<10 {
		t.Fatalf("err %v, len %d, data %d", err, len(got), n)
	}
}
