package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/agentledger/internal/testbin"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// Where `make claude` and `make sdk-hosts` install what the host tests
// run, relative to the repository.
const (
	claudeCLI  = ".cache/claude/node_modules/@anthropic-ai/claude-code-linux-x64/claude"
	sdkModules = ".cache/sdk-hosts/node_modules"
	// envSDKModules overrides sdkModules; envNode names node (else PATH).
	envSDKModules = "AGENTLEDGER_SDK_MODULES"
	envNode       = "NODE_BIN"
)

// usageSeed seeds the scripted model's usage: random per run,
// AGENTLEDGER_USAGE_SEED repeats one.
var usageSeed = func() uint64 {
	if v, err := strconv.ParseUint(os.Getenv("AGENTLEDGER_USAGE_SEED"), 10, 64); err == nil {
		return v
	}
	return rand.Uint64()
}()

func scriptedUsage(seq int) scriptedmodel.Usage {
	r := rand.New(rand.NewPCG(usageSeed, uint64(seq)))
	in := 200 + r.IntN(8000)
	out := 5 + r.IntN(1500)
	return scriptedmodel.Usage{InputTokens: in, CacheReadTokens: r.IntN(in / 3), CacheCreationTokens: r.IntN(in / 3),
		OutputTokens: out, ReasoningTokens: r.IntN(out/2 + 1)}
}

// claudeModel answers like a model: a prompt asking for background work
// gets a Bash call with run_in_background running command, a tool result
// or a notification a short text, anything else a plain answer.
func claudeModel(command string) *scriptedmodel.Router {
	say := func(text string) func(scriptedmodel.Request) scriptedmodel.Step {
		return func(scriptedmodel.Request) scriptedmodel.Step { return scriptedmodel.Step{Text: text} }
	}
	return scriptedmodel.NewRouter(scriptedUsage,
		scriptedmodel.Rule{Name: "notification", Match: func(r scriptedmodel.Request) bool { return len(r.TaskNotifications()) > 0 },
			Answer: say("The tests passed.")},
		scriptedmodel.Rule{Name: "tool result", Match: func(r scriptedmodel.Request) bool { return len(r.ToolResults()) > 0 },
			Answer: say("The tests run in the background.")},
		scriptedmodel.Rule{Name: "launch", Match: func(r scriptedmodel.Request) bool { return strings.Contains(r.NewText(), "background") },
			Answer: func(scriptedmodel.Request) scriptedmodel.Step {
				return scriptedmodel.Step{ToolCalls: []scriptedmodel.ToolCall{scriptedmodel.BashCall(command, "Run the tests", true)}}
			}},
		scriptedmodel.Rule{Name: "plain", Answer: say("Hello from the scripted model.")},
	)
}

// hostLine is one line a host test reports.
type hostLine struct {
	Kind       string `json:"kind"`
	ID         string `json:"id"`
	Session    string `json:"session"`
	Plain      float64
	DropIn     float64 `json:"drop_in"`
	ModelCalls int64   `json:"model_calls"`
	// WokeAt is when a story's host saw the wake (Unix milliseconds).
	WokeAt float64 `json:"woke_at"`
	// OwedAtResult is what a story's host heard when it asked once.
	OwedAtResult bool `json:"owed_at_result"`
}

// runHost runs `node --test file` from hosttest, in a directory of its
// own that sees the installed SDKs, with env, and returns what it
// reported.
func runHost(t *testing.T, file string, env []string) []hostLine {
	t.Helper()
	node, ok := testbin.Locate(envNode)
	if !ok {
		if node, ok = lookNode(); !ok {
			testbin.Require(t, envNode, "apt-get install nodejs")
		}
	}
	modules := requireModules(t, hostSDKs[file])
	dir := t.TempDir()
	for _, f := range []string{file, "status.mjs", "story.mjs"} {
		b, err := os.ReadFile(filepath.Join("hosttest", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(modules, filepath.Join(dir, "node_modules")); err != nil {
		t.Fatal(err)
	}
	report := filepath.Join(dir, "report.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "--test-concurrency=1",
		// An SDK's open event stream must not keep node waiting.
		"--test-force-exit", file)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(), env...), "REPORT="+report)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test %s:\n%s", file, out)
	if err != nil {
		t.Fatalf("node --test %s: %v", file, err)
	}
	f, err := os.Open(report)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []hostLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l hostLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	return lines
}

// hostSDKs is the SDK each host program imports.
var hostSDKs = map[string]string{
	"claude.test.mjs":   "@anthropic-ai/claude-agent-sdk",
	"codex.test.mjs":    "@openai/codex-sdk",
	"opencode.test.mjs": "@opencode-ai/sdk",
	// The release and reattach stories (story_test.go).
	"claude_story.test.mjs":   "@anthropic-ai/claude-agent-sdk",
	"opencode_story.test.mjs": "@opencode-ai/sdk",
	"codex_story.test.mjs":    "@openai/codex-sdk",
}

// requireModules returns the installed SDKs' node_modules
// (envSDKModules, else sdkModules in the repository) when they hold sdk;
// missing, the test is skipped, or fails with AGENTLEDGER_E2E=1.
func requireModules(t *testing.T, sdk string) string {
	t.Helper()
	dir := os.Getenv(envSDKModules)
	if dir == "" {
		root, err := testbin.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir = filepath.Join(root, sdkModules)
	}
	if st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(sdk))); err == nil && st.IsDir() {
		return dir
	}
	msg := fmt.Sprintf("the host tests' SDK %s is not in %s (set %s or run make sdk-hosts)", sdk, dir, envSDKModules)
	if os.Getenv(testbin.EnvE2E) == "1" {
		t.Fatalf("%s; %s=1 makes this a failure", msg, testbin.EnvE2E)
	}
	t.Skip(msg)
	return ""
}

// closedSummaries waits until the collector's traces file holds n closed
// invocations (the file exporter writes in batches), and returns them.
func closedSummaries(t *testing.T, path string, n int) map[string]testbin.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var closed map[string]testbin.Summary
	err := testbin.Poll(ctx, 200*time.Millisecond, func() (bool, string, error) {
		sums, err := testbin.ReadSummaries(path)
		if err != nil && !os.IsNotExist(err) {
			return false, "", err
		}
		closed = testbin.Closed(sums)
		return len(closed) >= n, fmt.Sprintf("%d of %d invocations closed in %s", len(closed), n, path), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return closed
}

func lookNode() (string, bool) {
	p, err := exec.LookPath("node")
	return p, err == nil
}

// TestClaudeAgentSDK runs the official TypeScript Claude Agent SDK with
// pathToClaudeCodeExecutable set to `agentledger claude` (a link named
// claude), against the real CLI, the scripted model and the real
// collector: the host's messages equal the plain CLI's, the status API
// answers by the CLI's session id and the prompt's uuid, the watch wakes
// at each step, and the collector's totals balance the scripted model's.
func TestClaudeAgentSDK(t *testing.T) {
	cli := testbin.Require(t, "CLAUDE_BIN", "make claude", claudeCLI)
	t.Logf("scripted usage seed %d (AGENTLEDGER_USAGE_SEED=%d repeats it)", usageSeed, usageSeed)
	col := testbin.StartLocalCollector(t)
	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	command := fmt.Sprintf("for i in $(seq 1 1200); do [ -e %q ] && break; sleep 0.05; done; echo tests passed", gate)
	model := claudeModel(command)
	srv := scriptedmodel.New(scriptedmodel.Options{Responder: model.Respond}).Start()
	t.Cleanup(srv.Close)
	plainSrv := scriptedmodel.New(scriptedmodel.Options{Responder: claudeModel(command).Respond}).Start()
	t.Cleanup(plainSrv.Close)

	bin := testbin.BuildT(t, "cmd/agentledger")
	link := filepath.Join(dir, "bin", "claude")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	home, project := filepath.Join(dir, "home"), filepath.Join(dir, "project")
	for _, d := range []string{home, project} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lines := runHost(t, "claude.test.mjs", []string{
		"AGENTLEDGER_CLAUDE=" + link, "CLAUDE_CLI=" + cli,
		"MODEL_URL=" + srv.URL(), "PLAIN_MODEL_URL=" + plainSrv.URL(),
		"OTLP_HTTP=http://" + col.Addrs.OTLPHTTP, "STATUS_URL=http://" + col.Addrs.Status,
		"HOST_HOME=" + home, "HOST_DIR=" + project, "GATE=" + gate,
	})

	var ids []string
	for _, l := range lines {
		switch l.Kind {
		case "first_message_ms":
			t.Logf("first message after the query started: plain CLI %.0f ms, agentledger claude %.0f ms", l.Plain, l.DropIn)
		case "background":
			ids = append(ids, l.ID)
		}
	}
	if len(ids) != 1 {
		t.Fatalf("the host reported %v", lines)
	}
	// The balance: every request the drop-in's CLI made is in exactly one
	// final invocation, with the scripted model's usage.
	closed := closedSummaries(t, col.Addrs.TracesFile, len(lines)-1)
	var in, out, cacheRead, cacheCreate, calls int64
	for id, s := range closed {
		if s.Status != "final" {
			t.Errorf("invocation %s: %s %v", id, s.Status, s.IncompleteReasons)
		}
		in, out, cacheRead, cacheCreate, calls = in+s.InputTokens, out+s.OutputTokens, cacheRead+s.CacheReadTokens, cacheCreate+s.CacheCreationTokens, calls+s.ModelCalls
	}
	want, n := model.Sum("notification", "tool result", "launch", "plain")
	if in != int64(want.InputTokens) || out != int64(want.OutputTokens) || cacheRead != int64(want.CacheReadTokens) ||
		cacheCreate != int64(want.CacheCreationTokens) || calls != int64(n) {
		t.Errorf("collector totals in %d out %d cache read %d creation %d calls %d; the scripted model answered %+v in %d requests (%v)",
			in, out, cacheRead, cacheCreate, calls, want, n, model.Labels())
	}
	bg, ok := closed[ids[0]]
	if !ok || bg.BackgroundJobs != 1 || bg.Continuations != 1 {
		t.Errorf("the background prompt's summary: %+v", bg)
	}
}

const openCodeBin = ".cache/opencode/node_modules/opencode-linux-x64/bin/opencode"

// TestOpenCodeSDK runs the official TypeScript OpenCode SDK against
// `agentledger opencode-proxy` in front of a real opencode serve, whose
// provider's baseURL is the proxy's model-wire proxy in front of the
// scripted model: each prompt is an invocation whose id is its user
// message's id, final in the collector, and the collector's totals
// balance the scripted model's (title requests included). A prompt_async
// prompt through the proxy is an invocation too, which the collector
// knows when the host reads the session's idle on the event stream.
func TestOpenCodeSDK(t *testing.T) {
	t.Logf("scripted usage seed %d (AGENTLEDGER_USAGE_SEED=%d repeats it)", usageSeed, usageSeed)
	model := scriptedmodel.NewRouter(scriptedUsage, scriptedmodel.Rule{Name: "answer",
		Answer: func(scriptedmodel.Request) scriptedmodel.Step { return scriptedmodel.Step{Text: "Done."} }})
	srv := scriptedmodel.New(scriptedmodel.Options{Responder: model.Respond}).Start()
	t.Cleanup(srv.Close)
	stack := startOpenCodeStack(t, srv.URL(), baseProxy)
	col := stack.col

	lines := runHost(t, "opencode.test.mjs", []string{
		"PROXY_URL=" + stack.proxyURL, "OPENCODE_URL=" + stack.serveURL, "STATUS_URL=http://" + col.Addrs.Status,
	})
	// Two prompts, then one prompt_async asked about at its idle.
	if len(lines) != 3 {
		t.Fatalf("the host reported %v", lines)
	}
	closed := closedSummaries(t, col.Addrs.TracesFile, len(lines))
	var in, out, calls int64
	for id, s := range closed {
		if s.Status != "final" {
			t.Errorf("invocation %s: %s %v", id, s.Status, s.IncompleteReasons)
		}
		in, out, calls = in+s.InputTokens, out+s.OutputTokens, calls+s.ModelCalls
	}
	want, n := model.Sum("answer")
	if in != int64(want.InputTokens) || out != int64(want.OutputTokens) || calls != int64(n) {
		t.Errorf("collector totals in %d out %d calls %d; the scripted model answered %+v in %d requests", in, out, calls, want, n)
	}
}

const codexCLI = ".cache/codex/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"

// codexModel answers Codex's Responses requests like a model: a prompt
// saying FOREGROUND gets an exec_command that ends at once, BACKGROUND
// one left running (a small yield_time_ms), their results a short text,
// anything else a plain answer.
func codexModel() *scriptedmodel.Router {
	say := func(text string) func(scriptedmodel.Request) scriptedmodel.Step {
		return func(scriptedmodel.Request) scriptedmodel.Step { return scriptedmodel.Step{Text: text} }
	}
	call := func(tc scriptedmodel.ToolCall) func(scriptedmodel.Request) scriptedmodel.Step {
		return func(scriptedmodel.Request) scriptedmodel.Step {
			return scriptedmodel.Step{ToolCalls: []scriptedmodel.ToolCall{tc}}
		}
	}
	returns := func(word string) func(scriptedmodel.Request) bool {
		return func(r scriptedmodel.Request) bool {
			for _, o := range r.FunctionOutputs() {
				if o.Name == "exec_command" && strings.Contains(o.Text, word) {
					return true
				}
			}
			return false
		}
	}
	asks := func(word string) func(scriptedmodel.Request) bool {
		return func(r scriptedmodel.Request) bool { return strings.Contains(r.NewUserText(), word) }
	}
	return scriptedmodel.NewRouter(scriptedUsage,
		scriptedmodel.Rule{Name: "foreground", Match: asks("FOREGROUND"), Answer: call(scriptedmodel.ExecCommandCall("echo foreground-ok", 0))},
		scriptedmodel.Rule{Name: "after foreground", Match: returns("foreground-ok"), Answer: say("It printed foreground-ok.")},
		scriptedmodel.Rule{Name: "launch", Match: asks("BACKGROUND"), Answer: call(scriptedmodel.ExecCommandCall("exec sleep 300", 200))},
		scriptedmodel.Rule{Name: "after launch", Match: returns("Process running"), Answer: say("The tests run in the background.")},
		scriptedmodel.Rule{Name: "plain", Answer: say("Hello from the scripted model.")},
	)
}

// TestCodexSDK runs the official TypeScript Codex SDK with
// codexPathOverride set to `agentledger codex` (a link named codex),
// against the real CLI, the scripted model (the host's own provider
// config, which the drop-in points at its proxy) and the real collector:
// the host's events equal the plain CLI's, each turn is an invocation the
// status API knows by the thread id, and the collector's totals balance
// the scripted model's.
func TestCodexSDK(t *testing.T) {
	cli := testbin.Require(t, "CODEX_BIN", "make codex", codexCLI)
	t.Logf("scripted usage seed %d (AGENTLEDGER_USAGE_SEED=%d repeats it)", usageSeed, usageSeed)
	col := testbin.StartLocalCollector(t)
	model := codexModel()
	srv := scriptedmodel.New(scriptedmodel.Options{Responder: model.Respond}).Start()
	t.Cleanup(srv.Close)
	plainSrv := scriptedmodel.New(scriptedmodel.Options{Responder: codexModel().Respond}).Start()
	t.Cleanup(plainSrv.Close)

	link, home, project := codexHostDirs(t, "agentledger-codex-")
	lines := runHost(t, "codex.test.mjs", []string{
		"AGENTLEDGER_CODEX=" + link, "CODEX_CLI=" + cli,
		"MODEL_URL=" + srv.URL() + "/v1", "PLAIN_MODEL_URL=" + plainSrv.URL() + "/v1",
		"OTLP_HTTP=http://" + col.Addrs.OTLPHTTP, "STATUS_URL=http://" + col.Addrs.Status,
		"HOST_HOME=" + home, "HOST_DIR=" + project,
	})
	var invocations int
	for _, l := range lines {
		switch l.Kind {
		case "first_message_ms":
			t.Logf("first event after the turn started: plain CLI %.0f ms, agentledger codex %.0f ms", l.Plain, l.DropIn)
		default:
			invocations++
		}
	}
	if invocations != 3 {
		t.Fatalf("the host reported %v", lines)
	}
	// The balance: every request the drop-in's Codex made is in exactly
	// one final invocation, with the scripted model's usage.
	closed := closedSummaries(t, col.Addrs.TracesFile, invocations)
	var in, out, cacheRead, reasoning, calls int64
	for id, s := range closed {
		if s.Status != "final" {
			t.Errorf("invocation %s: %s %v", id, s.Status, s.IncompleteReasons)
		}
		in, out, cacheRead, reasoning, calls = in+s.InputTokens, out+s.OutputTokens, cacheRead+s.CacheReadTokens, reasoning+s.ReasoningTokens, calls+s.ModelCalls
	}
	want, n := model.Sum("foreground", "after foreground", "launch", "after launch", "plain")
	if in != int64(want.InputTokens) || out != int64(want.OutputTokens) || cacheRead != int64(want.CacheReadTokens) ||
		reasoning != int64(want.ReasoningTokens) || calls != int64(n) {
		t.Errorf("collector totals in %d out %d cache read %d reasoning %d calls %d; the scripted model answered %+v in %d requests (%v)",
			in, out, cacheRead, reasoning, calls, want, n, model.Labels())
	}
}

// codexHostDirs makes a directory for one Codex host under the
// repository's out/ (Codex warns about its helper binaries under the
// system's temporary directory), removed at the end of the test, with the
// drop-in linked as bin/codex, and returns the link, a home and a project
// directory.
func codexHostDirs(t *testing.T, prefix string) (link, home, project string) {
	t.Helper()
	root, err := testbin.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(filepath.Join(root, "out"), prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	bin := testbin.BuildT(t, "cmd/agentledger")
	link = filepath.Join(dir, "bin", "codex")
	home, project = filepath.Join(dir, "home"), filepath.Join(dir, "project")
	for _, d := range []string{filepath.Dir(link), home, project} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	return link, home, project
}
