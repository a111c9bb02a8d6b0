package otelcodex

import (
	"encoding/json"
)

// rpcMessage is one JSON-RPC message of `codex app-server` (one per
// line): a response to one of the Client's requests (ID with Result or
// Error), a notification (Method, Params), or a request of the server
// (ID and Method: approvals, which the Client declines).
type rpcMessage struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  *rpcError       `json:"error,omitempty"`
}

type rpcError struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return "codex app-server: " + e.Message }

// turnInfo is a turn as app-server reports it.
type turnInfo struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// threadItem is an item of a thread (its type decides which fields are
// set).
type threadItem struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	// Text is an agentMessage's text.
	Text string `json:"text"`
	// Command, ProcessID, Status and ExitCode are a commandExecution's;
	// its ID is the exec_command call's id, ProcessID the unified-exec
	// session id the model polls with write_stdin.
	Command   string `json:"command"`
	ProcessID string `json:"processId"`
	Status    string `json:"status"`
	ExitCode  *int64 `json:"exitCode"`
	// Kind and AgentPath are a subAgentActivity's ("started",
	// "completed"; "/root/task_1"); its ID is then the spawn call's, or
	// "subagent-completed-{turn id}".
	Kind      string `json:"kind"`
	AgentPath string `json:"agentPath"`
}

// tokenBreakdown is app-server's usage of one request (last) or a thread
// (total): InputTokens includes the cached ones.
type tokenBreakdown struct {
	InputTokens           int64 `json:"inputTokens"`
	CachedInputTokens     int64 `json:"cachedInputTokens"`
	OutputTokens          int64 `json:"outputTokens"`
	ReasoningOutputTokens int64 `json:"reasoningOutputTokens"`
}

// event is a notification of app-server the Client acts on.
type event struct {
	kind     eventKind
	threadID string
	turnID   string
	turn     turnInfo
	item     threadItem
	last     tokenBreakdown
}

type eventKind int

const (
	evOther eventKind = iota
	evTurnStarted
	evTurnCompleted
	evItemStarted
	evItemCompleted
	evTokenUsage
)

// readEvent reads a notification's method and params. Notifications it
// does not know, and params that cannot be read, are evOther.
func readEvent(method string, params json.RawMessage) event {
	var p struct {
		ThreadID   string     `json:"threadId"`
		TurnID     string     `json:"turnId"`
		Turn       turnInfo   `json:"turn"`
		Item       threadItem `json:"item"`
		TokenUsage struct {
			Last tokenBreakdown `json:"last"`
		} `json:"tokenUsage"`
	}
	var kind eventKind
	switch method {
	case "turn/started":
		kind = evTurnStarted
	case "turn/completed":
		kind = evTurnCompleted
	case "item/started":
		kind = evItemStarted
	case "item/completed":
		kind = evItemCompleted
	case "thread/tokenUsage/updated":
		kind = evTokenUsage
	default:
		return event{}
	}
	if json.Unmarshal(params, &p) != nil {
		return event{}
	}
	ev := event{kind: kind, threadID: p.ThreadID, turnID: p.TurnID, turn: p.Turn, item: p.Item, last: p.TokenUsage.Last}
	if kind == evTurnStarted || kind == evTurnCompleted {
		ev.turnID = p.Turn.ID
	}
	if ev.turnID == "" || (kind == evItemStarted || kind == evItemCompleted) && ev.item.Type == "" {
		return event{}
	}
	return ev
}

// execEvent is one line of `codex exec --json`.
type execEvent struct {
	Type     string `json:"type"`
	ThreadID string `json:"thread_id"`
	Item     struct {
		ID   string `json:"id"`
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"item"`
	Usage *struct {
		InputTokens       int64 `json:"input_tokens"`
		CachedInputTokens int64 `json:"cached_input_tokens"`
		OutputTokens      int64 `json:"output_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
	Message string `json:"message"`
}
