package otelclaudecode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentledger/agentledger/contract"
)

// FuzzDecodeEvent checks the line decoder on arbitrary input: it never
// panics, is deterministic, accepts exactly the JSON objects with a string
// "type" (a stream_event also needs a decodable event), and what it
// returns is well formed.
func FuzzDecodeEvent(f *testing.F) {
	for _, fx := range fixtureFiles(f) {
		for _, l := range readFixture(f, fx.name) {
			f.Add(l)
		}
	}
	f.Add([]byte(`{"type":"result","user_message_uuid":"a","user_message_uuids":["a"],"model_usage_since_last_result":{"m":{"inputTokens":-1}}}`))
	f.Add([]byte(`{"type":"system","subtype":"task_updated","patch":{"status":"running","is_backgrounded":true}}`))
	f.Add([]byte(`{"type":"stream_event","event":{"type":"message_delta","usage":{"output_tokens":"x"}}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		ev, err := decodeEvent(line)
		again, err2 := decodeEvent(line)
		if (err == nil) != (err2 == nil) || !reflect.DeepEqual(ev, again) {
			t.Fatal("decoding is not deterministic")
		}
		// The oracle: an object whose "type" (matched as encoding/json
		// matches keys, without regard to case) is a non-empty string.
		var obj map[string]json.RawMessage
		var head struct {
			Type json.RawMessage `json:"type"`
		}
		var typ string
		trimmed := bytes.TrimSpace(line)
		isObj := json.Unmarshal(trimmed, &obj) == nil && obj != nil &&
			json.Unmarshal(trimmed, &head) == nil && json.Unmarshal(head.Type, &typ) == nil && typ != ""
		if err != nil {
			if isObj && typ != typeStreamEvent {
				t.Fatalf("an object with type %q was rejected", typ)
			}
			if !reflect.DeepEqual(ev, event{}) {
				t.Fatal("a rejected line returned an event")
			}
			return
		}
		if !isObj || ev.Type != typ {
			t.Fatalf("accepted %q as type %q", line, ev.Type)
		}
		switch ev.Type {
		case typeStreamEvent:
			if ev.Stream == nil || ev.Stream.Type == "" {
				t.Fatal("stream_event without its event")
			}
		case typeResult:
			if ev.Result == nil {
				t.Fatal("result without its fields")
			}
			seen := map[string]bool{}
			for _, u := range ev.Result.UserUUIDs {
				if seen[u] {
					t.Fatalf("uuid %q twice", u)
				}
				seen[u] = true
			}
			if s := ev.Result.SinceLast; s != nil && (s.Input < 0 || s.Output < 0 || s.CacheRead < 0 || s.CacheCreation < 0) {
				t.Fatalf("negative reported usage %+v", *s)
			}
		}
		if ev.Task.Status == "running" || ev.Task.Status == "pending" {
			t.Fatalf("non-terminal task status %q kept", ev.Task.Status)
		}
	})
}

// eventPool returns the distinct lines of every fixture that the mapping
// acts on (text deltas, pings and init lines left out) and the prompt
// uuids the recorded callers wrote.
func eventPool(tb testing.TB) (pool [][]byte, prompts []string) {
	seen := map[string]bool{}
	for _, fx := range fixtureFiles(tb) {
		for _, l := range readFixture(tb, fx.name) {
			if u := queued(l); u != "" {
				prompts = append(prompts, u)
			}
			ev, err := decodeEvent(l)
			if err != nil || seen[string(l)] || ev.Subtype == subInit ||
				(ev.Stream != nil && (ev.Stream.Type == "content_block_delta" || ev.Stream.Type == "ping")) {
				continue
			}
			seen[string(l)] = true
			pool = append(pool, l)
		}
	}
	return pool, prompts
}

// FuzzMapper feeds the mapper arbitrary sequences of real events (each
// pair of input bytes picks a line of the recorded streams), with every
// recorded prompt registered, then the process's exit, and checks the
// invariants that make a ledger exact: every span ends; every span
// belongs to an invocation that has a root, so no usage vanishes; every
// background job promises one followup and exactly one span discharges or
// closes it; every prompt gets its result or an error; and afterwards no
// invocation is left pending nor does the session owe work.
func FuzzMapper(f *testing.F) {
	pool, prompts := eventPool(f)
	index := map[string]int{}
	for i, l := range pool {
		index[string(l)] = i
	}
	for _, fx := range fixtureFiles(f) {
		var seed []byte
		for _, l := range readFixture(f, fx.name) {
			if i, ok := index[string(l)]; ok {
				seed = append(seed, byte(i>>8), byte(i))
			}
		}
		f.Add(seed, strings.HasPrefix(fx.name, "interrupted") || strings.HasPrefix(fx.name, "timed_out") || strings.HasPrefix(fx.name, "killed"))
	}
	f.Fuzz(func(t *testing.T, picks []byte, interrupted bool) {
		if len(picks) > 4000 {
			return
		}
		p := newPipeline(t, nil)
		m := p.mapper("fuzz-session")
		var registered []*prompt
		for _, u := range prompts {
			registered = append(registered, m.register(context.Background(), u, "prompt "+u))
		}
		for i := 0; i+1 < len(picks); i += 2 {
			ev, err := decodeEvent(pool[(int(picks[i])<<8|int(picks[i+1]))%len(pool)])
			if err != nil {
				t.Fatal(err)
			}
			m.handle(ev)
		}
		m.exit(interrupted)

		if s, e := len(p.rec.Started()), len(p.rec.Ended()); s != e {
			t.Fatalf("%d spans started, %d ended", s, e)
		}
		roots := map[string]bool{}
		for _, s := range p.spans("", "") {
			if attr(s, contract.AttrRole).AsString() == contract.RoleRoot {
				roots[attr(s, contract.AttrInvocationID).AsString()] = true
			}
		}
		for _, s := range p.spans("", "") {
			if id := attr(s, contract.AttrInvocationID).AsString(); id == "" || !roots[id] {
				t.Fatalf("span %s belongs to no invocation with a root (%q)", s.Name(), id)
			}
		}
		checkDischargedOnce(t, p)
		for _, pr := range registered {
			select {
			case <-pr.done:
			default:
				t.Fatalf("prompt %s has no result after exit", pr.uuid)
			}
		}
		for id := range roots {
			if sum, _ := p.ledger().Summary(id); sum.Status == contract.StatusPending {
				t.Fatalf("invocation %s pending after exit: %v", id, sum.Reasons)
			}
		}
		if st := p.ledger().Session("fuzz-session"); st.OwesWork {
			t.Fatalf("session owes work after exit: %+v", st)
		}
	})
}

// readFixture returns the lines of a recorded stream (testdata/README.md).
func readFixture(t testing.TB, name string) [][]byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var lines [][]byte
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 1<<20), DefaultMaxLine)
	for sc.Scan() {
		lines = append(lines, append([]byte(nil), sc.Bytes()...))
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

type fixture struct{ name string }

// fixtureFiles returns the recorded streams of testdata.
func fixtureFiles(t testing.TB) []fixture {
	t.Helper()
	names, err := filepath.Glob(filepath.Join("testdata", "*.jsonl"))
	if err != nil || len(names) == 0 {
		t.Fatalf("no recorded streams in testdata: %v", err)
	}
	var out []fixture
	for _, n := range names {
		out = append(out, fixture{filepath.Base(n)})
	}
	return out
}

// queued returns the uuid of a prompt the CLI says it read
// (command_lifecycle, state queued), else "".
func queued(line []byte) string {
	var c struct {
		Type  string `json:"type"`
		State string `json:"state"`
		UUID  string `json:"command_uuid"`
	}
	if json.Unmarshal(line, &c) != nil || c.Type != "command_lifecycle" || c.State != "queued" {
		return ""
	}
	return c.UUID
}
