package main

import (
	"context"
	"fmt"
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
// host's watch must have fired.
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
		if d > wakeBound || d < -wakeBound {
			t.Errorf("the watch woke the host %v after the woken turn's first model request; want within %v", d, wakeBound)
		}
		return
	}
	t.Fatalf("the host reported no story: %v", lines)
}

// checkExact checks that every closed invocation is final and that they
// add up to exactly what the scripted model answered by its rules.
func checkExact(t *testing.T, tracesFile string, n int, model *scriptedmodel.Router, rules ...string) {
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
	if in != int64(want.InputTokens) || out != int64(want.OutputTokens) || cacheRead != int64(want.CacheReadTokens) ||
		cacheCreate != int64(want.CacheCreationTokens) || reasoning != int64(want.ReasoningTokens) || calls != int64(reqs) {
		t.Errorf("collector totals in %d out %d cache read %d creation %d reasoning %d calls %d; the scripted model answered %+v in %d requests (%v)",
			in, out, cacheRead, cacheCreate, reasoning, calls, want, reqs, model.Labels())
	}
}

// TestClaudeHostStory is the story with the Claude Agent SDK and
// `agentledger claude`; the prompt has no uuid: the drop-in gives it
// one, which the result names.
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
	checkExact(t, col.Addrs.TracesFile, 1, model, "notification", "tool result", "launch", "plain")
}
