package otelopencode

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Event types of the OpenCode event stream (GET /event) that the mapping
// uses. Every other type is ignored.
const (
	evServerConnected    = "server.connected"
	evSessionCreated     = "session.created"
	evSessionUpdated     = "session.updated"
	evSessionStatus      = "session.status"
	evSessionIdle        = "session.idle"
	evSessionError       = "session.error"
	evSessionDeleted     = "session.deleted"
	evMessageUpdated     = "message.updated"
	evMessagePartUpdated = "message.part.updated"
)

// event is one decoded event of the stream. Only the fields of the types
// above are decoded; the rest of the payload is skipped.
type event struct {
	Type       string
	Properties eventProperties
}

type eventProperties struct {
	// Time is the event's time (message.part.updated), ms since the epoch.
	Time      int64       `json:"time"`
	SessionID string      `json:"sessionID"`
	Info      *rawInfo    `json:"info"`
	Part      *part       `json:"part"`
	Status    *statusInfo `json:"status"`
	Error     *errorInfo  `json:"error"`
}

// rawInfo is the info of a session.* or message.updated event: a session
// or a message. Both have id; the other fields tell them apart.
type rawInfo struct {
	ID         string     `json:"id"`
	SessionID  string     `json:"sessionID"`
	ParentID   string     `json:"parentID"`
	Role       string     `json:"role"`
	ModelID    string     `json:"modelID"`
	ProviderID string     `json:"providerID"`
	Agent      string     `json:"agent"`
	Cost       float64    `json:"cost"`
	Tokens     *tokens    `json:"tokens"`
	Time       msgTime    `json:"time"`
	Finish     string     `json:"finish"`
	Error      *errorInfo `json:"error"`
}

// tokens is OpenCode's usage of an assistant message. Measured on
// opencode 1.18.33 (testdata/README.md): Input excludes the cache reads and
// writes, Output excludes Reasoning.
type tokens struct {
	Input     int64 `json:"input"`
	Output    int64 `json:"output"`
	Reasoning int64 `json:"reasoning"`
	Cache     struct {
		Read  int64 `json:"read"`
		Write int64 `json:"write"`
	} `json:"cache"`
}

// msgTime holds OpenCode timestamps (milliseconds since the epoch).
type msgTime struct {
	Created   int64 `json:"created"`
	Completed int64 `json:"completed"`
	Start     int64 `json:"start"`
	End       int64 `json:"end"`
}

type errorInfo struct {
	Name string `json:"name"`
	Data struct {
		Message string `json:"message"`
	} `json:"data"`
}

type statusInfo struct {
	Type string `json:"type"`
}

// part is a message part (message.part.updated, or an element of the parts
// of GET /session/:id/message).
type part struct {
	ID        string     `json:"id"`
	SessionID string     `json:"sessionID"`
	MessageID string     `json:"messageID"`
	Type      string     `json:"type"`
	Text      string     `json:"text"`
	Synthetic bool       `json:"synthetic"`
	Tool      string     `json:"tool"`
	CallID    string     `json:"callID"`
	State     *toolState `json:"state"`
}

type toolState struct {
	Status   string          `json:"status"`
	Input    json.RawMessage `json:"input"`
	Metadata struct {
		SessionID  string `json:"sessionId"`
		Background bool   `json:"background"`
		JobID      string `json:"jobId"`
	} `json:"metadata"`
	Error string  `json:"error"`
	Time  msgTime `json:"time"`
}

// wentToBackground reports whether a bash tool call runs in the
// background by the runtime's own account: its state's metadata names the
// job OpenCode started (jobId) or says it is backgrounded. What the call
// asked for (run_in_background or background in its input) is not
// evidence: OpenCode 1.18.33 has no such parameter and runs a call that
// sets it in the foreground, whose result is the command's output.
func (s *toolState) wentToBackground() bool {
	return s.Metadata.JobID != "" || s.Metadata.Background
}

// messageWithParts is an element of GET /session/:id/message, and the
// body of POST /session/:id/message.
type messageWithParts struct {
	Info  rawInfo `json:"info"`
	Parts []part  `json:"parts"`
}

// errMalformed wraps every decoding failure of parseEvent.
var errMalformed = errors.New("otelopencode: malformed event")

// parseEvent decodes the data of one server-sent event. It never panics;
// a payload that is not a JSON object with a string "type" is an error
// wrapping errMalformed. The properties are decoded only for the types the
// mapping uses (known reports whether it is one), so a new or changed
// event type elsewhere cannot break the stream.
func parseEvent(data []byte) (ev event, known bool, err error) {
	var head struct {
		Type       string          `json:"type"`
		Properties json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return event{}, false, fmt.Errorf("%w: %w", errMalformed, err)
	}
	if head.Type == "" {
		return event{}, false, fmt.Errorf("%w: no type", errMalformed)
	}
	ev.Type = head.Type
	switch head.Type {
	case evSessionCreated, evSessionUpdated, evSessionStatus, evSessionIdle,
		evSessionError, evSessionDeleted, evMessageUpdated, evMessagePartUpdated:
	default:
		return ev, false, nil
	}
	if len(head.Properties) == 0 {
		return event{}, false, fmt.Errorf("%w: %s without properties", errMalformed, head.Type)
	}
	if err := json.Unmarshal(head.Properties, &ev.Properties); err != nil {
		return event{}, false, fmt.Errorf("%w: %s: %w", errMalformed, head.Type, err)
	}
	return ev, true, nil
}

// notificationRE finds the job a completion notification reports:
// OpenCode posts `<task id="ses_..." state="completed">` (or
// state="error") as a synthetic user message part. Other job kinds are
// matched by the same shape (an element with id and state attributes).
var notificationRE = regexp.MustCompile(`^\s*<([a-z_]+) id="([^"]+)" state="([a-z_]+)"`)

// parseNotification returns the job id and state a synthetic part reports,
// and false when the part is not a completion notification (a "running"
// state is the launch acknowledgement, not a completion).
func parseNotification(p part) (jobID, state string, ok bool) {
	if !p.Synthetic || p.Type != "text" {
		return "", "", false
	}
	m := notificationRE.FindStringSubmatch(p.Text)
	if m == nil || m[3] == "running" {
		return "", "", false
	}
	return m[2], m[3], true
}

// msTime converts an OpenCode timestamp; zero stays the zero time.
func msTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
