package scriptedmodel

import (
	"encoding/json"
	"regexp"
	"strings"
)

// ExecCommandCall is a tool call of Codex's exec_command tool running cmd;
// a small yieldMS (Codex's yield_time_ms) leaves a longer command running
// in the background: its result is "Process running with session ID N".
// yieldMS 0 leaves yield_time_ms out (Codex's default).
func ExecCommandCall(cmd string, yieldMS int) ToolCall {
	in := map[string]any{"cmd": cmd}
	if yieldMS > 0 {
		in["yield_time_ms"] = yieldMS
	}
	b, _ := json.Marshal(in)
	return ToolCall{Name: "exec_command", Arguments: string(b)}
}

// WriteStdinCall is a tool call of Codex's write_stdin tool that polls the
// unified-exec session (writing nothing) for up to yieldMS: its result is
// the process's new output, and "Process exited with code C" once it has.
func WriteStdinCall(session string, yieldMS int) ToolCall {
	return ToolCall{Name: "write_stdin", Arguments: `{"session_id":` + session + `,"chars":"","yield_time_ms":` + itoa(yieldMS) + `}`}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// Item is one item of a Responses request's input, as far as scripts look
// at it.
type Item struct {
	// Type is "message", "function_call", "function_call_output", ...
	Type string
	// Role is a message's role.
	Role string
	// Text is a message's text, or a function_call_output's output.
	Text string
	// CallID, Name and Arguments are a function call's (CallID also of
	// its output).
	CallID, Name, Arguments string
}

// Items returns the input items of a Responses request, in order.
func (r Request) Items() []Item {
	raw, _ := r.Body["input"].([]any)
	out := make([]Item, 0, len(raw))
	for _, x := range raw {
		m, ok := x.(map[string]any)
		if !ok {
			continue
		}
		it := Item{}
		it.Type, _ = m["type"].(string)
		it.Role, _ = m["role"].(string)
		it.CallID, _ = m["call_id"].(string)
		it.Name, _ = m["name"].(string)
		it.Arguments, _ = m["arguments"].(string)
		if it.Type == "message" {
			it.Text = contentText(m["content"])
		} else if s, ok := m["output"].(string); ok {
			it.Text = s
		} else {
			it.Text = contentText(m["output"])
		}
		out = append(out, it)
	}
	return out
}

// NewItems returns the items after the last one a model response produced
// (an assistant message, a reasoning item, a tool call): what the request
// adds to the conversation (a prompt, tool results).
func (r Request) NewItems() []Item {
	items := r.Items()
	for i := len(items) - 1; i >= 0; i-- {
		it := items[i]
		if it.Role == "assistant" || it.Type == "reasoning" || strings.HasSuffix(it.Type, "_call") {
			return items[i+1:]
		}
	}
	return items
}

// NewUserText returns the text of the user messages among NewItems.
func (r Request) NewUserText() string {
	var parts []string
	for _, it := range r.NewItems() {
		if it.Type == "message" && it.Role == "user" {
			parts = append(parts, it.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// FunctionOutputs returns the tool results among NewItems, each with the
// name and arguments of the call it answers.
func (r Request) FunctionOutputs() []Item {
	items := r.Items()
	calls := map[string]Item{}
	for _, it := range items {
		if strings.HasSuffix(it.Type, "_call") && it.CallID != "" {
			calls[it.CallID] = it
		}
	}
	var out []Item
	for _, it := range r.NewItems() {
		if strings.HasSuffix(it.Type, "_call_output") {
			c := calls[it.CallID]
			it.Name, it.Arguments = c.Name, c.Arguments
			out = append(out, it)
		}
	}
	return out
}

var sessionRe = regexp.MustCompile(`Process running with session ID (\d+)`)

// RunningSessions returns the unified-exec session ids the request's
// history reports running ("Process running with session ID N"), in order.
func (r Request) RunningSessions() []string {
	var out []string
	for _, it := range r.Items() {
		if strings.HasSuffix(it.Type, "_call_output") {
			if m := sessionRe.FindStringSubmatch(it.Text); m != nil {
				out = append(out, m[1])
			}
		}
	}
	return out
}
