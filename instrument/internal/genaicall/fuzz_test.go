package genaicall

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"

	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// scriptedStreams returns real-shaped event streams: what the scripted
// model sends for streamed chat completions, Responses and Anthropic
// messages, with and without usage.
func scriptedStreams(tb testing.TB) [][]byte {
	tb.Helper()
	srv := genaitest.BenchServer("call_f", "shell", `{"cmd":"ls"}`)
	defer srv.Close()
	bare := scriptedmodel.New(scriptedmodel.Options{Responder: func(scriptedmodel.Request) scriptedmodel.Step {
		return scriptedmodel.Step{Text: "no usage here", OmitUsage: true}
	}}).Start()
	defer bare.Close()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	var out [][]byte
	for _, base := range []string{srv.URL(), bare.URL()} {
		for _, r := range []struct{ path, body string }{
			{"/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`},
			{"/v1/responses", `{"model":"m","stream":true,"input":"hi"}`},
			{"/v1/messages", `{"model":"m","stream":true,"max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`},
		} {
			res, err := client.Post(base+r.path, "application/json", strings.NewReader(r.body))
			if err != nil {
				tb.Fatal(err)
			}
			b, err := io.ReadAll(res.Body)
			_ = res.Body.Close()
			if err != nil {
				tb.Fatal(err)
			}
			out = append(out, b)
		}
	}
	return out
}

// oracleEvents splits an event stream the way the SSE framing does,
// written independently of sseBody: an event is every line up to and
// including a blank one; what is left at the end is the last event. data
// joins the event's data lines.
func oracleEvents(body []byte) (raw, data [][]byte) {
	var cur []byte
	flush := func() {
		var lines [][]byte
		for _, l := range bytes.Split(cur, []byte("\n")) {
			if rest, ok := bytes.CutPrefix(bytes.TrimRight(l, "\r"), []byte("data:")); ok {
				lines = append(lines, bytes.TrimPrefix(rest, []byte(" ")))
			}
		}
		raw = append(raw, cur)
		data = append(data, bytes.Join(lines, []byte("\n")))
		cur = nil
	}
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line = body[:i+1]
		}
		body = body[len(line):]
		cur = append(cur, line...)
		if line[len(line)-1] == '\n' && len(bytes.TrimRight(line, "\r\n")) == 0 {
			flush()
		}
	}
	if len(cur) > 0 {
		flush()
	}
	return raw, data
}

// The caller of an sseBody reads exactly the upstream bytes minus the
// dropped events, however they are split; every event before the terminal
// one is shown once with its data; done is called exactly once, early only
// when the caller closed before the stream's end.
func FuzzSSEBody(f *testing.F) {
	for i, s := range scriptedStreams(f) {
		f.Add(s, uint64(i), uint16(0))
		f.Add(s, uint64(i), uint16(len(s)/2))
	}
	f.Add([]byte("data: {\"a\":1}\n\n: comment\n\ndata: {\"drop\":1}\n\ndata: one\r\ndata: two\r\n\r\ndata: [DONE]\n\ndata: after\n\n"), uint64(7), uint16(0))
	f.Add([]byte("event: x\ndata:no-space\n\n\n\ndata: \n\ndata: tail-without-newline"), uint64(1), uint16(3))
	f.Add([]byte("data: "+strings.Repeat("x", 16384-len("data: "))+"\ndata: y\n\n"), uint64(2), uint16(0))
	f.Fuzz(func(t *testing.T, body []byte, seed uint64, cut uint16) {
		raw, datas := oracleEvents(body)
		var want []byte
		var wantSeen []string
		terminated := false
		for i, ev := range raw {
			d := datas[i]
			keep := true
			if len(d) > 0 && !terminated {
				wantSeen = append(wantSeen, string(d))
				keep = !bytes.Contains(d, []byte("drop"))
				terminated = string(d) == "[DONE]"
			}
			if keep {
				want = append(want, ev...)
			}
		}

		var seen []string
		var ends []string
		rnd := rand.New(rand.NewPCG(seed, 2))
		b := newSSEBody(io.NopCloser(&chunkReader{r: bytes.NewReader(body), rnd: rnd}), func(data []byte) (bool, bool) {
			seen = append(seen, string(data))
			return !bytes.Contains(data, []byte("drop")), string(data) == "[DONE]"
		}, func(err error, early bool) {
			ends = append(ends, fmt.Sprint(err, early))
		})

		var got []byte
		buf := make([]byte, 1+rnd.IntN(64))
		eof := false
		for cut == 0 || len(got) < int(cut) {
			n, err := b.Read(buf)
			got = append(got, buf[:n]...)
			if err == io.EOF {
				eof = true
				break
			}
			if err != nil {
				t.Fatalf("read: %v", err)
			}
		}
		before := len(ends)
		_ = b.Close()
		_ = b.Close()

		if len(ends) != 1 {
			t.Fatalf("done called %d times: %v", len(ends), ends)
		}
		if eof {
			if !bytes.Equal(got, want) {
				t.Fatalf("caller read %s\nwant %s", short(got), short(want))
			}
			if strings.Join(seen, "\x00") != strings.Join(wantSeen, "\x00") {
				t.Fatalf("events seen %s\nwant %s", short(seen), short(wantSeen))
			}
			if ends[0] != "<nil> false" {
				t.Fatalf("done(%s) after EOF", ends[0])
			}
			return
		}
		if !bytes.HasPrefix(want, got) {
			t.Fatalf("caller read %s, not a prefix of %s", short(got), short(want))
		}
		for i, s := range seen {
			if i >= len(wantSeen) || s != wantSeen[i] {
				t.Fatalf("events seen %s, not a prefix of %s", short(seen), short(wantSeen))
			}
		}
		switch {
		case terminatedIn(seen) && before == 0:
			t.Fatalf("terminal event seen, done not called before Close")
		case before == 1 && ends[0] != "<nil> false":
			t.Fatalf("done(%s) before Close", ends[0])
		case before == 0 && ends[0] != "<nil> true":
			t.Fatalf("done(%s) on Close before the end", ends[0])
		}
	})
}

// terminatedIn reports whether seen holds the terminal event.
func terminatedIn(seen []string) bool {
	for _, s := range seen {
		if s == "[DONE]" {
			return true
		}
	}
	return false
}

// short prints v quoted, cut to a readable length.
func short(v any) string {
	s := fmt.Sprintf("%q", v)
	if len(s) > 400 {
		s = s[:200] + fmt.Sprintf("...(%d bytes)...", len(s)-400) + s[len(s)-200:]
	}
	return s
}

// Regression (found by FuzzSSEBody's long-line seed): a line that fills the
// reader's buffer exactly came in two pieces, and its last piece, the bare
// newline, was taken for the blank line that ends an event, splitting a
// multi-line event in two.
func TestSSEBodyLineAtBufferBoundary(t *testing.T) {
	for _, eol := range []string{"\n", "\r\n"} {
		long := "data: " + strings.Repeat("x", 16<<10-len("data: "))
		body := long + eol + "data: y" + eol + eol
		var seen []string
		b := newSSEBody(io.NopCloser(strings.NewReader(body)), func(d []byte) (bool, bool) {
			seen = append(seen, string(d))
			return true, false
		}, func(error, bool) {})
		got, err := io.ReadAll(b)
		if err != nil || string(got) != body {
			t.Fatalf("eol %q: err %v, passed through %d of %d bytes", eol, err, len(got), len(body))
		}
		want := strings.Repeat("x", 16<<10-len("data: ")) + "\ny"
		if len(seen) != 1 || seen[0] != want {
			t.Fatalf("eol %q: %d events (first %d bytes), want one of %d bytes", eol, len(seen), len(seen[0]), len(want))
		}
	}
}

// Regression (found by the wrappers' fuzz targets): a negative count in a
// response was recorded as usage on the span and in the token histogram.
// It is not a token count, so it is dropped; the valid counts stay.
func TestEndDropsNegativeUsage(t *testing.T) {
	h := newHarness(false)
	res, err := h.attempt(context.Background(), `{"model":"m"}`, -1, response(200, "application/json", `{"in":-3,"out":2}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(res.Body); err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	a := genaitest.Attrs(genaitest.Only(t, h.rec))
	genaitest.WantAbsent(t, a, "gen_ai.usage.input_tokens")
	genaitest.WantInt(t, a, "gen_ai.usage.output_tokens", 2)
}
