package otelclaudecode

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"unicode/utf8"
)

// nopWriteCloser collects what feed passes on.
type nopWriteCloser struct{ bytes.Buffer }

func (*nopWriteCloser) Close() error { return nil }

// FuzzFeed checks the drop-in's input invariant: whatever the host writes
// reaches the CLI byte for byte, in order, however it is split into
// lines; and each line that decodes as a prompt registered exactly one
// invocation, its uuid the invocation id when given.
func FuzzFeed(f *testing.F) {
	f.Add([]byte(`{"type":"user","uuid":"u-1","message":{"role":"user","content":[{"type":"text","text":"hi"}]},"parent_tool_use_id":null}`+"\n"+`{"type":"control_request"}`), 16)
	f.Add([]byte(`{"type":"user","message":{"role":"user","content":"a"}}`+"\n"+`{"type":"user","message":{"role":"user","content":"b"}}`+"\n"), 1<<20)
	f.Add([]byte("\x00\xff\n\n{\"type\":\"user\""), 4)
	f.Fuzz(func(t *testing.T, input []byte, maxLine int) {
		if maxLine < 1 || maxLine > 1<<20 {
			maxLine = 1 << 20
		}
		pl := newPipeline(t, nil)
		c := &Client{cfg: config{maxLine: maxLine}}
		p := &Process{c: c, m: pl.mapper("")}
		var out nopWriteCloser
		p.feed(context.Background(), bytes.NewReader(input), &out)
		// Byte for byte, but for the uuid given to a prompt without one.
		named := map[string]bool{}
		ins, outs := strings.SplitAfter(string(input), "\n"), strings.SplitAfter(out.String(), "\n")
		if len(ins) != len(outs) {
			t.Fatalf("passed on %q, want %q", out.Bytes(), input)
		}
		for i, in := range ins {
			if outs[i] == in {
				continue
			}
			id, rest, ok := cutGivenUUID(outs[i])
			if !ok || rest != in {
				t.Fatalf("passed on %q for %q", outs[i], in)
			}
			var keys map[string]json.RawMessage
			_, _, isPrompt := decodeInput([]byte(in))
			if err := json.Unmarshal([]byte(in), &keys); !isPrompt || err != nil || keys["uuid"] != nil {
				t.Fatalf("named %q, which is no prompt without a uuid", in)
			}
			named[id] = true
		}
		want := map[string]bool{}
		unnamed := 0
		for _, line := range strings.SplitAfter(string(input), "\n") {
			if len(line) > maxLine {
				continue
			}
			if uuid, _, ok := decodeInput([]byte(line)); ok {
				if uuid == "" || want[uuid] {
					unnamed++
				} else {
					want[uuid] = true
				}
			}
		}
		p.m.mu.Lock()
		defer p.m.mu.Unlock()
		if got := len(p.m.prompts); got > len(want)+unnamed {
			t.Fatalf("%d prompts registered, want at most %d", got, len(want)+unnamed)
		}
		for uuid := range named {
			if pr, ok := p.m.prompts[uuid]; !ok || pr.inv.ID() != uuid {
				t.Fatalf("named prompt %q: registered %v", uuid, ok)
			}
		}
		for uuid := range want {
			pr, ok := p.m.prompts[uuid]
			if !ok || pr.inv.ID() != uuid {
				t.Fatalf("prompt %q: registered %v", uuid, ok)
			}
		}
	})
}

// FuzzDecodeInput checks that a line decodes as a prompt only when it is
// a user message with no parent tool use, and that the text is its
// string content or one of its text blocks.
func FuzzDecodeInput(f *testing.F) {
	f.Add([]byte(`{"type":"user","uuid":"u","message":{"role":"user","content":"x"}}`))
	f.Add([]byte(`{"type":"user","message":{"role":"user","content":[{"type":"image"},{"type":"text","text":"t"}]},"parent_tool_use_id":"toolu_1"}`))
	f.Add([]byte(`{"type":"user","message":{"role":"assistant","content":[]}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		uuid, text, ok := decodeInput(line)
		if !ok {
			if uuid != "" || text != "" {
				t.Fatalf("not a prompt, but uuid %q text %q", uuid, text)
			}
			return
		}
		if !bytes.Contains(line, []byte(`"user"`)) {
			t.Fatalf("prompt from %q", line)
		}
		// Escapes and invalid UTF-8 (which decoding turns into U+FFFD)
		// change the text's bytes; otherwise it stands in the line as is.
		if text != "" && !strings.Contains(string(line), text) && !bytes.Contains(line, []byte(`\`)) && utf8.Valid(line) {
			t.Fatalf("text %q is not in %q", text, line)
		}
	})
}

var _ io.Writer = (*nopWriteCloser)(nil)

// cutGivenUUID undoes namePrompt: the line without the "uuid" key it put
// after the first '{', and that uuid.
func cutGivenUUID(line string) (id, rest string, ok bool) {
	i := strings.IndexByte(line, '{')
	if i < 0 || !strings.HasPrefix(line[i+1:], `"uuid":"`) {
		return "", "", false
	}
	after := line[i+1+len(`"uuid":"`):]
	if len(after) < 37 || after[36] != '"' {
		return "", "", false
	}
	id, after = after[:36], strings.TrimPrefix(after[37:], ",")
	return id, line[:i+1] + after, true
}
