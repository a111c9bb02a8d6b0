package otelcodex

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const proxyURL = "http://127.0.0.1:9"

func TestHostArgs(t *testing.T) {
	sdk := []string{"exec", "--experimental-json",
		"--config", `model_provider="scripted"`,
		"--config", `model_providers.scripted.base_url="http://model:1/v1"`,
		"--config", `model_providers.scripted.wire_api="responses"`,
		"--model", "gpt-5.5", "--sandbox", "danger-full-access", "--cd", "/work", "--skip-git-repo-check",
		"--config", `approval_policy="never"`, "resume", "thread-1"}
	for _, tc := range []struct {
		name     string
		args     []string
		mode     execMode
		provider string
		baseURL  string
		want     []string // nil: unchanged (modeOther)
	}{{
		name: "sdk resume", args: sdk, mode: modeExec, provider: "scripted", baseURL: "http://model:1/v1",
		want: slices.Concat(sdk[:5], []string{`model_providers.scripted.base_url="` + proxyURL + `"`}, sdk[6:17],
			[]string{"-c", `model_providers.scripted.base_url="` + proxyURL + `"`}, sdk[17:]),
	}, {
		name: "builtin provider, inline forms", mode: modeExec, provider: "openai", baseURL: "http://b/v1",
		args: []string{"-c", `openai_base_url="http://a/v1"`, "e", "--config=openai_base_url='http://b/v1'", "--json", "hi"},
		want: []string{"-c", `openai_base_url="` + proxyURL + `"`, "e", `--config=openai_base_url="` + proxyURL + `"`, "--json", "hi",
			"-c", `openai_base_url="` + proxyURL + `"`},
	}, {
		name: "prompt after --", mode: modeExec, provider: "openai",
		args: []string{"exec", "--json", "--", "-c is text here"},
		want: []string{"exec", "--json", "-c", `openai_base_url="` + proxyURL + `"`, "--", "-c is text here"},
	}, {
		name: "app-server", mode: modeAppServer, provider: "p", baseURL: "https://p/v1",
		args: []string{"-c", "model_provider=p", "-cmodel_providers.p.base_url=https://p/v1", "app-server"},
		want: []string{"-c", "model_provider=p", `-cmodel_providers.p.base_url="` + proxyURL + `"`, "app-server",
			"-c", `model_providers.p.base_url="` + proxyURL + `"`},
	}, {
		name: "a value that looks like a subcommand", mode: modeExec, provider: "openai",
		args: []string{"-m", "exec", "--profile", "app-server", "exec"},
		want: []string{"-m", "exec", "--profile", "app-server", "exec", "-c", `openai_base_url="` + proxyURL + `"`},
	},
		{name: "version", args: []string{"--version"}, mode: modeOther},
		{name: "login", args: []string{"login", "--with-api-key"}, mode: modeOther},
		{name: "schema", args: []string{"app-server", "generate-json-schema", "--out", "x"}, mode: modeOther},
		{name: "tui", args: []string{"-c", "model=x"}, mode: modeOther},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := readHostArgs(tc.args)
			if h.mode != tc.mode {
				t.Fatalf("mode %d, want %d", h.mode, tc.mode)
			}
			if h.mode == modeOther {
				return
			}
			e := resolveEndpoint(tc.args, h, t.TempDir(), func(string) string { return "" })
			if e.provider != tc.provider || e.baseURL != tc.baseURL {
				t.Errorf("endpoint %+v, want provider %q base URL %q", e, tc.provider, tc.baseURL)
			}
			if got := h.rewrite(tc.args, e, proxyURL); !slices.Equal(got, tc.want) {
				t.Errorf("rewrite:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestEndpointFromConfigFile(t *testing.T) {
	home := t.TempDir()
	toml := `# the user's
model = "gpt-5.5"
model_provider = "gateway"   # a comment

[model_providers.gateway]
name = "gateway"
base_url = "https://gateway.example/v1"
wire_api = "responses"

[model_providers.other]
base_url = "https://other.example/v1"
`
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	noEnv := func(string) string { return "" }
	args := []string{"exec", "hi"}
	e := resolveEndpoint(args, readHostArgs(args), home, noEnv)
	if e.provider != "gateway" || e.baseURL != "https://gateway.example/v1" || e.key != "model_providers.gateway.base_url" {
		t.Errorf("from config.toml: %+v", e)
	}
	// The command line wins over the file.
	args = []string{"exec", "-c", `model_provider="other"`, "hi"}
	if e := resolveEndpoint(args, readHostArgs(args), home, noEnv); e.baseURL != "https://other.example/v1" {
		t.Errorf("-c model_provider over config.toml: %+v", e)
	}
	// The built-in provider: OPENAI_BASE_URL when nothing else says.
	args = []string{"exec", "-c", `model_provider="openai"`, "hi"}
	env := func(k string) string {
		if k == "OPENAI_BASE_URL" {
			return "http://env/v1"
		}
		return ""
	}
	if e := resolveEndpoint(args, readHostArgs(args), home, env); e.baseURL != "http://env/v1" || e.key != "openai_base_url" {
		t.Errorf("OPENAI_BASE_URL: %+v", e)
	}
}

// FuzzRewrite checks the rewrite's invariant on any command line: it adds
// exactly one -c (two arguments), changes no argument but those that set
// the endpoint's key (to the proxy), and every -c of that key the result
// holds names the proxy.
func FuzzRewrite(f *testing.F) {
	f.Add("exec\x00--json\x00-c\x00model_provider=\"p\"\x00-c\x00model_providers.p.base_url=\"http://a\"\x00resume\x00t")
	f.Add("-c\x00openai_base_url=x\x00app-server")
	f.Add("exec\x00--config=model_provider=q\x00-cmodel_providers.q.base_url=y\x00--\x00-c")
	f.Fuzz(func(t *testing.T, joined string) {
		args := strings.Split(joined, "\x00")
		h := readHostArgs(args)
		if h.mode == modeOther {
			return
		}
		e := resolveEndpoint(args, h, t.TempDir(), func(string) string { return "" })
		got := h.rewrite(args, e, proxyURL)
		if len(got) != len(args)+2 {
			t.Fatalf("%q -> %q: %d arguments, want %d", args, got, len(got), len(args)+2)
		}
		added := slices.Concat(got[:h.insert], got[h.insert+2:])
		if got[h.insert] != "-c" || got[h.insert+1] != e.key+`="`+proxyURL+`"` {
			t.Fatalf("%q -> %q: added %q %q", args, got, got[h.insert], got[h.insert+1])
		}
		for i, a := range args {
			if added[i] == a {
				continue
			}
			if !strings.HasSuffix(added[i], e.key+`="`+proxyURL+`"`) {
				t.Fatalf("%q -> %q: argument %d changed to %q", args, got, i, added[i])
			}
		}
		g := readHostArgs(got)
		for _, c := range g.configs {
			if _, k, v, ok := configKV(got[c.i], c.inline); ok && k == e.key && tomlString(v) != proxyURL {
				t.Fatalf("%q -> %q: %s still %q", args, got, k, v)
			}
		}
	})
}
