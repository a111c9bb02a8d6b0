package otelopenai

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/agentledger/agentledger/instrument/internal/genaicall"
	"github.com/agentledger/agentledger/instrument/internal/openaiwire"
)

// oracleInfo is how the middleware read a request body before it read
// only the top-level members: the whole body decoded with json.Unmarshal.
type oracleInfo struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	Messages            json.RawMessage `json:"messages"`
	Input               json.RawMessage `json:"input"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxOutputTokens     *int64          `json:"max_output_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
}

// oracleIncludeUsage is how the middleware added include_usage before it
// spliced it in: the body decoded into a map and encoded again.
func oracleIncludeUsage(body []byte) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, err
	}
	so := map[string]json.RawMessage{}
	if raw, ok := fields["stream_options"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &so); err != nil {
			return nil, err
		}
	}
	so["include_usage"] = json.RawMessage("true")
	raw, err := json.Marshal(so)
	if err != nil {
		return nil, err
	}
	fields["stream_options"] = raw
	return json.Marshal(fields)
}

// oracleDescribe is describe as it was.
func oracleDescribe(op operation, body []byte) (info oracleInfo, sent []byte, injected bool) {
	_ = json.Unmarshal(body, &info)
	if op == opChat && info.Stream && (info.StreamOptions == nil || info.StreamOptions.IncludeUsage == nil || !*info.StreamOptions.IncludeUsage) {
		if nb, err := oracleIncludeUsage(body); err == nil {
			return info, nb, true
		}
	}
	return info, nil, false
}

func samePtr[T comparable](a, b *T) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

func decodeAny(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("sent body %q is not JSON: %v", b, err)
	}
	return v
}

// The endpoints, as the tests name them.
type operation = openaiwire.Operation

const (
	opChat       = openaiwire.Chat
	opResponses  = openaiwire.Responses
	opEmbeddings = openaiwire.Embeddings
)

// checkDescribe checks describe against oracleDescribe: the same request
// attributes, include_usage added to the same bodies, and the body sent
// means what the old one meant.
func checkDescribe(t *testing.T, op operation, body []byte) {
	t.Helper()
	orig := bytes.Clone(body)
	r := describe(op, body)
	want, wantBody, wantInjected := oracleDescribe(op, orig)
	if !bytes.Equal(body, orig) {
		t.Fatalf("describe changed the caller's body %q to %q", orig, body)
	}
	wantInput := want.Messages
	if len(wantInput) == 0 {
		wantInput = want.Input
	}
	var wantMax *int64
	for _, v := range []*int64{want.MaxCompletionTokens, want.MaxTokens, want.MaxOutputTokens} {
		if v != nil {
			wantMax = v
			break
		}
	}
	if r.Model != want.Model || !bytes.Equal(r.Input, wantInput) || !samePtr(r.MaxTokens, wantMax) ||
		!samePtr(r.Temperature, want.Temperature) || !samePtr(r.TopP, want.TopP) {
		t.Errorf("describe(%q) = model %q input %q max %v temp %v top_p %v; want %q %q %v %v %v", body,
			r.Model, r.Input, r.MaxTokens, r.Temperature, r.TopP, want.Model, wantInput, wantMax, want.Temperature, want.TopP)
	}
	injected := openaiwire.Injected(r.Parser)
	if injected != wantInjected || (r.Body != nil) != injected {
		t.Fatalf("describe(%q): injected %v (body %q), want %v", body, injected, r.Body, wantInjected)
	}
	if injected && !reflect.DeepEqual(decodeAny(t, r.Body), decodeAny(t, wantBody)) {
		t.Errorf("describe(%q) sent %q, which means other than %q", body, r.Body, wantBody)
	}
}

func describe(op operation, body []byte) genaicall.Request { return op.Describe(body) }

// requestSeeds are request bodies describe is checked on.
var requestSeeds = []string{
	`{"model":"gpt","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
	`{"model":"gpt","stream":true,"stream_options":{"include_usage":true},"messages":[]}`,
	`{"model":"gpt","stream":true,"stream_options":{"include_usage":false},"messages":[]}`,
	`{"model":"gpt","stream":true,"stream_options":{"include_obfuscation":false},"messages":[]}`,
	`{"model":"gpt","stream":true,"stream_options":{"include_obfuscation":false,"include_usage":false}}`,
	`{"model":"gpt","stream":true,"stream_options":{}}`,
	`{"model":"gpt","stream":true,"stream_options":null}`,
	`{"model":"gpt","stream":true,"stream_options":[]}`,
	`{"model":"gpt","stream":true,"stream_options":"x"}`,
	`{"model":"gpt","stream":true,"stream_options":{"include_usage":1}}`,
	`{"model":"gpt","stream":true,"stream_options":{"include_usage":false,"include_usage":false}}`,
	`{"model":"gpt","stream":true,"stream_options":{"include_usage":true},"stream_options":{"include_usage":false}}`,
	`{"model":"gpt","stream":true,"Stream_Options":{"include_usage":true}}`,
	`{"model":"gpt","stream":true,"Stream_Options":{"include_usage":false}}`,
	`{"model":"gpt","stream":true,"stream\u005foptions":{"include\u005fusage":false}}`,
	`{"model":"gpt","stream":true,"stream_options":{"nested":{"include_usage":false},"include_usage":false}}`,
	" {\n  \"stream\" : true ,\n  \"stream_options\" : { \"include_usage\" : false } \n}\n",
	"{\"stream\":true}  \n",
	`{"stream":true,"stream":false}`,
	`{"STREAM":true,"ſtream":true,"MODEL":"x","model":5}`,
	`{"model":"a","temperature":"x","top_p":0.5,"max_tokens":7,"max_output_tokens":9,"max_completion_tokens":null}`,
	`{"model":"a","messages":null,"input":"hello"}`,
	`{"model":"a","input":[{"role":"user","content":"<b>&</b>"}],"stream":true}`,
	"{\"model\":\"\xff\",\"stream\":true,\"\xfe\":\"\xfd\"}",
	`{"stream":true,"messages":[1,]}`,
	`[{"stream":true}]`, `null`, ``, `{"stream":true}x`,
}

func TestDescribeMatchesDecoding(t *testing.T) {
	for _, s := range requestSeeds {
		for _, op := range []operation{opChat, opResponses, opEmbeddings} {
			checkDescribe(t, op, []byte(s))
		}
	}
}

// TestIncludeUsageSplice checks the bytes sent upstream: include_usage
// spliced in, every other byte as the caller wrote it.
func TestIncludeUsageSplice(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"stream":true,"messages":[]}`, `{"stream":true,"messages":[],"stream_options":{"include_usage":true}}`},
		{"{\"stream\" : true \n}\n", "{\"stream\" : true,\"stream_options\":{\"include_usage\":true} \n}\n"},
		{`{"stream":true,"stream_options":{"include_usage":false}}`, `{"stream":true,"stream_options":{"include_usage":true}}`},
		{`{"stream":true,"stream_options":{ "include_usage" : false }}`, `{"stream":true,"stream_options":{ "include_usage" : true }}`},
		{`{"stream":true,"stream_options":{"include_usage":null,"x":1}}`, `{"stream":true,"stream_options":{"include_usage":true,"x":1}}`},
		{`{"stream":true,"stream_options":{"include_obfuscation":false}}`, `{"stream":true,"stream_options":{"include_usage":true,"include_obfuscation":false}}`},
		{`{"stream":true,"stream_options":{ }}`, `{"stream":true,"stream_options":{"include_usage":true }}`},
		{`{"stream":true,"stream_options":null}`, `{"stream":true,"stream_options":{"include_usage":true}}`},
		{`{"stream_options":{"a":{"include_usage":false}},"stream":true}`, `{"stream_options":{"include_usage":true,"a":{"include_usage":false}},"stream":true}`},
		{`{"stream_options":{"include_usage":false},"stream":true,"stream_options":null}`,
			`{"stream_options":{"include_usage":true},"stream":true,"stream_options":{"include_usage":true}}`},
		{`{"stream":true,"input":"<b>é\u00e9</b>"}`, `{"stream":true,"input":"<b>é\u00e9</b>","stream_options":{"include_usage":true}}`},
		{`{"stream":true,"Stream_Options":{"include_usage":false}}`, `{"stream":true,"Stream_Options":{"include_usage":false},"stream_options":{"include_usage":true}}`},
	} {
		r := describe(opChat, []byte(c.in))
		if string(r.Body) != c.want || !openaiwire.Injected(r.Parser) {
			t.Errorf("describe(%s) sends %s (injected %v), want %s", c.in, r.Body, openaiwire.Injected(r.Parser), c.want)
		}
	}
	// Left as they are: usage asked for, not streamed, not an object
	// this reads, a stream_options that is not an object.
	for _, in := range []string{
		`{"stream":true,"stream_options":{"include_usage":true}}`,
		`{"stream":false,"stream_options":{"include_usage":false}}`,
		`{"stream":true,"stream_options":[]}`,
		`{"stream":true,"stream_options":true}`,
		`{"stream":true,"messages":[}`,
		`{"stream":true} {}`,
		`[{"stream":true}]`,
		`{"stream":true,"messages":"` + strings.Repeat("x", 100) + "\x00\"}",
	} {
		if r := describe(opChat, []byte(in)); r.Body != nil || openaiwire.Injected(r.Parser) {
			t.Errorf("describe(%s) sends %s, want the body unchanged", in, r.Body)
		}
	}
}

// FuzzDescribe checks describe against the decoding it replaces.
func FuzzDescribe(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, op := range []operation{opChat, opResponses} {
			checkDescribe(t, op, body)
		}
	})
}
