package genaicall

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// objectSeeds are bodies ObjectFields is checked on: request bodies as
// the SDKs send them, and the edges of JSON syntax.
var objectSeeds = []string{
	`{"model":"m","stream":true,"stream_options":{"include_usage":false},"messages":[{"role":"user","content":"hi"}]}`,
	" \t\r\n{ \"a\" : 1 , \"b\":[ ] ,\"c\":{ }, \"d\" :null}\n",
	`{}`, ` { } `, `{"a":{"b":{"c":[1,-0.5e+3,2E-2,"\u00e9\"\\\/\b\f\n\r\t"]}}}`,
	`{"a":1}{"b":2}`, `{"a":1,}`, `{,}`, `{"a"}`, `{"a":}`, `{"a":01}`, `{"a":-}`, `{"a":1.}`, `{"a":1e}`,
	`{"a":.5}`, `{"a":tru}`, `{"a":nul}`, `{"a":"\x"}`, `{"a":"\u12"}`, "{\"a\":\"\x01\"}", "{\"a\":\"\xff\xfe\"}",
	`{"a":[1,]}`, `{"a":[,1]}`, `{"a":"unterminated}`, `[1,2]`, `"s"`, `null`, ``, `{`, `{"a":1`,
	`{"STREAM":true,"ſtream":false,"Model":"x","mod\u0065l":"y"}`,
	`{"a":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
	`{"a":` + strings.Repeat("[", 9998) + strings.Repeat("]", 9998) + `}`,
}

// wantFields is the oracle: the members of b as encoding/json's Decoder
// reads them, and whether b is one JSON object.
func wantFields(b []byte) (keys []string, values [][]byte, ok bool) {
	t := bytes.TrimLeft(b, " \t\r\n")
	if !json.Valid(b) || len(t) == 0 || t[0] != '{' {
		return nil, nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		return nil, nil, false
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil, nil, false
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, nil, false
		}
		keys, values = append(keys, k.(string)), append(values, v)
	}
	return keys, values, true
}

func checkObjectFields(t *testing.T, b []byte) {
	t.Helper()
	fields, ok := ObjectFields(b, nil)
	keys, values, wantOK := wantFields(b)
	if ok != wantOK {
		t.Fatalf("ObjectFields(%q) ok = %v, encoding/json says %v", b, ok, wantOK)
	}
	if !ok {
		return
	}
	if len(fields) != len(keys) {
		t.Fatalf("ObjectFields(%q): %d fields, want %d", b, len(fields), len(keys))
	}
	for i, f := range fields {
		var k string
		if err := json.Unmarshal(f.Key, &k); err != nil || k != keys[i] {
			t.Errorf("field %d key %s (%v), want %q", i, f.Key, err, keys[i])
		}
		if !f.Is(keys[i], false) || !f.Is(strings.ToUpper(keys[i]), true) {
			t.Errorf("field %d key %s is not %q", i, f.Key, keys[i])
		}
		if !bytes.Equal(f.Value, values[i]) || !bytes.Equal(b[f.At:f.At+len(f.Value)], f.Value) {
			t.Errorf("field %d value %q at %d, want %q", i, f.Value, f.At, values[i])
		}
	}
}

func TestObjectFields(t *testing.T) {
	for _, s := range objectSeeds {
		checkObjectFields(t, []byte(s))
	}
}

func TestFieldIs(t *testing.T) {
	fields, ok := ObjectFields([]byte(`{"STREAM":1,"ſtream":2,"mod\u0065l":3,"stream_options":4}`), nil)
	if !ok {
		t.Fatal("not an object")
	}
	for i, c := range []struct {
		name        string
		exact, fold bool
	}{{"stream", false, true}, {"stream", false, true}, {"model", true, true}, {"stream_options", true, true}} {
		if got := fields[i].Is(c.name, false); got != c.exact {
			t.Errorf("%s.Is(%q, false) = %v", fields[i].Key, c.name, got)
		}
		if got := fields[i].Is(c.name, true); got != c.fold {
			t.Errorf("%s.Is(%q, true) = %v", fields[i].Key, c.name, got)
		}
	}
}

// FuzzObjectFields checks ObjectFields against encoding/json: the same
// bodies are objects, with the same members and values.
func FuzzObjectFields(f *testing.F) {
	for _, s := range objectSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkObjectFields(t, b) })
}
