package openaiwire

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/agentledger/agentledger/instrument/internal/genaicall"
)

// The response bodies and stream events of the three operations, and the
// parser that reads usage, finish reasons and tool calls from them.

type chatResponse struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		FinishReason string `json:"finish_reason"`
		Message      struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
	} `json:"choices"`
	Usage *openAIUsage `json:"usage"`
}

type chatChunk struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int     `json:"index"`
		FinishReason *string `json:"finish_reason"`
		Delta        struct {
			Content   *string `json:"content"`
			ToolCalls []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Function struct {
					Name string `json:"name"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
	Usage *openAIUsage `json:"usage"`
	Error *apiError    `json:"error"`
}

type responsesItem struct {
	Type    string `json:"type"`
	CallID  string `json:"call_id"`
	Name    string `json:"name"`
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
}

type responsesObject struct {
	ID                string          `json:"id"`
	Model             string          `json:"model"`
	Status            string          `json:"status"`
	Output            []responsesItem `json:"output"`
	Usage             *responsesUsage `json:"usage"`
	Error             *apiError       `json:"error"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
}

type responsesEvent struct {
	Type     string           `json:"type"`
	Response *responsesObject `json:"response"`
	Item     *responsesItem   `json:"item"`
	Delta    string           `json:"delta"`
	Message  string           `json:"message"`
	Code     any              `json:"code"`
}

type embeddingsResponse struct {
	Model string       `json:"model"`
	Usage *openAIUsage `json:"usage"`
}

// parser reads the responses of one endpoint; injected tells that the
// request was sent asking for the usage chunk the caller did not ask for.
type parser struct {
	op       Operation
	injected bool
}

// ParseResponse reads a non-streamed response body into r.
func (p parser) ParseResponse(b []byte, r *genaicall.Result, capture bool) {
	switch p.op {
	case Chat:
		var resp chatResponse
		if json.Unmarshal(b, &resp) != nil {
			return
		}
		r.Parsed = true
		r.ID, r.Model = resp.ID, resp.Model
		for _, ch := range resp.Choices {
			r.AddFinish(ch.FinishReason)
			for _, tc := range ch.Message.ToolCalls {
				r.AddToolCall(tc.Function.Name, tc.ID)
			}
			if capture && ch.Message.Content != nil {
				r.Text.WriteString(*ch.Message.Content)
			}
		}
		resp.Usage.into(&r.Usage)
	case Responses:
		var resp responsesObject
		if json.Unmarshal(b, &resp) != nil {
			return
		}
		r.Parsed = true
		fromResponses(r, &resp, capture)
	case Embeddings:
		var resp embeddingsResponse
		if json.Unmarshal(b, &resp) != nil {
			return
		}
		r.Parsed = true
		r.Model = resp.Model
		if resp.Usage != nil {
			r.Usage.Input = resp.Usage.PromptTokens
		}
	}
}

func fromResponses(r *genaicall.Result, resp *responsesObject, capture bool) {
	r.ID, r.Model = resp.ID, resp.Model
	r.Finish = r.Finish[:0]
	if d := resp.IncompleteDetails; d != nil && d.Reason != "" {
		r.AddFinish(d.Reason)
	} else {
		r.AddFinish(resp.Status)
	}
	if len(resp.Output) == 0 {
		// A terminal event with no output (the smallest stream a client
		// such as Codex accepts: response.output_item.done per item, then
		// response.completed with id and usage) keeps the tool calls and
		// text its output_item events gave.
		resp.Usage.into(&r.Usage)
		failed(r, resp)
		return
	}
	r.ToolCalls = r.ToolCalls[:0]
	r.Text.Reset()
	for _, it := range resp.Output {
		switch it.Type {
		case "function_call", "custom_tool_call":
			r.AddToolCall(it.Name, it.CallID)
		case "message":
			if capture {
				for _, c := range it.Content {
					r.Text.WriteString(c.Text)
				}
			}
		}
	}
	resp.Usage.into(&r.Usage)
	failed(r, resp)
}

// failed records the error of a failed response; one without an error
// object is an error still (genaicall reads an error in a 200 response
// as a call whose bill is unknown).
func failed(r *genaicall.Result, resp *responsesObject) {
	resp.Error.into(r)
	if r.ErrType == "" && resp.Status == "failed" {
		r.ErrType = "response_failed"
	}
}

// hasToolCall reports whether r already holds the tool call id.
func hasToolCall(r *genaicall.Result, id string) bool {
	for _, tc := range r.ToolCalls {
		if i := strings.LastIndexByte(tc, ':'); i >= 0 && tc[i+1:] == id {
			return true
		}
	}
	return false
}

var doneData = []byte("[DONE]")

// ParseEvent reads one stream event's data into r. It reports whether the
// caller gets the event and whether it ends the stream.
func (p parser) ParseEvent(data []byte, r *genaicall.Result, capture bool) (keep, terminal bool) {
	switch p.op {
	case Chat:
		if bytes.HasPrefix(data, doneData) {
			return true, true
		}
		var ch chatChunk
		if json.Unmarshal(data, &ch) != nil {
			return true, false
		}
		r.Parsed = true
		if ch.Error != nil {
			ch.Error.into(r)
			return true, false
		}
		if ch.ID != "" {
			r.ID = ch.ID
		}
		if ch.Model != "" {
			r.Model = ch.Model
		}
		for _, c := range ch.Choices {
			if c.FinishReason != nil {
				r.AddFinish(*c.FinishReason)
			}
			if capture && c.Delta.Content != nil {
				r.Text.WriteString(*c.Delta.Content)
			}
			for _, tc := range c.Delta.ToolCalls {
				if tc.ID != "" {
					r.AddToolCall(tc.Function.Name, tc.ID)
				}
			}
		}
		if ch.Usage != nil {
			ch.Usage.into(&r.Usage)
			// The caller did not ask for this usage-only chunk; it may
			// index Choices[0], so it never sees it.
			if p.injected && len(ch.Choices) == 0 {
				return false, false
			}
		}
		return true, false
	case Responses:
		var ev responsesEvent
		if json.Unmarshal(data, &ev) != nil {
			return true, false
		}
		r.Parsed = true
		switch ev.Type {
		case "response.created", "response.in_progress":
			if ev.Response != nil {
				r.ID, r.Model = ev.Response.ID, ev.Response.Model
			}
		case "response.output_text.delta":
			if capture {
				r.Text.WriteString(ev.Delta)
			}
		case "response.output_item.done":
			// A tool call is known at its item's end, before the terminal
			// event, which may not repeat the output.
			if it := ev.Item; it != nil && (it.Type == "function_call" || it.Type == "custom_tool_call") && it.CallID != "" && !hasToolCall(r, it.CallID) {
				r.AddToolCall(it.Name, it.CallID)
			}
		case "response.completed", "response.incomplete", "response.failed":
			if ev.Response != nil {
				fromResponses(r, ev.Response, capture)
			}
			return true, true
		case "error":
			(&apiError{Message: ev.Message, Code: ev.Code, Type: "error"}).into(r)
			return true, true
		}
		return true, false
	}
	return true, false
}
