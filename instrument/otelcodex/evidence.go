package otelcodex

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// headerTurnMetadata is the header Codex sends on every Responses request:
// a JSON object naming the thread and the turn the request is part of.
const headerTurnMetadata = "X-Codex-Turn-Metadata"

// evidence is what one Responses request says about whose it is.
type evidence struct {
	// turnID is the turn the header names; bodyTurnID the one the body's
	// client_metadata names. Both are Codex's turn ids (turn/start's).
	turnID, bodyTurnID string
	// threadID is the thread the header names.
	threadID string
	// outputs are the tool results among the request's new input items
	// (those after the last item a model response produced): the results
	// of the tool calls of the previous response.
	outputs []toolOutput
	// parsed is false when the body's input could not be read.
	parsed bool
	// sub is the header's subagent metadata, when isSub (subagent.go).
	sub   subagentMeta
	isSub bool
}

// toolOutput is one tool result a request returns to the model.
type toolOutput struct {
	callID string
	// name and args are those of the function_call item the result
	// answers, when the input holds it.
	name, args string
	// output is the result's text.
	output string
}

// inputItem is one item of a Responses request's input, as far as the
// evidence needs it.
type inputItem struct {
	Type      string          `json:"type"`
	Role      string          `json:"role"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments string          `json:"arguments"`
	Input     string          `json:"input"`
	Output    json.RawMessage `json:"output"`
}

// modelItem reports whether an input item came from a model response
// (everything after the last one is new in this request).
func (it inputItem) modelItem() bool {
	if it.Role == "assistant" || it.Type == "reasoning" {
		return true
	}
	return strings.HasSuffix(it.Type, "_call")
}

// readEvidence reads a Responses request: the turn metadata header and the
// body's client_metadata and input.
func readEvidence(h http.Header, body []byte) evidence {
	var ev evidence
	var meta struct {
		TurnID   string `json:"turn_id"`
		ThreadID string `json:"thread_id"`
	}
	if v := h.Get(headerTurnMetadata); v != "" && json.Unmarshal([]byte(v), &meta) == nil {
		ev.turnID, ev.threadID = meta.TurnID, meta.ThreadID
		ev.sub, ev.isSub = readSubagentMeta(v)
	}
	var req struct {
		ClientMetadata struct {
			TurnID string `json:"turn_id"`
		} `json:"client_metadata"`
		Input json.RawMessage `json:"input"`
	}
	if json.Unmarshal(body, &req) != nil {
		return ev
	}
	ev.bodyTurnID = req.ClientMetadata.TurnID
	var items []inputItem
	if len(req.Input) > 0 && req.Input[0] == '"' {
		// A plain prompt: no tool results.
		ev.parsed = true
		return ev
	}
	if json.Unmarshal(req.Input, &items) != nil {
		return ev
	}
	ev.parsed = true
	start := 0
	for i := len(items) - 1; i >= 0; i-- {
		if items[i].modelItem() {
			start = i + 1
			break
		}
	}
	for _, it := range items[start:] {
		if !strings.HasSuffix(it.Type, "_call_output") || it.CallID == "" {
			continue
		}
		out := toolOutput{callID: it.CallID, output: outputText(it.Output)}
		for j := start - 1; j >= 0; j-- {
			if c := items[j]; c.CallID == it.CallID && c.modelItem() {
				out.name, out.args = c.Name, c.Arguments
				if out.args == "" {
					out.args = c.Input
				}
				break
			}
		}
		ev.outputs = append(ev.outputs, out)
	}
	return ev
}

// outputText is a tool result's text: a string, or the text of its
// content items.
func outputText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String()
}

var (
	runningRe = regexp.MustCompile(`(?m)^Process running with session ID (\d+)\s*$`)
	exitedRe  = regexp.MustCompile(`(?m)^Process exited with code (-?\d+)\s*$`)
)

// processState is what a unified-exec result (exec_command, write_stdin)
// says of its process: running as session id, or exited with a code.
type processState struct {
	running bool
	session string
	exited  bool
	code    int
}

// readProcessState reads the header of a unified-exec result: the lines
// before "Output:", so that nothing the command printed is read as the
// header.
func readProcessState(output string) processState {
	head := output
	if i := strings.Index(output, "\nOutput:"); i >= 0 {
		head = output[:i]
	}
	var st processState
	if m := runningRe.FindStringSubmatch(head); m != nil {
		st.running, st.session = true, m[1]
	}
	if m := exitedRe.FindStringSubmatch(head); m != nil && !st.running {
		if c, err := strconv.Atoi(m[1]); err == nil {
			st.exited, st.code = true, c
		}
	}
	return st
}

// stdinSession returns the session_id a write_stdin call's arguments name.
func stdinSession(args string) (string, bool) {
	var a struct {
		SessionID json.Number `json:"session_id"`
	}
	d := json.NewDecoder(strings.NewReader(args))
	d.UseNumber()
	if d.Decode(&a) != nil || a.SessionID == "" {
		return "", false
	}
	if _, err := strconv.ParseUint(a.SessionID.String(), 10, 63); err != nil {
		return "", false
	}
	return a.SessionID.String(), true
}
