package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func envOf(kv ...string) environ {
	m := map[string]string{}
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		m[k] = v
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestReadExportConfig(t *testing.T) {
	c, err := readExportConfig(envOf())
	if err != nil || c.exporter != "otlp" || c.protocol != "http/protobuf" || c.shutdown != defaultShutdown {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	c, err = readExportConfig(envOf("OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf", "AGENTLEDGER_SHUTDOWN_TIMEOUT=2s"))
	if err != nil || c.protocol != "http/protobuf" || c.shutdown != 2*time.Second {
		t.Fatalf("the traces protocol wins: %+v %v", c, err)
	}
	c, err = readExportConfig(envOf("OTEL_TRACES_EXPORTER=none"))
	if err != nil || c.exporter != "none" {
		t.Fatalf("none: %+v %v", c, err)
	}
	for env, want := range map[string]string{
		"OTEL_TRACES_EXPORTER=zipkin":           `OTEL_TRACES_EXPORTER="zipkin": agentledger exports with otlp or none`,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/json": `OTEL_EXPORTER_OTLP_PROTOCOL="http/json": agentledger exports OTLP over grpc or http/protobuf`,
		"AGENTLEDGER_SHUTDOWN_TIMEOUT=soon":     `AGENTLEDGER_SHUTDOWN_TIMEOUT="soon": want a positive duration`,
		"AGENTLEDGER_SHUTDOWN_TIMEOUT=-1s":      "want a positive duration",
	} {
		if _, err := readExportConfig(envOf(env)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", env, err, want)
		}
	}
}

func TestParseProxyFlags(t *testing.T) {
	var stderr bytes.Buffer
	io := stdio{err: &stderr}
	c, err := parseProxyFlags([]string{"--upstream", "http://127.0.0.1:4096"}, io)
	if err != nil || c.listen != "127.0.0.1:4097" || c.upstream.String() != "http://127.0.0.1:4096" {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	c, err = parseProxyFlags([]string{"--listen", "127.0.0.1:0", "--upstream", "https://oc.internal", "--model-upstream", "https://api.openai.com/v1", "--model-listen", "127.0.0.1:0"}, io)
	if err != nil || c.modelUpstream != "https://api.openai.com/v1" || c.modelListen != "127.0.0.1:0" {
		t.Fatalf("all flags: %+v %v", c, err)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, "--upstream is required"},
		{[]string{"--upstream", "127.0.0.1:4096"}, "want an http or https URL with a host"},
		{[]string{"--upstream", "http://x", "--listen", "4097"}, `--listen "4097": want host:port`},
		{[]string{"--upstream", "http://x", "--model-listen", "127.0.0.1:0"}, "--model-listen needs --model-upstream"},
		{[]string{"--upstream", "http://x", "--model-upstream", "api.openai.com"}, `--model-upstream "api.openai.com"`},
		{[]string{"--upstream", "http://x", "extra"}, `unexpected argument "extra"`},
		{[]string{"--upstream", "http://x", "--opencode-config", "o.json"}, "--opencode-config needs --model-upstream"},
		{[]string{"--upstream", "http://x", "--model-upstream", "http://m/v1", "--opencode-config", "o.json", "--provider", ""}, "--provider is empty"},
		{[]string{"--nope"}, "flag provided but not defined"},
	} {
		if _, err := parseProxyFlags(tt.args, io); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: error %v, want %q", tt.args, err, tt.want)
		}
	}
}

func TestDispatch(t *testing.T) {
	var out, errs bytes.Buffer
	io := stdio{in: strings.NewReader(""), out: &out, err: &errs}
	if code := run(context.Background(), envOf(), []string{"agentledger"}, io); code != 2 || !strings.Contains(errs.String(), "agentledger claude [claude args...]") {
		t.Errorf("no subcommand: %d %q", code, errs.String())
	}
	errs.Reset()
	if code := run(context.Background(), envOf(), []string{"agentledger", "gemini"}, io); code != 2 || !strings.Contains(errs.String(), `unknown subcommand "gemini"`) {
		t.Errorf("unknown: %d %q", code, errs.String())
	}
	errs.Reset()
	if code := run(context.Background(), envOf(), []string{"agentledger", "--help"}, io); code != 0 {
		t.Errorf("help: %d", code)
	}
	errs.Reset()
	// Called as claude with no real CLI to find: the claude drop-in says so.
	if code := run(context.Background(), envOf("PATH="+t.TempDir()), []string{"/usr/local/bin/claude", "-p"}, io); code != 127 || !strings.Contains(errs.String(), "AGENTLEDGER_CLAUDE_BIN") {
		t.Errorf("as claude: %d %q", code, errs.String())
	}
	errs.Reset()
	// Called as codex, likewise.
	if code := run(context.Background(), envOf("PATH="+t.TempDir()), []string{"/opt/agentledger/codex", "exec"}, io); code != 127 || !strings.Contains(errs.String(), "AGENTLEDGER_CODEX_BIN") {
		t.Errorf("as codex: %d %q", code, errs.String())
	}
	errs.Reset()
	// Linked as agentledger-claude and agentledger-codex (the READMEs'
	// names), likewise: the link's name is the subcommand, and the
	// arguments all go to the CLI (not read as a subcommand).
	for _, c := range []struct{ argv0, bin string }{
		{"/usr/local/bin/agentledger-claude", "AGENTLEDGER_CLAUDE_BIN"},
		{"agentledger-codex", "AGENTLEDGER_CODEX_BIN"},
	} {
		if code := run(context.Background(), envOf("PATH="+t.TempDir()), []string{c.argv0, "--version"}, io); code != 127 || !strings.Contains(errs.String(), c.bin) {
			t.Errorf("as %s: %d %q", c.argv0, code, errs.String())
		}
		errs.Reset()
	}
	if sc, ok := calledAs("/x/agentledger-opencode-proxy"); !ok || sc.name != "opencode-proxy" {
		t.Errorf("agentledger-opencode-proxy dispatches to %q, %v", sc.name, ok)
	}
	for _, name := range []string{"agentledger", "opencode-proxy", "opencode", "agentledger-gemini"} {
		if sc, ok := calledAs(name); ok {
			t.Errorf("%s dispatches to %q; want the subcommand from the arguments", name, sc.name)
		}
	}
	if code := run(context.Background(), envOf("OTEL_TRACES_EXPORTER=jaeger", "AGENTLEDGER_CLAUDE_BIN=/bin/true"), []string{"agentledger", "claude"}, io); code != 2 || !strings.Contains(errs.String(), "OTEL_TRACES_EXPORTER") {
		t.Errorf("bad export config: %d %q", code, errs.String())
	}
}

// TestClaudeBinSkipsItself: installed as claude on PATH, agentledger runs
// the next claude on PATH, never itself.
func TestClaudeBinSkipsItself(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	first, second := t.TempDir(), t.TempDir()
	if err := os.Symlink(self, filepath.Join(first, "claude")); err != nil {
		t.Fatal(err)
	}
	real := filepath.Join(second, "claude")
	if err := os.WriteFile(real, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := claudeBin(envOf("PATH=" + first + string(os.PathListSeparator) + second))
	if err != nil || got != real {
		t.Fatalf("claudeBin = %q, %v; want %q", got, err, real)
	}
	got, err = claudeBin(envOf("PATH="+first, "AGENTLEDGER_CLAUDE_BIN=/opt/claude"))
	if err != nil || got != "/opt/claude" {
		t.Fatalf("AGENTLEDGER_CLAUDE_BIN: %q %v", got, err)
	}
	if _, err := claudeBin(envOf("PATH=" + first)); err == nil {
		t.Fatal("only itself on PATH: want an error")
	}
}

// TestOpencodeProxyBaseURL: with --opencode-config the proxy writes the
// model-wire proxy's URL as the provider's baseURL before it waits for
// opencode serve (here never reached: the wait is cut at once); without,
// it prints both baseURL forms the model-wire proxy accepts.
func TestOpencodeProxyBaseURL(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	env := envOf("OTEL_TRACES_EXPORTER=none")
	path := filepath.Join(t.TempDir(), "opencode.json")
	if err := os.WriteFile(path, []byte(`{"model":"openai/gpt-test","provider":{"openai":{"options":{"apiKey":"k"}}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var errs bytes.Buffer
	code := runOpencodeProxy(ctx, env, []string{"--upstream", "http://127.0.0.1:1", "--model-upstream", "http://127.0.0.1:9/v1",
		"--model-listen", "127.0.0.1:0", "--opencode-config", path}, stdio{err: &errs})
	if code != 1 || !strings.Contains(errs.String(), "did not connect") {
		t.Errorf("exit %d, stderr %q; want 1, the event stream not connected", code, errs.String())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Model    string `json:"model"`
		Provider map[string]struct {
			Options map[string]string `json:"options"`
		} `json:"provider"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	opts := doc.Provider["openai"].Options
	if doc.Model != "openai/gpt-test" || opts["apiKey"] != "k" || !strings.HasPrefix(opts["baseURL"], "http://127.0.0.1:") ||
		!strings.Contains(errs.String(), fmt.Sprintf("set provider.openai.options.baseURL to %q in %s", opts["baseURL"], path)) {
		t.Errorf("opencode.json %s, stderr %q", raw, errs.String())
	}

	errs.Reset()
	code = runOpencodeProxy(ctx, env, []string{"--upstream", "http://127.0.0.1:1", "--model-upstream", "http://127.0.0.1:9/v1"}, stdio{err: &errs})
	line, _, _ := strings.Cut(errs.String(), "\n")
	const prefix = `agentledger opencode-proxy: the provider's baseURL in opencode.json: "baseURL": "http://127.0.0.1:`
	if code != 1 || !strings.HasPrefix(line, prefix) || !strings.HasSuffix(line, `/v1": the proxy drops one leading /v1)`) {
		t.Errorf("exit %d, first line %q", code, line)
	}
	if got, want := baseURLHint("http://127.0.0.1:4098", "https://api.anthropic.com"), `"baseURL": "http://127.0.0.1:4098"`; got != want {
		t.Errorf("hint for an upstream without a path %q, want %q", got, want)
	}
}
