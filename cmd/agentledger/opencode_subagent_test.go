package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentledger/agentledger/internal/testbin"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// subagentTask is the task call that starts a background subagent
// (OpenCode with OPENCODE_EXPERIMENTAL_BACKGROUND_SUBAGENTS=1).
const subagentTask = `{"description":"child job","prompt":"CHILD please work","subagent_type":"general","background":true}`

// chatTurn is what routing needs to know of a chat completions request:
// the first user message (a subagent's session starts with its prompt),
// the last message's role, and the last user message.
type chatTurn struct {
	firstUser, lastUser, lastRole string
}

func chatTurnOf(r scriptedmodel.Request) chatTurn {
	c := chatTurn{lastUser: r.LastUserText()}
	msgs, _ := r.Body["messages"].([]any)
	for _, x := range msgs {
		if m, ok := x.(map[string]any); ok && m["role"] == "user" {
			c.firstUser = chatText(m["content"])
			break
		}
	}
	if len(msgs) > 0 {
		if last, ok := msgs[len(msgs)-1].(map[string]any); ok {
			c.lastRole, _ = last["role"].(string)
		}
	}
	return c
}

func chatText(c any) string {
	switch v := c.(type) {
	case string:
		return v
	case []any:
		var b strings.Builder
		for _, p := range v {
			if m, ok := p.(map[string]any); ok {
				if s, ok := m["text"].(string); ok {
					b.WriteString(s)
				}
			}
		}
		return b.String()
	}
	return ""
}

// subagentModel scripts a prompt containing "BG": the model starts a
// background subagent (launch), whose only model call (child) is held
// until release is closed; the parent's answer after the task call
// (after-launch) waits until the child's call has arrived, so the
// subagent surely runs when the host has its answer. The notification
// OpenCode posts when the subagent ends gets a short text
// (continuation); any other prompt a plain answer (other).
func subagentModel(release, stop <-chan struct{}) *scriptedmodel.Router {
	var once sync.Once
	arrived := make(chan struct{})
	text := func(s string) func(scriptedmodel.Request) scriptedmodel.Step {
		return func(scriptedmodel.Request) scriptedmodel.Step { return scriptedmodel.Step{Text: s} }
	}
	wait := func(ch <-chan struct{}) {
		select {
		case <-ch:
		case <-stop:
		}
	}
	return scriptedmodel.NewRouter(scriptedUsage,
		scriptedmodel.Rule{Name: "child", Match: func(r scriptedmodel.Request) bool { return strings.Contains(chatTurnOf(r).firstUser, "CHILD") },
			Hold: func(scriptedmodel.Request) {
				once.Do(func() { close(arrived) })
				wait(release)
			}, Answer: text("child result")},
		scriptedmodel.Rule{Name: "continuation", Match: func(r scriptedmodel.Request) bool { return strings.Contains(chatTurnOf(r).lastUser, "<task id=") },
			Answer: text("noted")},
		scriptedmodel.Rule{Name: "after-launch", Match: func(r scriptedmodel.Request) bool {
			c := chatTurnOf(r)
			return strings.Contains(c.firstUser, "BG") && c.lastRole == "tool"
		}, Hold: func(scriptedmodel.Request) { wait(arrived) }, Answer: text("launched")},
		scriptedmodel.Rule{Name: "launch", Match: func(r scriptedmodel.Request) bool { return strings.Contains(chatTurnOf(r).lastUser, "BG") },
			Answer: func(scriptedmodel.Request) scriptedmodel.Step {
				return scriptedmodel.Step{ToolCalls: []scriptedmodel.ToolCall{{Name: "task", Arguments: subagentTask}}}
			}},
		scriptedmodel.Rule{Name: "other", Answer: text("other")},
	)
}

// openCodeStack is a real opencode serve whose provider's baseURL is
// `agentledger opencode-proxy`'s model-wire proxy, the proxy in front of
// it, and the collector it exports to.
type openCodeStack struct {
	col                *testbin.LocalCollector
	serveURL, proxyURL string
}

// baseForm is how a stack's provider names the model-wire proxy (the
// README's forms): each test of a real opencode serve takes one.
type baseForm int

const (
	// baseProxy: opencode serve first, its config's baseURL the proxy's
	// URL on --model-listen.
	baseProxy baseForm = iota
	// baseProxyV1: the same with the upstream's path, <proxy>/v1.
	baseProxyV1
	// baseWritten: the proxy first, on a free port, writing the baseURL
	// into the config (--opencode-config); opencode serve after.
	baseWritten
)

// startOpenCodeStack starts the stack against the scripted model at
// modelURL, with extraEnv for opencode serve; TestOpenCodeSDK and
// TestOpenCodeSDKBackgroundSubagent share it.
func startOpenCodeStack(t *testing.T, modelURL string, form baseForm, extraEnv ...string) openCodeStack {
	t.Helper()
	return startOpenCodeStackExport(t, modelURL, []string{"OTEL_BSP_SCHEDULE_DELAY=50"}, form, extraEnv...)
}

// startOpenCodeStackExport is startOpenCodeStack with the proxy's export
// settings given (proxyEnv, for example the exporter's default schedule).
func startOpenCodeStackExport(t *testing.T, modelURL string, proxyEnv []string, form baseForm, extraEnv ...string) openCodeStack {
	t.Helper()
	oc := testbin.Require(t, testbin.EnvOpenCodeBin, "make opencode", openCodeBin)
	col := testbin.StartLocalCollector(t)
	addrs, err := testbin.FreeAddrs(3)
	if err != nil {
		t.Fatal(err)
	}
	serveAddr, proxyAddr, modelAddr := addrs[0], addrs[1], addrs[2]
	dir := t.TempDir()
	for _, d := range []string{"home", "config/opencode/node_modules", "data", "cache", "state", "project"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	baseURL := "http://" + modelAddr
	switch form {
	case baseProxyV1:
		baseURL += "/v1"
	case baseWritten:
		// What the proxy replaces.
		baseURL = "http://unwritten.invalid"
	}
	cfg, _ := json.Marshal(map[string]any{
		"autoupdate": false, "share": "disabled", "permission": map[string]any{"*": "allow"},
		"provider": map[string]any{"scripted": map[string]any{
			"npm": "@ai-sdk/openai-compatible", "name": "Scripted",
			"options": map[string]any{"baseURL": baseURL, "apiKey": "unused"},
			"models":  map[string]any{"scripted-model": map[string]any{"name": "Scripted Model"}},
		}},
		"model": "scripted/scripted-model", "small_model": "scripted/scripted-model",
	})
	// OpenCode would npm install its plugin SDK into its config directory
	// at start; these files make it look installed.
	const dep = `{"dependencies":{"@opencode-ai/plugin":"*"}}`
	for name, body := range map[string]string{"opencode.json": string(cfg), "package.json": dep,
		"package-lock.json": `{"lockfileVersion":3,"packages":{"":` + dep + `}}`} {
		if err := os.WriteFile(filepath.Join(dir, "config/opencode", name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	bin := testbin.BuildT(t, "cmd/agentledger")
	proxyArgs := []string{"opencode-proxy", "--listen", proxyAddr, "--upstream", "http://" + serveAddr,
		"--model-upstream", modelURL + "/v1"}
	startProxy := func() *testbin.Process {
		return testbin.StartT(t, "agentledger-opencode-proxy", append([]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + col.Addrs.OTLPHTTP,
		}, proxyEnv...), bin, proxyArgs...)
	}
	var proxy *testbin.Process
	if form == baseWritten {
		// The README's order: the proxy writes the baseURL, then the
		// server starts and reads it.
		config := filepath.Join(dir, "config/opencode/opencode.json")
		proxyArgs = append(proxyArgs, "--opencode-config", config, "--provider", "scripted", "--connect-timeout", "90s")
		proxy = startProxy()
		if err := testbin.Poll(ctx, 50*time.Millisecond, func() (bool, string, error) {
			select {
			case <-proxy.Done():
				return false, "", fmt.Errorf("the proxy exited: %v", proxy.Err())
			default:
			}
			raw, err := os.ReadFile(config)
			if err != nil {
				return false, "", err
			}
			return !strings.Contains(string(raw), "unwritten.invalid") && strings.Contains(string(raw), `"baseURL": "http://127.0.0.1:`), "baseURL not written yet", nil
		}); err != nil {
			t.Fatal(err)
		}
	} else {
		proxyArgs = append(proxyArgs, "--model-listen", modelAddr)
	}
	env := append([]string{
		"HOME=" + filepath.Join(dir, "home"),
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "XDG_DATA_HOME=" + filepath.Join(dir, "data"),
		"XDG_CACHE_HOME=" + filepath.Join(dir, "cache"), "XDG_STATE_HOME=" + filepath.Join(dir, "state"),
		"OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_SHARE=1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD=1", "OPENCODE_DISABLE_DEFAULT_PLUGINS=1", "OPENCODE_PURE=1",
	}, extraEnv...)
	serve, err := testbin.Start("opencode", filepath.Join(dir, "opencode.log"), filepath.Join(dir, "project"), env, oc,
		"serve", "--hostname", "127.0.0.1", "--port", testbin.Port(serveAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := serve.Stop(testbin.StopTimeout); err != nil {
			t.Logf("stop opencode: %v", err)
		}
		if t.Failed() {
			t.Logf("--- opencode log, last lines:\n%s", serve.Tail(30))
		}
	})
	if err := testbin.WaitReady(ctx, serve, "http://"+serveAddr+"/global/health"); err != nil {
		t.Fatal(err)
	}
	if proxy == nil {
		proxy = startProxy()
	}
	if err := testbin.WaitReady(ctx, proxy, "http://"+proxyAddr+"/global/health"); err != nil {
		t.Fatal(err)
	}
	return openCodeStack{col: col, serveURL: "http://" + serveAddr, proxyURL: "http://" + proxyAddr}
}

// TestOpenCodeSDKBackgroundSubagent runs the official TypeScript OpenCode
// SDK through `agentledger opencode-proxy` (with its model-wire proxy)
// against a real opencode serve: the first prompt starts a background
// subagent, the second is sent and answered while it runs. The session
// watch shows owes_work while the subagent runs and wakes when it ends;
// the second prompt's invocation is final with its own totals at once,
// the first's only after the subagent's work and the continuation it
// woke, each exactly what the scripted model answered for it.
func TestOpenCodeSDKBackgroundSubagent(t *testing.T) {
	t.Logf("scripted usage seed %d (AGENTLEDGER_USAGE_SEED=%d repeats it)", usageSeed, usageSeed)
	release, stop := make(chan struct{}), make(chan struct{})
	model := subagentModel(release, stop)
	srv := scriptedmodel.New(scriptedmodel.Options{Responder: model.Respond}).Start()
	// Registered before the stack's cleanups, so it runs after them: held
	// requests are let go (stop) before the server closes.
	t.Cleanup(srv.Close)
	// The host lets the subagent's model call go with POST /release.
	var releaseOnce sync.Once
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		releaseOnce.Do(func() { close(release) })
	}))
	t.Cleanup(gate.Close)
	stack := startOpenCodeStack(t, srv.URL(), baseProxyV1, "OPENCODE_EXPERIMENTAL_BACKGROUND_SUBAGENTS=1")
	// First of the cleanups: a failed test must not leave opencode serve's
	// shutdown waiting on a held request.
	t.Cleanup(func() { close(stop) })

	lines := runHost(t, "opencode_subagent.test.mjs", []string{
		"PROXY_URL=" + stack.proxyURL, "OPENCODE_URL=" + stack.serveURL,
		"STATUS_URL=http://" + stack.col.Addrs.Status, "RELEASE_URL=" + gate.URL + "/release",
	})
	ids := map[string]string{}
	for _, l := range lines {
		ids[l.Kind] = l.ID
	}
	if ids["first"] == "" || ids["second"] == "" || len(lines) != 2 {
		t.Fatalf("the host reported %v", lines)
	}
	closed := closedSummaries(t, stack.col.Addrs.TracesFile, 2)
	t.Logf("the scripted model answered %v", model.Labels())
	check := func(what, id string, jobs, conts int64, rules ...string) {
		t.Helper()
		s, ok := closed[id]
		want, n := model.Sum(rules...)
		switch {
		case !ok:
			t.Errorf("%s invocation %s: no closing summary", what, id)
		case s.Status != "final":
			t.Errorf("%s invocation %s: %s %v", what, id, s.Status, s.IncompleteReasons)
		case s.InputTokens != int64(want.InputTokens) || s.OutputTokens != int64(want.OutputTokens) ||
			s.CacheReadTokens != int64(want.CacheReadTokens) || s.ReasoningTokens != int64(want.ReasoningTokens) ||
			s.ModelCalls != int64(n) || s.BackgroundJobs != jobs || s.Continuations != conts:
			t.Errorf("%s invocation %s: in %d out %d cache read %d reasoning %d calls %d jobs %d continuations %d; "+
				"the scripted model answered %+v in %d requests for %v (%v)", what, id, s.InputTokens, s.OutputTokens,
				s.CacheReadTokens, s.ReasoningTokens, s.ModelCalls, s.BackgroundJobs, s.Continuations, want, n, rules, model.Labels())
		}
	}
	check("first", ids["first"], 1, 1, "launch", "after-launch", "child", "continuation")
	check("second", ids["second"], 0, 0, "other")
	// The balance: every request the scripted model answered is on one of
	// the two.
	if _, n := model.Sum("launch", "after-launch", "child", "continuation", "other"); n != len(model.Answered()) {
		t.Errorf("the scripted model answered requests no rule of the two prompts names: %v", model.Labels())
	}
	if len(closed) != 2 {
		t.Errorf("%d invocations closed, want the two prompts': %v", len(closed), closed)
	}
}
