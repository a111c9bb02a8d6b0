package scriptedmodel

import (
	"encoding/json"
	"regexp"
	"strings"
)

// BashCall is a tool call of Claude Code's Bash tool running command;
// with background the command runs with run_in_background, so the CLI
// answers at once and posts a <task-notification> when it ends.
func BashCall(command, description string, background bool) ToolCall {
	in := map[string]any{"command": command, "description": description}
	if background {
		in["run_in_background"] = true
	}
	b, _ := json.Marshal(in)
	return ToolCall{Name: "Bash", Arguments: string(b)}
}

// Block is one content block of an Anthropic request message, as far as
// scripts look at it.
type Block struct {
	// Role is the role of the message holding the block.
	Role string
	// Type is "text", "tool_use", "tool_result", ...
	Type string
	// Text is a text block's text, or a tool_result's content as text.
	Text string
	// ToolUseID is the id of a tool_use block, or the tool_use_id a
	// tool_result answers.
	ToolUseID string
	// IsError is a tool_result's is_error.
	IsError bool
}

// Blocks returns the content blocks of the request's messages, in order
// (a string content is one text block).
func (r Request) Blocks() []Block {
	msgs, _ := r.Body["messages"].([]any)
	var out []Block
	for _, x := range msgs {
		m, ok := x.(map[string]any)
		if !ok {
			continue
		}
		role, _ := m["role"].(string)
		switch c := m["content"].(type) {
		case string:
			out = append(out, Block{Role: role, Type: "text", Text: c})
		case []any:
			for _, y := range c {
				b, ok := y.(map[string]any)
				if !ok {
					continue
				}
				blk := Block{Role: role}
				blk.Type, _ = b["type"].(string)
				switch blk.Type {
				case "text":
					blk.Text, _ = b["text"].(string)
				case "tool_use":
					blk.ToolUseID, _ = b["id"].(string)
				case "tool_result":
					blk.ToolUseID, _ = b["tool_use_id"].(string)
					blk.IsError, _ = b["is_error"].(bool)
					blk.Text = contentText(b["content"])
				}
				out = append(out, blk)
			}
		}
	}
	return out
}

// NewBlocks returns the blocks after the request's last assistant
// message: what this request adds to the conversation (the prompt, tool
// results, notifications).
func (r Request) NewBlocks() []Block {
	all := r.Blocks()
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].Role == "assistant" {
			return all[i+1:]
		}
	}
	return all
}

// NewText returns the text of NewBlocks, tool results included, joined by
// newlines: scripts route on markers in it.
func (r Request) NewText() string {
	var parts []string
	for _, b := range r.NewBlocks() {
		if b.Text != "" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// ToolResults returns the tool_result blocks of NewBlocks.
func (r Request) ToolResults() []Block {
	var out []Block
	for _, b := range r.NewBlocks() {
		if b.Type == "tool_result" {
			out = append(out, b)
		}
	}
	return out
}

// TaskNotification is a <task-notification> Claude Code puts into a
// request when a background task ends.
type TaskNotification struct {
	TaskID, ToolUseID, Status, Summary string
}

var (
	notificationRe = regexp.MustCompile(`(?s)<task-notification>(.*?)</task-notification>`)
	fieldRe        = regexp.MustCompile(`(?s)<(task-id|tool-use-id|status|summary)>(.*?)</(?:task-id|tool-use-id|status|summary)>`)
)

// TaskNotifications returns the task notifications in NewBlocks.
func (r Request) TaskNotifications() []TaskNotification {
	var out []TaskNotification
	for _, m := range notificationRe.FindAllStringSubmatch(r.NewText(), -1) {
		var n TaskNotification
		for _, f := range fieldRe.FindAllStringSubmatch(m[1], -1) {
			switch f[1] {
			case "task-id":
				n.TaskID = f[2]
			case "tool-use-id":
				n.ToolUseID = f[2]
			case "status":
				n.Status = f[2]
			case "summary":
				n.Summary = f[2]
			}
		}
		out = append(out, n)
	}
	return out
}
