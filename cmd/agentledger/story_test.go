package main

import (
	"context"
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

// The host's story (issue 33), told with the official SDKs: the host
// gets a result while a background shell runs and asks the collector
// once: the session owes work. It releases the session (reads nothing
// more), the shell ends later, and the session watch wakes the host
// within a second of the first model request of the turn the
// notification starts (a slow turn: its answer waits for the host's
// wake); the host reattaches and reads the reply, and the invocation is
// final with exactly the scripted model's usage.

// wakeBound is how soon after the woken turn's first model request the
// host's watch must have fired (at the latest; the hold keeps the turn
// running until it has).
const wakeBound = time.Second

// wokenTurn holds the woken turn's model request until the host says it
// woke (the file woke exists), so that the turn is still running when the
// watch fires, and notes when the request came.
type wokenTurn struct {
	woke string
	// mu guards arrived.
	mu      sync.Mutex
	arrived time.Time
}

func (w *wokenTurn) hold(scriptedmodel.Request) {
	w.mu.Lock()
	if w.arrived.IsZero() {
		w.arrived = time.Now()
	}
	w.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The host is another process: its file is the signal.
	_ = testbin.Poll(ctx, 10*time.Millisecond, func() (bool, string, error) {
		_, err := os.Stat(w.woke)
		return err == nil, "the host's wake", nil
	})
}

// checkWake checks the host's wake against the woken turn's request.
func (w *wokenTurn) checkWake(t *testing.T, lines []hostLine) {
	t.Helper()
	w.mu.Lock()
	arrived := w.arrived
	w.mu.Unlock()
	for _, l := range lines {
		if l.Kind != "story" {
			continue
		}
		if arrived.IsZero() {
			t.Fatal("the woken turn made no model request")
		}
		woke := time.UnixMilli(int64(l.WokeAt))
		d := woke.Sub(arrived)
		t.Logf("the watch woke the host %v after the woken turn's first model request", d.Round(time.Millisecond))
		// Before the request is as good (OpenCode announces its turn when
		// it creates the turn's message; under load the request may come
		// later): the host learns of the turn no later than the bound after.
		if d > wakeBound {
			t.Errorf("the watch woke the host %v after the woken turn's first model request; want within %v", d, wakeBound)
		}
		return
	}
	t.Fatalf("the host reported no story: %v", lines)
}

// checkExact checks that every closed invocation is final and that they
// add up to exactly what the scripted model answered by its rules.
// cacheCreation is false for a wire that has no cache creation tokens
// (OpenAI's: the scripted model's are then not sent).
func checkExact(t *testing.T, tracesFile string, n int, model *scriptedmodel.Router, cacheCreation bool, rules ...string) {
	t.Helper()
	closed := closedSummaries(t, tracesFile, n)
	var in, out, cacheRead, cacheCreate, reasoning, calls int64
	for id, s := range closed {
		if s.Status != "final" {
			t.Errorf("invocation %s: %s %v", id, s.Status, s.IncompleteReasons)
		}
		in, out, cacheRead, cacheCreate, reasoning, calls = in+s.InputTokens, out+s.OutputTokens, cacheRead+s.CacheReadTokens,
			cacheCreate+s.CacheCreationTokens, reasoning+s.ReasoningTokens, calls+s.ModelCalls
	}
	want, reqs := model.Sum(rules...)
	if !cacheCreation {
		want.CacheCreationTokens = 0
	}
	if in != int64(want.InputTokens) || out != int64(want.OutputTokens) || cacheRead != int64(want.CacheReadTokens) ||
		cacheCreate != int64(want.CacheCreationTokens) || reasoning != int64(want.ReasoningTokens) || calls != int64(reqs) {
		t.Errorf("collector totals in %d out %d cache read %d creation %d reasoning %d calls %d; the scripted model answered %+v in %d requests (%v)",
			in, out, cacheRead, cacheCreate, reasoning, calls, want, reqs, model.Labels())
	}
}

// TestClaudeHostStory is the story with the Claude Agent SDK and
// `agentledger claude`; the prompt has no uuid: the drop-in gives it
// one, which the result names. A string prompt then gets its id the same
// way, known to the collector when its result comes.
func TestClaudeHostStory(t *testing.T) {
	cli := testbin.Require(t, "CLAUDE_BIN", "make claude", claudeCLI)
	t.Logf("scripted usage seed %d (AGENTLEDGER_USAGE_SEED=%d repeats it)", usageSeed, usageSeed)
	col := testbin.StartLocalCollector(t)
	dir := t.TempDir()
	gate, woke := filepath.Join(dir, "gate"), filepath.Join(dir, "woke")
	command := fmt.Sprintf("for i in $(seq 1 1200); do [ -e %q ] && break; sleep 0.05; done; echo tests passed", gate)
	turn := &wokenTurn{woke: woke}
	say := func(text string) func(scriptedmodel.Request) scriptedmodel.Step {
		return func(scriptedmodel.Request) scriptedmodel.Step { return scriptedmodel.Step{Text: text} }
	}
	model := scriptedmodel.NewRouter(scriptedUsage,
		scriptedmodel.Rule{Name: "notification", Match: func(r scriptedmodel.Request) bool { return len(r.TaskNotifications()) > 0 },
			Hold: turn.hold, Answer: say("The tests passed.")},
		scriptedmodel.Rule{Name: "tool result", Match: func(r scriptedmodel.Request) bool { return len(r.ToolResults()) > 0 },
			Answer: say("The tests run in the background.")},
		scriptedmodel.Rule{Name: "launch", Match: func(r scriptedmodel.Request) bool { return strings.Contains(r.NewText(), "background") },
			Answer: func(scriptedmodel.Request) scriptedmodel.Step {
				return scriptedmodel.Step{ToolCalls: []scriptedmodel.ToolCall{scriptedmodel.BashCall(command, "Run the tests", true)}}
			}},
		scriptedmodel.Rule{Name: "plain", Answer: say("Hello from the scripted model.")},
	)
	srv := scriptedmodel.New(scriptedmodel.Options{Responder: model.Respond}).Start()
	t.Cleanup(srv.Close)

	bin := testbin.BuildT(t, "cmd/agentledger")
	link := filepath.Join(dir, "bin", "claude")
	home, project := filepath.Join(dir, "home"), filepath.Join(dir, "project")
	for _, d := range []string{filepath.Dir(link), home, project} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	lines := runHost(t, "claude_story.test.mjs", []string{
		"AGENTLEDGER_CLAUDE=" + link, "CLAUDE_CLI=" + cli, "MODEL_URL=" + srv.URL(),
		"OTLP_HTTP=http://" + col.Addrs.OTLPHTTP, "STATUS_URL=http://" + col.Addrs.Status,
		"HOST_HOME=" + home, "HOST_DIR=" + project, "GATE=" + gate, "WOKE=" + woke,
	})
	turn.checkWake(t, lines)
	checkExact(t, col.Addrs.TracesFile, 2, model, true, "notification", "tool result", "launch", "plain")
}

// TestOpenCodeHostStory is the story with the OpenCode SDK through
// `agentledger opencode-proxy` in front of a real opencode serve. OpenCode's
// background job here is a background subagent (its shells run in the
// foreground): it ends when the host, having released the session, lets
// its model call go; the turn its notification starts is the woken one.
func TestOpenCodeHostStory(t *testing.T) {
	t.Logf("scripted usage seed %d (AGENTLEDGER_USAGE_SEED=%d repeats it)", usageSeed, usageSeed)
	dir := t.TempDir()
	turn := &wokenTurn{woke: filepath.Join(dir, "woke")}
	release, stop := make(chan struct{}), make(chan struct{})
	arrived := make(chan struct{})
	var arrivedOnce, releaseOnce sync.Once
	wait := func(ch <-chan struct{}) {
		select {
		case <-ch:
		case <-stop:
		}
	}
	text := func(s string) func(scriptedmodel.Request) scriptedmodel.Step {
		return func(scriptedmodel.Request) scriptedmodel.Step { return scriptedmodel.Step{Text: s} }
	}
	model := scriptedmodel.NewRouter(scriptedUsage,
		scriptedmodel.Rule{Name: "child", Match: func(r scriptedmodel.Request) bool { return strings.Contains(chatTurnOf(r).firstUser, "CHILD") },
			Hold: func(scriptedmodel.Request) {
				arrivedOnce.Do(func() { close(arrived) })
				wait(release)
			}, Answer: text("child result")},
		scriptedmodel.Rule{Name: "continuation", Match: func(r scriptedmodel.Request) bool { return strings.Contains(chatTurnOf(r).lastUser, "<task id=") },
			Hold: turn.hold, Answer: text("The job is done.")},
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
	srv := scriptedmodel.New(scriptedmodel.Options{Responder: model.Respond}).Start()
	t.Cleanup(srv.Close)
	gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		releaseOnce.Do(func() { close(release) })
	}))
	t.Cleanup(gate.Close)
	// The exporter's default schedule (5 s): only the export before the
	// answer lets the host find the invocation when it asks.
	stack := startOpenCodeStackExport(t, srv.URL(), nil, baseWritten, "OPENCODE_EXPERIMENTAL_BACKGROUND_SUBAGENTS=1")
	t.Cleanup(func() { close(stop) })

	lines := runHost(t, "opencode_story.test.mjs", []string{
		"PROXY_URL=" + stack.proxyURL, "STATUS_URL=http://" + stack.col.Addrs.Status,
		"RELEASE_URL=" + gate.URL + "/release", "WOKE=" + turn.woke,
	})
	turn.checkWake(t, lines)
	t.Logf("the scripted model answered %v", model.Labels())
	checkExact(t, stack.col.Addrs.TracesFile, 1, model, false, "launch", "after-launch", "child", "continuation", "other")
}

// TestCodexHostStory is the story as far as the Codex SDK can tell it:
// its only mode, `codex exec`, ends the process after the turn and kills
// the commands it left running, so no turn is ever woken (a host that
// needs wakes drives `codex app-server`). What remains is asked of the
// drop-in: the turn.completed event names the turn's invocation
// (turn_id); asked once right after it, with the exporter's default
// schedule, the collector knows the invocation and owes its command (or,
// once Codex has exited, has closed it); the invocation ends final,
// exact, with the command's interruption named.
func TestCodexHostStory(t *testing.T) {
	cli := testbin.Require(t, "CODEX_BIN", "make codex", codexCLI)
	t.Logf("scripted usage seed %d (AGENTLEDGER_USAGE_SEED=%d repeats it)", usageSeed, usageSeed)
	col := testbin.StartLocalCollector(t)
	model := codexModel()
	srv := scriptedmodel.New(scriptedmodel.Options{Responder: model.Respond}).Start()
	t.Cleanup(srv.Close)
	link, home, project := codexHostDirs(t, "agentledger-codex-story-")
	lines := runHost(t, "codex_story.test.mjs", []string{
		"AGENTLEDGER_CODEX=" + link, "CODEX_CLI=" + cli, "MODEL_URL=" + srv.URL() + "/v1",
		"OTLP_HTTP=http://" + col.Addrs.OTLPHTTP, "STATUS_URL=http://" + col.Addrs.Status,
		"HOST_HOME=" + home, "HOST_DIR=" + project,
	})
	if len(lines) != 1 || lines[0].Kind != "story" {
		t.Fatalf("the host reported %v", lines)
	}
	t.Logf("asked once right after turn.completed: owes_work %v (false only once Codex had exited and the turn closed)", lines[0].OwedAtResult)
	t.Logf("the scripted model answered %v", model.Labels())
	checkExact(t, col.Addrs.TracesFile, 1, model, false, "foreground", "after foreground", "launch", "after launch", "plain")
}
