// Package anthropicwire reads the Anthropic Messages API on the wire:
// which requests create a message, what their bodies ask for, and the
// usage, tool uses and outcome of their responses (plain JSON or
// server-sent events). It is the one reader of that API for the SDK
// middleware (otelanthropic) and the model-wire proxy of the runtime
// adapters (otelclaudecode).
package anthropicwire

import (
	"encoding/json"
	"math"
	"net/http"
	"strings"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/genaicall"
)

// IsMessages tells whether req creates a message (POST /v1/messages, not
// its count_tokens or batches sub-resources).
func IsMessages(req *http.Request) bool {
	return req.Method == http.MethodPost && strings.HasSuffix(strings.TrimRight(req.URL.Path, "/"), "/v1/messages")
}

// anthropicUsage is the usage object of a message or a message_delta event.
type anthropicUsage struct {
	InputTokens              *int64 `json:"input_tokens"`
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
	OutputTokens             *int64 `json:"output_tokens"`
	OutputTokensDetails      *struct {
		ThinkingTokens *int64 `json:"thinking_tokens"`
	} `json:"output_tokens_details"`
}

// Parser reads the responses of one Messages call: a genaicall.Parser.
// Use a new one per call.
type Parser struct {
	// rawInput is Anthropic's input_tokens, without cache tokens.
	rawInput *int64
}

// merge sets in r what u carries. Later events carry cumulative counts, so
// a count present in u replaces the one in r. A negative count is no count
// and is ignored.
func (p *Parser) merge(u *anthropicUsage, r *genaicall.Result) {
	if u == nil {
		return
	}
	if v := count(u.InputTokens); v != nil {
		p.rawInput = v
	}
	if v := count(u.CacheCreationInputTokens); v != nil {
		r.Usage.CacheCreation = v
	}
	if v := count(u.CacheReadInputTokens); v != nil {
		r.Usage.CacheRead = v
	}
	if v := count(u.OutputTokens); v != nil {
		r.Usage.Output = v
	}
	if d := u.OutputTokensDetails; d != nil {
		if v := count(d.ThinkingTokens); v != nil {
			r.Usage.Reasoning = v
		}
	}
	// The GenAI conventions count cache reads and writes as input. A sum
	// beyond int64 is no count either: input is then left out.
	if p.rawInput != nil {
		r.Usage.Input = genAIInput(*p.rawInput, r.Usage.CacheRead, r.Usage.CacheCreation)
	}
}

// Usage is usage the Anthropic way: Input excludes the cache reads and
// cache creations, which the GenAI conventions (genaicall.Usage) count as
// input. The two conversions live here, so that they cannot disagree.
type Usage struct {
	Input, CacheRead, CacheCreation, Output int64
}

// FromGenAI converts u to the Anthropic way, and false when u lacks its
// input or output count. An absent cache count is 0.
func FromGenAI(u genaicall.Usage) (Usage, bool) {
	if u.Input == nil || u.Output == nil {
		return Usage{}, false
	}
	v := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	cacheRead, cacheCreation := v(u.CacheRead), v(u.CacheCreation)
	return Usage{
		Input:         *u.Input - cacheRead - cacheCreation,
		CacheRead:     cacheRead,
		CacheCreation: cacheCreation,
		Output:        *u.Output,
	}, true
}

// genAIInput is the GenAI input count of an Anthropic input count and its
// cache counts (each nil when absent): their sum, or nil beyond int64.
func genAIInput(raw int64, caches ...*int64) *int64 {
	sum := raw
	for _, v := range caches {
		if v == nil {
			continue
		}
		if *v > math.MaxInt64-sum {
			return nil
		}
		sum += *v
	}
	return &sum
}

// count returns v when it is a token count, nil when absent or negative.
func count(v *int64) *int64 {
	if v == nil || *v < 0 {
		return nil
	}
	return v
}

type contentBlock struct {
	Type string `json:"type"`
	ID   string `json:"id"`
	Name string `json:"name"`
	Text string `json:"text"`
}

type message struct {
	ID         string          `json:"id"`
	Model      string          `json:"model"`
	StopReason string          `json:"stop_reason"`
	Content    []contentBlock  `json:"content"`
	Usage      *anthropicUsage `json:"usage"`
}

type apiError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

type streamEvent struct {
	Type         string        `json:"type"`
	Message      *message      `json:"message"`
	ContentBlock *contentBlock `json:"content_block"`
	Delta        *struct {
		Type       string `json:"type"`
		Text       string `json:"text"`
		StopReason string `json:"stop_reason"`
	} `json:"delta"`
	Usage *anthropicUsage `json:"usage"`
	Error *apiError       `json:"error"`
}

func addBlock(r *genaicall.Result, b contentBlock, capture bool) {
	switch b.Type {
	case "tool_use", "server_tool_use":
		r.AddToolCall(b.Name, b.ID)
	case "text":
		if capture {
			r.Text.WriteString(b.Text)
		}
	}
}

// ParseResponse reads a message body into r.
func (p *Parser) ParseResponse(b []byte, r *genaicall.Result, capture bool) {
	var m message
	if json.Unmarshal(b, &m) != nil {
		return
	}
	r.Parsed = true
	r.ID, r.Model = m.ID, m.Model
	r.AddFinish(m.StopReason)
	for _, blk := range m.Content {
		addBlock(r, blk, capture)
	}
	p.merge(m.Usage, r)
}

// ParseEvent reads one stream event's data into r. It reports whether the
// caller gets the event (always) and whether it ends the stream.
func (p *Parser) ParseEvent(data []byte, r *genaicall.Result, capture bool) (keep, terminal bool) {
	var ev streamEvent
	if json.Unmarshal(data, &ev) != nil {
		return true, false
	}
	r.Parsed = true
	switch ev.Type {
	case "message_start":
		if m := ev.Message; m != nil {
			r.ID, r.Model = m.ID, m.Model
			p.merge(m.Usage, r)
		}
	case "content_block_start":
		if ev.ContentBlock != nil {
			addBlock(r, *ev.ContentBlock, capture)
		}
	case "content_block_delta":
		if capture && ev.Delta != nil && ev.Delta.Type == "text_delta" {
			r.Text.WriteString(ev.Delta.Text)
		}
	case "message_delta":
		if ev.Delta != nil {
			r.AddFinish(ev.Delta.StopReason)
		}
		p.merge(ev.Usage, r)
	case "message_stop":
		return true, true
	case "error":
		if e := ev.Error; e != nil {
			r.ErrType, r.ErrMsg = e.Type, e.Message
		}
		if r.ErrType == "" {
			r.ErrType = "api_error"
		}
		return true, true
	}
	return true, false
}

// requestInfo is what a Messages request carries from a request body.
type requestInfo struct {
	Model       string
	Stream      bool
	Messages    json.RawMessage
	MaxTokens   *int64
	Temperature *float64
	TopP        *float64
}

// read sets info from the top-level members of a request body
// (genaicall.DecodeMembers). Messages is a slice of the body, not a copy.
func (info *requestInfo) read(fields []genaicall.Field) {
	genaicall.DecodeMembers(fields,
		genaicall.Member{Name: "model", Dst: &info.Model},
		genaicall.Member{Name: "stream", Dst: &info.Stream},
		genaicall.Member{Name: "messages", Dst: &info.Messages},
		genaicall.Member{Name: "max_tokens", Dst: &info.MaxTokens},
		genaicall.Member{Name: "temperature", Dst: &info.Temperature},
		genaicall.Member{Name: "top_p", Dst: &info.TopP})
}

// Describe reads a Messages request body: only its top-level members;
// the messages are neither decoded nor copied. endpoint is
// genaicall.Request.Endpoint.
func Describe(body []byte, endpoint int) genaicall.Request {
	var buf [16]genaicall.Field
	var info requestInfo
	if fields, ok := genaicall.ObjectFields(body, buf[:0]); ok {
		info.read(fields)
	}
	return genaicall.Request{
		Endpoint:    endpoint,
		Operation:   contract.OpChat,
		Model:       info.Model,
		Stream:      info.Stream,
		MaxTokens:   info.MaxTokens,
		Temperature: info.Temperature,
		TopP:        info.TopP,
		Input:       info.Messages,
		Parser:      &Parser{},
	}
}
