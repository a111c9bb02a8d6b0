package otelclaudecode

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/agentledger/agentledger/instrument/internal/anthropicwire"
)

// Types and subtypes of the stream-json lines `claude -p --output-format
// stream-json --verbose --include-partial-messages --replay-user-messages`
// prints (measured on Claude Code 2.1.328, see testdata/README.md). Every
// other type is ignored.
const (
	typeSystem      = "system"
	typeStreamEvent = "stream_event"
	typeAssistant   = "assistant"
	typeUser        = "user"
	typeResult      = "result"
	// typeCommandLifecycle lines say when the CLI queues, starts and
	// completes a prompt (command_uuid, state).
	typeCommandLifecycle = "command_lifecycle"

	subInit             = "init"
	subStatus           = "status"
	subTaskStarted      = "task_started"
	subTaskUpdated      = "task_updated"
	subTaskNotification = "task_notification"

	statusRequesting = "requesting"
	originTask       = "task-notification"
)

// errMalformed is returned for a line that is not a JSON object with a
// string "type".
var errMalformed = errors.New("otelclaudecode: malformed stream-json line")

// event is one decoded line. Only the fields the mapping uses are kept;
// a field of an unexpected JSON type is left zero instead of failing the
// whole line, since the CLI's schema grows between versions.
type event struct {
	Type, Subtype string
	SessionID     string
	UUID          string

	// system/status: Status is "requesting" when a model request starts;
	// UserMessageUUIDs name the prompts the request answers (none in a turn
	// the CLI started by itself). result carries them too.
	Status           string
	UserMessageUUIDs []string
	// system/task_started, task_updated, task_notification.
	Task task

	// stream_event: one Anthropic Messages stream event.
	Stream *streamEvent
	// ParentToolUseID is set on the lines of a subagent's conversation.
	ParentToolUseID string

	// assistant and user: the message; for user lines also whether it is a
	// replay (of a prompt we wrote, of a notification the CLI put into a
	// request). Origin is the origin of a replayed notification or of the
	// turn a result ends.
	Blocks   []block
	IsReplay bool
	Origin   origin

	// result
	Result *result
}

type task struct {
	ID, RunID, ToolUseID string
	// ParentTaskID is the task whose subagent launched this one (a
	// subagent's own background shell), "" for the session's own.
	ParentTaskID string
	Type         string
	// Backgrounded is set on task_started, and on task_updated when the
	// patch moves the task to the background.
	Backgrounded bool
	// Status is the terminal status of task_notification or of a
	// task_updated patch ("completed", "failed", "stopped", "killed"), ""
	// while running.
	Status  string
	Summary string
}

type origin struct {
	Kind, RunID string
}

// block is a content block of an assistant or user message.
type block struct {
	Type      string
	ID        string // tool_use
	Name      string // tool_use
	ToolUseID string // tool_result
	IsError   bool   // tool_result
}

type result struct {
	Subtype   string
	IsError   bool
	Text      string
	NumTurns  int64
	Index     int64
	UserUUIDs []string
	// SinceLast is model_usage_since_last_result summed over models; nil
	// when the CLI did not report it.
	SinceLast *rawUsage
}

// streamEvent is the part of an Anthropic Messages stream event the
// Client reads: its type and message id. Usage is the model-wire proxy's
// to read, from the response itself (anthropicwire).
type streamEvent struct {
	Type      string
	MessageID string
}

// rawUsage is usage the Anthropic way: Input excludes the cache reads and
// cache creations.
type rawUsage = anthropicwire.Usage

// envelope holds the fields of every line; the rest is decoded per type
// from the raw fields, each on its own.
type envelope struct {
	Type            string          `json:"type"`
	Subtype         json.RawMessage `json:"subtype"`
	SessionID       json.RawMessage `json:"session_id"`
	UUID            json.RawMessage `json:"uuid"`
	Status          json.RawMessage `json:"status"`
	UserUUIDs       json.RawMessage `json:"user_message_uuids"`
	UserUUID        json.RawMessage `json:"user_message_uuid"`
	TaskID          json.RawMessage `json:"task_id"`
	ParentTaskID    json.RawMessage `json:"parent_task_id"`
	RunID           json.RawMessage `json:"run_id"`
	ToolUseID       json.RawMessage `json:"tool_use_id"`
	TaskType        json.RawMessage `json:"task_type"`
	IsBackgrounded  json.RawMessage `json:"is_backgrounded"`
	Patch           json.RawMessage `json:"patch"`
	Summary         json.RawMessage `json:"summary"`
	Event           json.RawMessage `json:"event"`
	ParentToolUseID json.RawMessage `json:"parent_tool_use_id"`
	Message         json.RawMessage `json:"message"`
	IsReplay        json.RawMessage `json:"isReplay"`
	Origin          json.RawMessage `json:"origin"`
	Result          json.RawMessage `json:"result"`
	IsError         json.RawMessage `json:"is_error"`
	NumTurns        json.RawMessage `json:"num_turns"`
	ResultIndex     json.RawMessage `json:"result_index"`
	SinceLast       json.RawMessage `json:"model_usage_since_last_result"`
	CommandUUID     json.RawMessage `json:"command_uuid"`
	State           json.RawMessage `json:"state"`
}

// decodeEvent decodes one line of the stream.
func decodeEvent(line []byte) (event, error) {
	line = bytes.TrimSpace(line)
	var env envelope
	if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &env) != nil || env.Type == "" {
		return event{}, errMalformed
	}
	ev := event{
		Type:      env.Type,
		Subtype:   str(env.Subtype),
		SessionID: str(env.SessionID),
		UUID:      str(env.UUID),
	}
	switch ev.Type {
	case typeCommandLifecycle:
		// UUID is the prompt's, Status its state.
		ev.UUID, ev.Status = str(env.CommandUUID), str(env.State)
	case typeSystem:
		ev.Status = str(env.Status)
		ev.UserMessageUUIDs = strs(env.UserUUIDs)
		ev.Task = task{
			ID: str(env.TaskID), RunID: str(env.RunID), ToolUseID: str(env.ToolUseID), ParentTaskID: str(env.ParentTaskID),
			Type: str(env.TaskType), Backgrounded: boolean(env.IsBackgrounded), Summary: str(env.Summary),
		}
		switch ev.Subtype {
		case subTaskNotification:
			ev.Task.Status = ev.Status
			ev.Status = ""
		case subTaskUpdated:
			var p struct {
				Status         json.RawMessage `json:"status"`
				IsBackgrounded json.RawMessage `json:"is_backgrounded"`
			}
			if json.Unmarshal(env.Patch, &p) == nil {
				ev.Task.Status = terminal(str(p.Status))
				ev.Task.Backgrounded = boolean(p.IsBackgrounded)
			}
		}
	case typeStreamEvent:
		ev.ParentToolUseID = str(env.ParentToolUseID)
		ev.Stream = decodeStream(env.Event)
		if ev.Stream == nil {
			return event{}, errMalformed
		}
	case typeAssistant, typeUser:
		ev.ParentToolUseID = str(env.ParentToolUseID)
		ev.IsReplay = boolean(env.IsReplay)
		ev.Origin = decodeOrigin(env.Origin)
		var msg struct {
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(env.Message, &msg) == nil {
			ev.Blocks = decodeBlocks(msg.Content)
		}
	case typeResult:
		r := &result{
			Subtype:   ev.Subtype,
			IsError:   boolean(env.IsError),
			Text:      str(env.Result),
			NumTurns:  integer(env.NumTurns),
			Index:     integer(env.ResultIndex),
			UserUUIDs: strs(env.UserUUIDs),
			SinceLast: sinceLast(env.SinceLast),
		}
		if u := str(env.UserUUID); u != "" && !contains(r.UserUUIDs, u) {
			r.UserUUIDs = append(r.UserUUIDs, u)
		}
		ev.Result = r
		ev.Origin = decodeOrigin(env.Origin)
	}
	return ev, nil
}

func decodeOrigin(raw json.RawMessage) origin {
	var o struct {
		Kind  json.RawMessage `json:"kind"`
		RunID json.RawMessage `json:"runId"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &o) != nil {
		return origin{}
	}
	return origin{Kind: str(o.Kind), RunID: str(o.RunID)}
}

// terminal returns status when it ends a task, else "".
func terminal(status string) string {
	switch status {
	case "", "running", "pending":
		return ""
	}
	return status
}

func decodeStream(raw json.RawMessage) *streamEvent {
	var w struct {
		Type    string `json:"type"`
		Message *struct {
			ID json.RawMessage `json:"id"`
		} `json:"message"`
	}
	if json.Unmarshal(raw, &w) != nil || w.Type == "" {
		return nil
	}
	s := &streamEvent{Type: w.Type}
	if w.Message != nil {
		s.MessageID = str(w.Message.ID)
	}
	return s
}

func decodeBlocks(raw json.RawMessage) []block {
	var items []struct {
		Type      json.RawMessage `json:"type"`
		ID        json.RawMessage `json:"id"`
		Name      json.RawMessage `json:"name"`
		ToolUseID json.RawMessage `json:"tool_use_id"`
		IsError   json.RawMessage `json:"is_error"`
	}
	if json.Unmarshal(raw, &items) != nil {
		return nil // a string content has no blocks the mapping uses
	}
	out := make([]block, 0, len(items))
	for _, it := range items {
		out = append(out, block{Type: str(it.Type), ID: str(it.ID), Name: str(it.Name),
			ToolUseID: str(it.ToolUseID), IsError: boolean(it.IsError)})
	}
	return out
}

// sinceLast sums model_usage_since_last_result over its models. It
// returns nil when absent or when any count is not a non-negative
// integer: an unreadable report checks nothing.
func sinceLast(raw json.RawMessage) *rawUsage {
	var models map[string]struct {
		Input         json.RawMessage `json:"inputTokens"`
		Output        json.RawMessage `json:"outputTokens"`
		CacheRead     json.RawMessage `json:"cacheReadInputTokens"`
		CacheCreation json.RawMessage `json:"cacheCreationInputTokens"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &models) != nil || models == nil {
		return nil
	}
	var sum rawUsage
	for _, m := range models {
		for _, f := range []struct {
			raw json.RawMessage
			to  *int64
		}{{m.Input, &sum.Input}, {m.Output, &sum.Output}, {m.CacheRead, &sum.CacheRead}, {m.CacheCreation, &sum.CacheCreation}} {
			v, ok := count(f.raw)
			if !ok || !addTo(f.to, v) {
				return nil
			}
		}
	}
	return &sum
}

// count reads a non-negative integer; absent counts as 0.
func count(raw json.RawMessage) (int64, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, true
	}
	var v int64
	if json.Unmarshal(raw, &v) != nil || v < 0 {
		return 0, false
	}
	return v, true
}

// addTo adds v to *sum unless that overflows.
func addTo(sum *int64, v int64) bool {
	if v > 0 && *sum > (1<<63-1)-v {
		return false
	}
	*sum += v
	return true
}

func str(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

func strs(raw json.RawMessage) []string {
	var out []string
	if json.Unmarshal(raw, &out) != nil {
		return nil
	}
	return out
}

func boolean(raw json.RawMessage) bool {
	var b bool
	return json.Unmarshal(raw, &b) == nil && b
}

func integer(raw json.RawMessage) int64 {
	var v int64
	if json.Unmarshal(raw, &v) != nil {
		return 0
	}
	return v
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// jobKind names the background span of a task type: "background shell"
// for local_bash, "background subagent" for local_agent.
func jobKind(taskType string) string {
	switch taskType {
	case "local_bash", "":
		return "shell"
	case "local_agent":
		return "subagent"
	}
	return strings.TrimPrefix(taskType, "local_")
}
