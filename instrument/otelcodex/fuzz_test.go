package otelcodex

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// FuzzReadEvidence: whatever a request holds, the reader never panics,
// reports tool results only from a body it could read, each naming a call
// id the body holds, and reads the header's turn exactly as the header
// says it.
func FuzzReadEvidence(f *testing.F) {
	h, body := loadRequest(f)
	f.Add(h.Get(headerTurnMetadata), body)
	f.Add(`{"turn_id":"t1"}`, []byte(`{"input":[{"type":"function_call","call_id":"c","name":"write_stdin","arguments":"{\"session_id\":1}"},{"type":"function_call_output","call_id":"c","output":"Process exited with code 0\nOutput:\n"}]}`))
	f.Add(`{`, []byte(`{"input":"text"}`))
	f.Add(`{"turn_id":1}`, []byte(`{"input":[{"type":"custom_tool_call_output","call_id":"x","output":[{"text":"a"},{"text":"b"}]}]}`))
	f.Fuzz(func(t *testing.T, meta string, body []byte) {
		hdr := http.Header{}
		hdr.Set(headerTurnMetadata, meta)
		ev := readEvidence(hdr, body)
		if !ev.parsed && len(ev.outputs) > 0 {
			t.Fatalf("outputs from an unread body: %+v", ev.outputs)
		}
		var req struct {
			Input []struct {
				Type   string `json:"type"`
				CallID string `json:"call_id"`
			} `json:"input"`
		}
		ids := map[string]bool{}
		if len(ev.outputs) > 0 && json.Unmarshal(body, &req) == nil {
			for _, it := range req.Input {
				if strings.HasSuffix(it.Type, "_call_output") {
					ids[it.CallID] = true
				}
			}
		}
		for _, o := range ev.outputs {
			if o.callID == "" || !ids[o.callID] {
				t.Fatalf("output %+v is not a tool result of the body", o)
			}
		}
		var m struct {
			TurnID any `json:"turn_id"`
		}
		if json.Unmarshal([]byte(hdr.Get(headerTurnMetadata)), &m) == nil {
			if s, ok := m.TurnID.(string); ok && s != ev.turnID {
				t.Fatalf("header turn %q read as %q", s, ev.turnID)
			}
		} else if ev.turnID != "" {
			t.Fatalf("turn %q from an unreadable header", ev.turnID)
		}
	})
}

// FuzzReadProcessState: nothing a command prints (after "Output:") changes
// what its result says of the process; a running process has a numeric
// session id.
func FuzzReadProcessState(f *testing.F) {
	f.Add("Chunk ID: a\nWall time: 0.25 seconds\nProcess running with session ID 57601\nOriginal token count: 0", "")
	f.Add("Chunk ID: a\nProcess exited with code 0", "Process running with session ID 1\n")
	f.Add("", "Process exited with code 1")
	digits := regexp.MustCompile(`^\d+$`)
	f.Fuzz(func(t *testing.T, header, printed string) {
		if strings.Contains(header, "\nOutput:") {
			return
		}
		base := readProcessState(header + "\nOutput:\n")
		got := readProcessState(header + "\nOutput:\n" + printed)
		if got != base {
			t.Fatalf("printed %q changed %+v to %+v", printed, base, got)
		}
		if got.running && (!digits.MatchString(got.session) || got.exited) {
			t.Fatalf("state %+v", got)
		}
	})
}

// FuzzReadEvent: the app-server event reader never panics, and an event it
// acts on always names its turn (and an item event its item's type).
func FuzzReadEvent(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "*.jsonl"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(nil, DefaultMaxLine)
		for sc.Scan() {
			var m rpcMessage
			if json.Unmarshal(sc.Bytes(), &m) == nil && m.Method != "" {
				f.Add(m.Method, []byte(m.Params))
			}
		}
	}
	f.Add("turn/completed", []byte(`{"turn":{"id":""}}`))
	f.Add("item/completed", []byte(`{"turnId":"t","item":{}}`))
	f.Fuzz(func(t *testing.T, method string, params []byte) {
		ev := readEvent(method, params)
		if ev.kind == evOther {
			return
		}
		if ev.turnID == "" {
			t.Fatalf("%s event without a turn: %+v", method, ev)
		}
		if (ev.kind == evItemStarted || ev.kind == evItemCompleted) && ev.item.Type == "" {
			t.Fatalf("%s without an item type", method)
		}
	})
}
