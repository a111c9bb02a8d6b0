package scriptedmodel

import (
	"encoding/json"
	"strings"
)

// Codex's multi-agent tools (the "collaboration" namespace that Codex
// 0.169.0 offers the gpt-6* models) and what its requests carry about
// the agent that sends them.

// SpawnAgentCall is a call of Codex's spawn_agent tool: a subagent named
// task (canonical name "/root/{task}") working on message; fork false
// starts it without the parent's history (fork_turns "none").
func SpawnAgentCall(task, message string, fork bool) ToolCall {
	in := map[string]any{"task_name": task, "message": message}
	if !fork {
		in["fork_turns"] = "none"
	}
	b, _ := json.Marshal(in)
	return ToolCall{Name: "spawn_agent", Namespace: "collaboration", Arguments: string(b)}
}

// WaitAgentCall is a call of Codex's wait_agent tool: it waits up to
// timeoutMS (at least 10000) for a mailbox update of any agent, such as a
// subagent's final answer.
func WaitAgentCall(timeoutMS int) ToolCall {
	return ToolCall{Name: "wait_agent", Namespace: "collaboration", Arguments: `{"timeout_ms":` + itoa(timeoutMS) + `}`}
}

// FollowupTaskCall is a call of Codex's followup_task tool: it sends the
// agent target (a task name) message as a new task, which starts a turn
// of that agent when it is idle.
func FollowupTaskCall(target, message string) ToolCall {
	b, _ := json.Marshal(map[string]any{"target": target, "message": message})
	return ToolCall{Name: "followup_task", Namespace: "collaboration", Arguments: string(b)}
}

// CodexAgent returns the agent_name of a Codex request's
// X-Codex-Turn-Metadata: "/root" for the main thread, the canonical task
// name ("/root/task_1") for a subagent's; "" when absent.
func (r Request) CodexAgent() string {
	var m struct {
		AgentName string `json:"agent_name"`
	}
	_ = json.Unmarshal([]byte(r.Header.Get("X-Codex-Turn-Metadata")), &m)
	return m.AgentName
}

// FinalAnswers returns the authors of the FINAL_ANSWER agent messages
// (a subagent's answer delivered to its parent) among the request's new
// input items.
func (r Request) FinalAnswers() []string {
	raw, _ := r.Body["input"].([]any)
	start := 0
	for i := len(raw) - 1; i >= 0; i-- {
		m, _ := raw[i].(map[string]any)
		typ, _ := m["type"].(string)
		role, _ := m["role"].(string)
		if role == "assistant" || typ == "reasoning" || strings.HasSuffix(typ, "_call") {
			start = i + 1
			break
		}
	}
	var out []string
	for _, x := range raw[start:] {
		m, _ := x.(map[string]any)
		if t, _ := m["type"].(string); t != "agent_message" {
			continue
		}
		if strings.HasPrefix(contentText(m["content"]), "Message Type: FINAL_ANSWER") {
			a, _ := m["author"].(string)
			out = append(out, a)
		}
	}
	return out
}
