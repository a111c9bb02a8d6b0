package openaiwire

import (
	"bytes"
	"encoding/json"

	"github.com/agentledger/agentledger/instrument/internal/genaicall"
)

// What a request body says (Describe), and the include_usage option a
// streamed chat completion needs so that its last chunk carries usage.

// requestInfo is what Describe reads from a request body.
type requestInfo struct {
	Model         string
	Stream        bool
	StreamOptions *struct {
		IncludeUsage *bool `json:"include_usage"`
	}
	Messages            json.RawMessage
	Input               json.RawMessage
	MaxCompletionTokens *int64
	MaxTokens           *int64
	MaxOutputTokens     *int64
	Temperature         *float64
	TopP                *float64
}

// read sets info from the top-level members of a request body
// (genaicall.DecodeMembers). Messages and Input are slices of the body,
// not copies.
func (info *requestInfo) read(fields []genaicall.Field) {
	genaicall.DecodeMembers(fields,
		genaicall.Member{Name: "model", Dst: &info.Model},
		genaicall.Member{Name: "stream", Dst: &info.Stream},
		genaicall.Member{Name: "stream_options", Dst: &info.StreamOptions},
		genaicall.Member{Name: "messages", Dst: &info.Messages},
		genaicall.Member{Name: "input", Dst: &info.Input},
		genaicall.Member{Name: "max_completion_tokens", Dst: &info.MaxCompletionTokens},
		genaicall.Member{Name: "max_tokens", Dst: &info.MaxTokens},
		genaicall.Member{Name: "max_output_tokens", Dst: &info.MaxOutputTokens},
		genaicall.Member{Name: "temperature", Dst: &info.Temperature},
		genaicall.Member{Name: "top_p", Dst: &info.TopP})
}

// Describe reads a request body for op. A streamed chat request that does
// not ask for usage is sent asking for it; the parser then hides the
// usage-only chunk from the caller. Only the body's top-level members are
// looked at; the messages are neither decoded nor copied.
func (op Operation) Describe(body []byte) genaicall.Request {
	var buf [16]genaicall.Field
	var info requestInfo
	fields, ok := genaicall.ObjectFields(body, buf[:0])
	if ok {
		info.read(fields)
	}
	r := genaicall.Request{
		Endpoint:    int(op),
		Operation:   op.Name(),
		Model:       info.Model,
		Stream:      info.Stream,
		Temperature: info.Temperature,
		TopP:        info.TopP,
		Input:       info.Messages,
	}
	if len(r.Input) == 0 {
		r.Input = info.Input
	}
	for _, v := range []*int64{info.MaxCompletionTokens, info.MaxTokens, info.MaxOutputTokens} {
		if v != nil {
			r.MaxTokens = v
			break
		}
	}
	p := parser{op: op}
	if ok && op == Chat && info.Stream && (info.StreamOptions == nil || info.StreamOptions.IncludeUsage == nil || !*info.StreamOptions.IncludeUsage) {
		if nb, ok := withIncludeUsage(body, fields); ok {
			r.Body = nb
			p.injected = true
		}
	}
	r.Parser = p
	return r
}

// splice is one edit of a body: text replaces body[at:end].
type splice struct {
	at, end int
	text    string
}

const includeUsage = `"include_usage":true`

// withIncludeUsage returns a copy of body, whose top-level members are
// fields, with stream_options.include_usage set to true: the value of
// each include_usage member in each stream_options object becomes true,
// or the member is added first in the object; a null stream_options
// becomes {"include_usage":true}, and a missing one is added last in the
// body. Every other byte is kept as it was. It reports false, and body is
// to be sent unchanged, when a stream_options is neither an object nor
// null.
func withIncludeUsage(body []byte, fields []genaicall.Field) ([]byte, bool) {
	var buf [4]splice
	edits := buf[:0]
	found := false
	for _, f := range fields {
		if !f.Is("stream_options", false) {
			continue
		}
		found = true
		switch f.Value[0] {
		case 'n':
			edits = append(edits, splice{f.At, f.At + len(f.Value), "{" + includeUsage + "}"})
		case '{':
			var ibuf [4]genaicall.Field
			inner, ok := genaicall.ObjectFields(f.Value, ibuf[:0])
			if !ok {
				return nil, false
			}
			set := false
			for _, g := range inner {
				if g.Is("include_usage", false) {
					edits = append(edits, splice{f.At + g.At, f.At + g.At + len(g.Value), "true"})
					set = true
				}
			}
			if !set {
				text := includeUsage
				if len(inner) > 0 {
					text += ","
				}
				edits = append(edits, splice{f.At + 1, f.At + 1, text})
			}
		default:
			return nil, false
		}
	}
	if !found {
		text := `"stream_options":{` + includeUsage + `}`
		var at int
		if n := len(fields); n > 0 {
			last := fields[n-1]
			at, text = last.At+len(last.Value), ","+text
		} else {
			at = bytes.LastIndexByte(body, '}')
		}
		if at < 0 {
			return nil, false
		}
		edits = append(edits, splice{at, at, text})
	}
	size := len(body)
	for _, e := range edits {
		size += len(e.text) - (e.end - e.at)
	}
	out := make([]byte, 0, size)
	prev := 0
	for _, e := range edits {
		out = append(append(out, body[prev:e.at]...), e.text...)
		prev = e.end
	}
	return append(out, body[prev:]...), true
}

// Injected reports whether p, the Parser of a Request that Describe
// returned, reads a stream that was sent asking for the usage chunk its
// caller did not ask for (the chunk is then hidden from the caller).
func Injected(p genaicall.Parser) bool {
	pp, ok := p.(parser)
	return ok && pp.injected
}
