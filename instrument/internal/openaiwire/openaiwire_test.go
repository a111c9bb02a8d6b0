package openaiwire

import (
	"testing"

	"github.com/agentledger/agentledger/instrument/internal/genaicall"
)

// The smallest Responses stream a client such as Codex accepts: one
// response.output_item.done per item, then response.completed with only id
// and usage. The tool calls come from the items, the usage from the end.
func TestResponsesMinimalStream(t *testing.T) {
	p := Responses.Describe([]byte(`{"model":"gpt-5.5","stream":true,"input":[]}`)).Parser
	var r genaicall.Result
	for _, ev := range []string{
		`{"type":"response.output_item.done","item":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"hi"}]}}`,
		`{"type":"response.output_item.done","item":{"type":"function_call","call_id":"call_1","name":"exec_command","arguments":"{}"}}`,
		`{"type":"response.output_item.done","item":{"type":"function_call","call_id":"call_1","name":"exec_command","arguments":"{}"}}`,
	} {
		if _, terminal := p.ParseEvent([]byte(ev), &r, false); terminal {
			t.Fatal("terminal before response.completed")
		}
	}
	_, terminal := p.ParseEvent([]byte(`{"type":"response.completed","response":{"id":"resp_1","usage":{"input_tokens":10,"output_tokens":3,"input_tokens_details":{"cached_tokens":4}}}}`), &r, false)
	if !terminal {
		t.Fatal("response.completed is terminal")
	}
	if len(r.ToolCalls) != 1 || r.ToolCalls[0] != "exec_command:call_1" {
		t.Errorf("tool calls %v", r.ToolCalls)
	}
	if r.ID != "resp_1" || r.Usage.Input == nil || *r.Usage.Input != 10 || *r.Usage.Output != 3 || *r.Usage.CacheRead != 4 {
		t.Errorf("result %+v", r)
	}
}

// A full response.completed (with output) is the list of record.
func TestResponsesCompletedWithOutput(t *testing.T) {
	p := Responses.Describe([]byte(`{"stream":true}`)).Parser
	var r genaicall.Result
	p.ParseEvent([]byte(`{"type":"response.output_item.done","item":{"type":"function_call","call_id":"a","name":"x"}}`), &r, false)
	p.ParseEvent([]byte(`{"type":"response.completed","response":{"id":"r","output":[{"type":"function_call","call_id":"a","name":"x"},{"type":"function_call","call_id":"b","name":"y"}],"usage":{"input_tokens":1,"output_tokens":1}}}`), &r, false)
	if len(r.ToolCalls) != 2 || r.ToolCalls[0] != "x:a" || r.ToolCalls[1] != "y:b" {
		t.Errorf("tool calls %v", r.ToolCalls)
	}
}
