package otelopencode

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestProviderConfig(t *testing.T) {
	const proxy = "http://127.0.0.1:4321"
	for _, c := range []struct {
		name, in, id, url string
		// want is the provider entry after, or the error's text.
		want, err string
	}{
		{name: "new file", in: "", id: "openai", url: proxy, want: `{"options":{"baseURL":"http://127.0.0.1:4321"}}`},
		{name: "keeps the rest", in: `{"model":"x/y","provider":{"x":{"npm":"@ai-sdk/openai-compatible","options":{"apiKey":"k","baseURL":"https://api.example/v1"},"models":{"y":{}}}}}`,
			id: "x", url: proxy, want: `{"models":{"y":{}},"npm":"@ai-sdk/openai-compatible","options":{"apiKey":"k","baseURL":"http://127.0.0.1:4321"}}`},
		{name: "null options", in: `{"provider":{"x":{"options":null}}}`, id: "x", url: proxy, want: `{"options":{"baseURL":"http://127.0.0.1:4321"}}`},
		{name: "empty id", in: "", id: "", url: proxy, err: "empty provider id"},
		{name: "relative url", in: "", id: "x", url: "/v1", err: "not an http or https URL"},
		{name: "other scheme", in: "", id: "x", url: "ftp://h/", err: "not an http or https URL"},
		{name: "jsonc", in: "{// comment\n}", id: "x", url: proxy, err: "not a JSON object"},
		{name: "array", in: "[]", id: "x", url: proxy, err: "not a JSON object"},
		{name: "null", in: "null", id: "x", url: proxy, err: "null"},
		{name: "provider not an object", in: `{"provider":[]}`, id: "x", url: proxy, err: "provider is []interface {}"},
		{name: "entry not an object", in: `{"provider":{"x":"y"}}`, id: "x", url: proxy, err: "provider.x is string"},
		{name: "options not an object", in: `{"provider":{"x":{"options":1}}}`, id: "x", url: proxy, err: "provider.x.options is float64"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := ProviderConfig([]byte(c.in), c.id, c.url)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Model    string                     `json:"model"`
				Provider map[string]json.RawMessage `json:"provider"`
			}
			if err := json.Unmarshal(out, &doc); err != nil {
				t.Fatalf("%s: %v", out, err)
			}
			var entry any
			_ = json.Unmarshal(doc.Provider[c.id], &entry)
			got, _ := json.Marshal(entry)
			if string(got) != c.want {
				t.Errorf("provider.%s = %s, want %s", c.id, got, c.want)
			}
			if strings.Contains(c.in, `"model"`) && doc.Model != "x/y" {
				t.Errorf("the model setting was lost: %s", out)
			}
		})
	}
}

func TestWriteProviderConfig(t *testing.T) {
	path := filepath.Join(t.TempDir(), "opencode.json")
	if err := WriteProviderConfig(path, "p", "http://127.0.0.1:1/"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path+".bad", []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteProviderConfig(path+".bad", "p", "http://127.0.0.1:1/"); err == nil {
		t.Error("no error for a malformed file")
	}
	raw, err := os.ReadFile(path)
	if err != nil || !strings.Contains(string(raw), `"baseURL": "http://127.0.0.1:1/"`) {
		t.Errorf("%s %v", raw, err)
	}
}

func TestWithModelProxyValidates(t *testing.T) {
	for _, up := range []string{"api.openai.com/v1", "ftp://h", "http://", ":"} {
		if _, err := New("http://127.0.0.1:1", nil, WithModelProxy(up)); err == nil || !strings.Contains(err.Error(), "WithModelProxy") {
			t.Errorf("upstream %q: err %v", up, err)
		}
	}
	c, err := New("http://127.0.0.1:1", nil, WithModelProxy("https://api.openai.com/v1"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Shutdown(t.Context()) }()
	if !strings.HasPrefix(c.ModelProxyURL(), "http://127.0.0.1:") {
		t.Errorf("proxy URL %q", c.ModelProxyURL())
	}
	fixed, err := New("http://127.0.0.1:1", nil, WithModelProxy("http://127.0.0.1:9/v1"), WithModelProxyAddress("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = fixed.Shutdown(t.Context()) }()
	if _, err := New("http://127.0.0.1:1", nil, WithModelProxy("http://127.0.0.1:9/v1"), WithModelProxyAddress("256.0.0.1:x")); err == nil {
		t.Error("no error for a bad listen address")
	}
	plain, err := New("http://127.0.0.1:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if plain.ModelProxyURL() != "" {
		t.Errorf("a Client without WithModelProxy has proxy %q", plain.ModelProxyURL())
	}
}

// TestModelProxyBaseForms: the provider's baseURL may be the model-wire
// proxy's URL or that URL and the upstream's /v1; both reach the upstream
// at /v1/..., never /v1/v1/....
func TestModelProxyBaseForms(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"data":[]}`)
	}))
	defer up.Close()
	c, err := New("http://127.0.0.1:1", nil, WithModelProxy(up.URL+"/v1"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Shutdown(t.Context()) }()
	for _, base := range []string{c.ModelProxyURL(), c.ModelProxyURL() + "/v1"} {
		res, err := http.Get(base + "/models")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET %s/models: %s", base, res.Status)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"GET /v1/models", "GET /v1/models"}; !slices.Equal(paths, want) {
		t.Errorf("upstream got %q, want %q", paths, want)
	}
}
