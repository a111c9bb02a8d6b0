package otelcodex

import (
	"encoding/json"
	"net/http"
	"os"
	"testing"
)

// loadRequest reads testdata/request.json: a real request of Codex 0.169.0
// (texts and tools trimmed) of a turn whose model polled a background
// command that had exited (write_stdin).
func loadRequest(t testing.TB) (http.Header, []byte) {
	t.Helper()
	raw, err := os.ReadFile("testdata/request.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Header http.Header     `json:"header"`
		Body   json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	return f.Header, f.Body
}

func TestReadEvidenceRecorded(t *testing.T) {
	h, body := loadRequest(t)
	ev := readEvidence(h, body)
	if !ev.parsed || ev.turnID == "" || ev.turnID != ev.bodyTurnID || ev.threadID == "" {
		t.Fatalf("evidence %+v", ev)
	}
	// Only the result after the last model item is new: write_stdin's,
	// not the exec_command result earlier in the history.
	if len(ev.outputs) != 1 {
		t.Fatalf("outputs %+v", ev.outputs)
	}
	o := ev.outputs[0]
	if o.callID != "call_6_0" || o.name != "write_stdin" {
		t.Errorf("output %+v", o)
	}
	if sid, ok := stdinSession(o.args); !ok || sid != "71640" {
		t.Errorf("session %q %v", sid, ok)
	}
	if st := readProcessState(o.output); !st.exited || st.code != 0 || st.running {
		t.Errorf("state %+v", st)
	}
}

func TestReadEvidence(t *testing.T) {
	meta := func(turn string) http.Header {
		h := http.Header{}
		h.Set(headerTurnMetadata, `{"thread_id":"th","turn_id":"`+turn+`"}`)
		return h
	}
	for _, tc := range []struct {
		name          string
		h             http.Header
		body          string
		turn, bodyTID string
		outputs       []toolOutput
		parsed        bool
	}{
		{"plain prompt", meta("t1"), `{"client_metadata":{"turn_id":"t1"},"input":"hi"}`, "t1", "t1", nil, true},
		{"no header", http.Header{}, `{"input":[]}`, "", "", nil, true},
		{"bad header", http.Header{headerTurnMetadata: {"{"}}, `{"input":[]}`, "", "", nil, true},
		{"not json", meta("t1"), `{`, "t1", "", nil, false},
		{"result after the call", meta("t1"), `{"input":[
			{"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]},
			{"type":"function_call","call_id":"c1","name":"exec_command","arguments":"{\"cmd\":\"ls\"}"},
			{"type":"function_call_output","call_id":"c1","output":"Process exited with code 0\nOutput:\nx"}]}`,
			"t1", "", []toolOutput{{callID: "c1", name: "exec_command", args: `{"cmd":"ls"}`, output: "Process exited with code 0\nOutput:\nx"}}, true},
		{"old results are not new", meta("t1"), `{"input":[
			{"type":"function_call","call_id":"c1","name":"exec_command","arguments":"{}"},
			{"type":"function_call_output","call_id":"c1","output":"x"},
			{"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]},
			{"type":"message","role":"user","content":[{"type":"input_text","text":"next"}]}]}`,
			"t1", "", nil, true},
		{"custom tool, content parts", meta("t1"), `{"input":[
			{"type":"custom_tool_call","call_id":"p1","name":"apply_patch","input":"*** Begin Patch"},
			{"type":"custom_tool_call_output","call_id":"p1","output":[{"type":"input_text","text":"ok"}]}]}`,
			"t1", "", []toolOutput{{callID: "p1", name: "apply_patch", args: "*** Begin Patch", output: "ok"}}, true},
		{"result without its call", meta("t1"), `{"input":[{"type":"function_call_output","call_id":"c9","output":"x"}]}`,
			"t1", "", []toolOutput{{callID: "c9", output: "x"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := readEvidence(tc.h, []byte(tc.body))
			if ev.turnID != tc.turn || ev.bodyTurnID != tc.bodyTID || ev.parsed != tc.parsed || len(ev.outputs) != len(tc.outputs) {
				t.Fatalf("evidence %+v", ev)
			}
			for i := range tc.outputs {
				if ev.outputs[i] != tc.outputs[i] {
					t.Errorf("output %d: %+v, want %+v", i, ev.outputs[i], tc.outputs[i])
				}
			}
		})
	}
}

func TestReadProcessState(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want processState
	}{
		{"Chunk ID: a\nWall time: 0.25 seconds\nProcess running with session ID 57601\nOriginal token count: 0\nOutput:\n", processState{running: true, session: "57601"}},
		{"Chunk ID: a\nProcess exited with code 3\nOutput:\nboom\n", processState{exited: true, code: 3}},
		{"Process exited with code -1\nOutput:\n", processState{exited: true, code: -1}},
		// What the command prints is never read as the header.
		{"Process exited with code 0\nOutput:\nProcess running with session ID 99\n", processState{exited: true}},
		{"Chunk ID: a\nOutput:\nProcess running with session ID 99\nProcess exited with code 1\n", processState{}},
		{"write_stdin failed: Unknown process id 1", processState{}},
		{"Process running with session ID 12x\nOutput:\n", processState{}},
	} {
		if got := readProcessState(tc.out); got != tc.want {
			t.Errorf("%q: %+v, want %+v", tc.out, got, tc.want)
		}
	}
}

func TestStdinSession(t *testing.T) {
	for _, tc := range []struct {
		args string
		want string
		ok   bool
	}{
		{`{"session_id":71640,"chars":""}`, "71640", true},
		{`{"session_id":"71640"}`, "71640", true},
		{`{"session_id":-1}`, "", false},
		{`{"session_id":1.5}`, "", false},
		{`{"chars":"x"}`, "", false},
		{`not json`, "", false},
	} {
		got, ok := stdinSession(tc.args)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: %q %v", tc.args, got, ok)
		}
	}
}
