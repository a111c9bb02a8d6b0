package otelanthropic

import (
	"bytes"
	"encoding/json"
	"testing"
)

// oracleInfo is how the middleware read a request body before it read
// only the top-level members: the whole body decoded with json.Unmarshal.
type oracleInfo struct {
	Model       string          `json:"model"`
	Stream      bool            `json:"stream"`
	Messages    json.RawMessage `json:"messages"`
	MaxTokens   *int64          `json:"max_tokens"`
	Temperature *float64        `json:"temperature"`
	TopP        *float64        `json:"top_p"`
}

func samePtr[T comparable](a, b *T) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// checkDescribe checks describe against json.Unmarshal of the whole body,
// and that the body is sent as it is.
func checkDescribe(t *testing.T, body []byte) {
	t.Helper()
	orig := bytes.Clone(body)
	r := opMessages.describe(body)
	var want oracleInfo
	_ = json.Unmarshal(orig, &want)
	if !bytes.Equal(body, orig) || r.Body != nil {
		t.Fatalf("describe(%q) changed the body or sends another (%q)", orig, r.Body)
	}
	if r.Model != want.Model || !bytes.Equal(r.Input, want.Messages) || !samePtr(r.MaxTokens, want.MaxTokens) ||
		!samePtr(r.Temperature, want.Temperature) || !samePtr(r.TopP, want.TopP) {
		t.Errorf("describe(%q) = model %q input %q max %v temp %v top_p %v; want %q %q %v %v %v", body,
			r.Model, r.Input, r.MaxTokens, r.Temperature, r.TopP, want.Model, want.Messages, want.MaxTokens, want.Temperature, want.TopP)
	}
}

var requestSeeds = []string{
	`{"model":"claude","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
	" {\n \"model\" : \"c\" , \"messages\" : [ 1 , {\"a\":null} ] }\n",
	`{"MODEL":"a","model":5,"Max_Tokens":3,"max_tokens":null,"temperature":"x","top_p":1e400}`,
	`{"messages":null,"messages":[1],"mod\u0065l":"e"}`,
	"{\"model\":\"\xff\",\"\xfe\":1}",
	`{"model":"a","messages":[1,]}`, `{"model":"a"}{}`, `[{"model":"a"}]`, `null`, ``,
}

func TestDescribeMatchesDecoding(t *testing.T) {
	for _, s := range requestSeeds {
		checkDescribe(t, []byte(s))
	}
}

// FuzzDescribe checks describe against the decoding it replaces.
func FuzzDescribe(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkDescribe(t, body) })
}
