package otelclaudecode

import (
	"bufio"
	"errors"
	"io"
	"strings"
	"testing"
)

// TestReadLine: lines longer than the reader's buffer are whole, a line
// beyond the bound is skipped and reported, and the last line needs no
// newline.
func TestReadLine(t *testing.T) {
	long := strings.Repeat("x", 100<<10)
	tooLong := strings.Repeat("y", 300<<10)
	in := "a\n" + long + "\n" + tooLong + "\n\nlast"
	r := bufio.NewReaderSize(strings.NewReader(in), 64<<10)
	var got []string
	var skipped int
	for {
		line, err := readLine(r, 200<<10)
		if errors.Is(err, errLineTooLong) {
			skipped++
			continue
		}
		if len(line) > 0 || err == nil {
			got = append(got, string(line))
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatal(err)
			}
			break
		}
	}
	if skipped != 1 || len(got) != 4 || got[0] != "a" || got[1] != long || got[2] != "" || got[3] != "last" {
		t.Errorf("skipped %d, lines %d: %q...", skipped, len(got), got[0])
	}
}

// TestDecodeEvent pins the decoding of the line kinds the mapping reads,
// on shapes copied from the recorded streams.
func TestDecodeEvent(t *testing.T) {
	cases := []struct {
		line  string
		check func(event) bool
	}{
		{`{"type":"system","subtype":"status","status":"requesting","user_message_uuids":["u1","u2"]}`,
			func(e event) bool { return e.Status == statusRequesting && len(e.UserMessageUUIDs) == 2 }},
		{`{"type":"system","subtype":"task_started","task_id":"b1","run_id":"r1","tool_use_id":"t1","is_backgrounded":true,"task_type":"local_bash"}`,
			func(e event) bool {
				return e.Task == task{ID: "b1", RunID: "r1", ToolUseID: "t1", Type: "local_bash", Backgrounded: true}
			}},
		{`{"type":"system","subtype":"task_updated","task_id":"b1","run_id":"r1","patch":{"status":"killed","end_time":1}}`,
			func(e event) bool { return e.Task.Status == "killed" }},
		{`{"type":"system","subtype":"task_updated","task_id":"b1","patch":{"status":"running"}}`,
			func(e event) bool { return e.Task.Status == "" }},
		{`{"type":"system","subtype":"task_notification","task_id":"b1","run_id":"r1","tool_use_id":"t1","status":"failed","summary":"s"}`,
			func(e event) bool { return e.Task.Status == "failed" && e.Status == "" }},
		{`{"type":"stream_event","event":{"type":"message_start","message":{"id":"m","model":"x","usage":{"input_tokens":5,"cache_read_input_tokens":2,"output_tokens":1}}}}`,
			func(e event) bool { return e.Stream.Type == "message_start" && e.Stream.MessageID == "m" }},
		{`{"type":"stream_event","event":{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":9,"output_tokens_details":{"thinking_tokens":1}}}}`,
			func(e event) bool { return e.Stream.Type == "message_delta" && e.Stream.MessageID == "" }},
		{`{"type":"user","isReplay":true,"origin":{"kind":"task-notification","runId":"r1"},"message":{"role":"user","content":"<task-notification>"}}`,
			func(e event) bool {
				return e.IsReplay && e.Origin == origin{Kind: originTask, RunID: "r1"} && len(e.Blocks) == 0
			}},
		{`{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","is_error":true}]}}`,
			func(e event) bool { return len(e.Blocks) == 1 && e.Blocks[0].ToolUseID == "t1" && e.Blocks[0].IsError }},
		{`{"type":"result","subtype":"success","result":"ok","user_message_uuid":"u1","user_message_uuids":null,"origin":{"kind":"task-notification","runId":"r"},"model_usage_since_last_result":{"a":{"inputTokens":3,"outputTokens":4,"cacheReadInputTokens":1,"cacheCreationInputTokens":2},"b":{"inputTokens":1}}}`,
			func(e event) bool {
				r := e.Result
				return r.Text == "ok" && len(r.UserUUIDs) == 1 && e.Origin.RunID == "r" &&
					*r.SinceLast == rawUsage{Input: 4, Output: 4, CacheRead: 1, CacheCreation: 2}
			}},
		{`{"type":"result","model_usage_since_last_result":{"a":{"inputTokens":-3}}}`,
			func(e event) bool { return e.Result.SinceLast == nil }},
	}
	for _, c := range cases {
		ev, err := decodeEvent([]byte(c.line))
		if err != nil || !c.check(ev) {
			t.Errorf("%s: %+v %v", c.line, ev, err)
		}
	}
	for _, bad := range []string{``, `[]`, `{"type":""}`, `{"type":1}`, `{"type":"stream_event","event":"x"}`, `not json`} {
		if _, err := decodeEvent([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
