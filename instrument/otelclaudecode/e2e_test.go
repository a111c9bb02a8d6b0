package otelclaudecode

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/internal/testbin"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// claudeBin is where `make claude` (npm install --prefix .cache/claude
// @anthropic-ai/claude-code@2.1.328) puts the native CLI, relative to the
// repository; envClaudeBin overrides it.
const (
	claudeBin    = ".cache/claude/node_modules/@anthropic-ai/claude-code-linux-x64/claude"
	envClaudeBin = "CLAUDE_BIN"
)

var record = flag.Bool("record", false, "write each scenario's stream-json output to testdata/<scenario>.jsonl")

// usageSeed seeds the usage the scripted model reports: random per run
// (AGENTLEDGER_USAGE_SEED repeats one), printed by every harness, so that
// no expectation can be a constant.
var usageSeed = func() uint64 {
	if s := os.Getenv("AGENTLEDGER_USAGE_SEED"); s != "" {
		if v, err := strconv.ParseUint(s, 10, 64); err == nil {
			return v
		}
	}
	return rand.Uint64()
}()

// scriptedUsage is what the scripted model reports for its n-th request
// (GenAI sense): random from usageSeed and n, with cache reads, cache
// creations and reasoning, so that every sum is checked exactly. Inputs
// stay far below the CLI's context window (no auto-compaction).
func scriptedUsage(seq int) scriptedmodel.Usage {
	r := rand.New(rand.NewPCG(usageSeed, uint64(seq)))
	in := 200 + r.IntN(8000)
	out := 5 + r.IntN(1500)
	return scriptedmodel.Usage{InputTokens: in, CacheReadTokens: r.IntN(in / 3), CacheCreationTokens: r.IntN(in / 3),
		OutputTokens: out, ReasoningTokens: r.IntN(out/2 + 1)}
}

// harness is what the scenarios share: the real CLI, one scripted model,
// one pipeline whose ledger is checked against the real collector's
// summaries at the end.
type harness struct {
	bin    string
	router *scriptedmodel.Router
	srv    *scriptedmodel.Server
	p      *pipeline
	col    *testbin.LocalCollector

	// mu guards ids and transcript.
	mu  sync.Mutex
	ids []string
	// transcript is the path of the latest client's stream-json output.
	transcript string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{bin: testbin.Require(t, envClaudeBin, "make claude", claudeBin)}
	t.Logf("scripted usage seed %d (AGENTLEDGER_USAGE_SEED=%d repeats it)", usageSeed, usageSeed)
	h.router = scriptedmodel.NewRouter(scriptedUsage)
	h.srv = scriptedmodel.New(scriptedmodel.Options{Responder: h.router.Respond}).Start()
	t.Cleanup(h.srv.Close)
	var export sdktrace.SpanProcessor
	if _, ok := testbin.Locate(testbin.EnvCollectorBin, ".bin/otelcol-agentledger"); ok || os.Getenv(testbin.EnvE2E) == "1" {
		h.col = testbin.StartLocalCollector(t)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(h.col.Addrs.OTLPGRPC), otlptracegrpc.WithInsecure())
		if err != nil {
			t.Fatal(err)
		}
		export = sdktrace.NewBatchSpanProcessor(exp)
	}
	h.p = newPipeline(t, export)
	return h
}

// client returns a Client for one scenario: its own HOME and project
// directory, the scripted model as the only endpoint, and the CLI's
// output kept (and, with -record, written to testdata/<name>.jsonl).
func (h *harness) client(t *testing.T, name string, env ...string) *Client {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".jsonl")
	if *record {
		path = filepath.Join("testdata", name+".jsonl")
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	h.transcript = path
	h.mu.Unlock()
	t.Cleanup(func() {
		_ = f.Close()
		if t.Failed() {
			t.Logf("stream-json output of the CLI: %s", path)
		}
	})
	base := []string{
		"HOME=" + t.TempDir(),
		"ANTHROPIC_BASE_URL=" + h.srv.URL(),
		"ANTHROPIC_API_KEY=scripted",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_AUTOUPDATER=1",
		"DISABLE_TELEMETRY=1",
		"IS_SANDBOX=1",
	}
	c, err := New(h.bin,
		WithTracerProvider(h.p.tp), WithLedger(h.p.ledger()),
		WithDir(t.TempDir()), WithEnv(append(base, env...)...),
		WithArgs("--dangerously-skip-permissions"),
		WithTranscript(f), WithKillDelay(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// transcriptText returns the latest client's stream-json output so far.
func (h *harness) transcriptText(t *testing.T) string {
	t.Helper()
	h.mu.Lock()
	path := h.transcript
	h.mu.Unlock()
	out, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// afterFirstResult reports, for each request number, whether the latest
// client's output shows its message_start after the first result line:
// the caller had its result before that request began.
func (h *harness) afterFirstResult(t *testing.T) map[int]bool {
	t.Helper()
	after := map[int]bool{}
	seen := false
	for _, l := range strings.Split(h.transcriptText(t), "\n") {
		ev, err := decodeEvent([]byte(l))
		if err != nil {
			continue
		}
		if ev.Type == typeResult {
			seen = true
		}
		var n int
		if ev.Stream != nil && ev.Stream.Type == "message_start" {
			if _, err := fmt.Sscanf(ev.Stream.MessageID, "msg_scripted_%d", &n); err == nil {
				after[n] = seen
			}
		}
	}
	return after
}

// track remembers invocation ids for the collector comparison.
func (h *harness) track(ids ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ids = append(h.ids, ids...)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// run is Client.Run that fails the test on error and stops the process
// when the test ends.
func (h *harness) run(t *testing.T, ctx context.Context, c *Client, prompt string) *Run {
	t.Helper()
	r, err := c.Run(ctx, prompt)
	if err != nil {
		t.Fatalf("run %q: %v (model calls %v)", prompt, err, h.router.Labels())
	}
	h.track(r.Result.InvocationID)
	stopAtEnd(t, r.Process)
	return r
}

// stopAtEnd kills the process (by its process group) if it still runs
// when the test ends.
func stopAtEnd(t *testing.T, p *Process) {
	t.Cleanup(func() {
		select {
		case <-p.Exited():
		default:
			_ = p.Kill()
			<-p.Exited()
		}
	})
}

func (h *harness) wait(t *testing.T, r *Run) instrument.Summary {
	t.Helper()
	sum, err := r.Wait(testCtx(t))
	if err != nil {
		t.Fatalf("wait %s: %v; summary %+v; model calls %v", r.Result.InvocationID, err, sum, h.router.Labels())
	}
	return sum
}

// want is the ledger usage the scripted model's answers of the rules
// named amount to; after names the rules answered after the result.
func (h *harness) want(rules, after []string) instrument.Usage {
	u, n := h.router.Sum(rules...)
	a, _ := h.router.Sum(after...)
	return instrument.Usage{
		InputTokens: int64(u.InputTokens), OutputTokens: int64(u.OutputTokens),
		CacheReadInputTokens: int64(u.CacheReadTokens), CacheCreationInputTokens: int64(u.CacheCreationTokens),
		ReasoningOutputTokens:  int64(u.ReasoningTokens),
		AfterResultInputTokens: int64(a.InputTokens), AfterResultOutputTokens: int64(a.OutputTokens),
		ModelCalls: int64(n),
	}
}

// checkUsage compares the token sums, the after-result split and the
// model calls of got with want.
func checkUsage(t *testing.T, what string, got instrument.Summary, want instrument.Usage) {
	t.Helper()
	u := got.Usage
	g := []int64{u.InputTokens, u.OutputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens, u.ReasoningOutputTokens,
		u.AfterResultInputTokens, u.AfterResultOutputTokens, u.ModelCalls}
	w := []int64{want.InputTokens, want.OutputTokens, want.CacheReadInputTokens, want.CacheCreationInputTokens, want.ReasoningOutputTokens,
		want.AfterResultInputTokens, want.AfterResultOutputTokens, want.ModelCalls}
	if fmt.Sprint(g) != fmt.Sprint(w) {
		t.Errorf("%s usage [in out cache_read cache_creation reasoning after_in after_out calls]:\n got %v\nwant %v", what, g, w)
	}
}

func wantStatus(t *testing.T, what string, got instrument.Summary, status string) {
	t.Helper()
	if string(got.Status) != status {
		t.Errorf("%s: status %s (reasons %v, anomalies %v), want %s", what, got.Status, got.Reasons, got.Anomalies, status)
	}
}

// rule is a scripted-model rule that answers step.
func rule(name string, match func(scriptedmodel.Request) bool, step scriptedmodel.Step) scriptedmodel.Rule {
	return scriptedmodel.Rule{Name: name, Match: match, Answer: func(scriptedmodel.Request) scriptedmodel.Step { return step }}
}

func says(text string) scriptedmodel.Step { return scriptedmodel.Step{Text: text} }

func calls(tc ...scriptedmodel.ToolCall) scriptedmodel.Step { return scriptedmodel.Step{ToolCalls: tc} }

// asks matches the first request of a prompt containing marker.
func asks(marker string) func(scriptedmodel.Request) bool {
	return func(r scriptedmodel.Request) bool {
		return strings.Contains(r.NewText(), marker) && len(r.ToolResults()) == 0 && len(r.TaskNotifications()) == 0
	}
}

func hasToolResult(r scriptedmodel.Request) bool {
	return len(r.ToolResults()) > 0 && len(r.TaskNotifications()) == 0
}

func hasNotification(r scriptedmodel.Request) bool { return len(r.TaskNotifications()) > 0 }

// gate is a file a shell command waits for: the test creates it to let the
// command finish.
type gate string

func newGate(t *testing.T, name string) gate { return gate(filepath.Join(t.TempDir(), name)) }

// command returns a shell command that waits (boundedly) for the gate,
// then prints word and exits with code.
func (g gate) command(word string, code int) string {
	return fmt.Sprintf("for i in $(seq 1 3000); do [ -e %q ] && break; sleep 0.05; done; echo %s; exit %d", string(g), word, code)
}

func (g gate) open(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(string(g), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// recv receives from ch, or fails the test after a minute.
func recv[T any](t *testing.T, what string, ch <-chan T) T {
	t.Helper()
	timeout := time.NewTimer(time.Minute)
	defer timeout.Stop()
	select {
	case v := <-ch:
		return v
	case <-timeout.C:
		t.Fatalf("no %s within a minute", what)
		panic("unreachable")
	}
}

// waitUntil polls cond (a state of the ledger or the model, never a
// timer) until it holds, or fails the test after a minute.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := testbin.Poll(ctx, 20*time.Millisecond, func() (bool, string, error) { return cond(), what, nil })
	if err != nil {
		t.Fatal(err)
	}
}

// TestCLI drives the real Claude Code CLI through the scenarios of a
// background shell's life. The subtests share the scripted model, the
// pipeline and the collector, and run one after the other.
func TestCLI(t *testing.T) {
	h := newHarness(t)
	t.Run("foreground", func(t *testing.T) { testForeground(t, h) })
	t.Run("background continuation", func(t *testing.T) { testBackground(t, h) })
	t.Run("longer than the caller's patience", func(t *testing.T) { testPatience(t, h) })
	t.Run("retried request", func(t *testing.T) { testRetried(t, h) })
	t.Run("notification turn answered 529 once", func(t *testing.T) { testRetried529(t, h) })
	t.Run("failing shell", func(t *testing.T) { testFailingShell(t, h) })
	t.Run("several shells in one turn", func(t *testing.T) { testSeveralShells(t, h) })
	t.Run("warm second prompt", func(t *testing.T) { testWarmSecondPrompt(t, h) })
	t.Run("notification while a request streams", func(t *testing.T) { testNotificationWhileStreaming(t, h) })
	t.Run("notification read by a later prompt", func(t *testing.T) { testConsumedByLaterPrompt(t, h) })
	t.Run("prompt read by a running turn", func(t *testing.T) { testPromptDuringTurn(t, h, false) })
	t.Run("prompt read by a running turn, its text an earlier prompt's", func(t *testing.T) { testPromptDuringTurn(t, h, true) })
	t.Run("interrupted", func(t *testing.T) {
		testInterrupted(t, h, "interrupted", func(r *Run, _ context.CancelFunc) error { return r.Process.Interrupt() })
	})
	t.Run("timed out", func(t *testing.T) {
		testInterrupted(t, h, "timed_out", func(_ *Run, cancel context.CancelFunc) error { cancel(); return nil })
	})
	t.Run("killed during a turn", func(t *testing.T) { testKilledDuringTurn(t, h) })
	t.Run("foreground subagent", func(t *testing.T) { testSubagents(t, h, false) })
	t.Run("background subagent", func(t *testing.T) { testSubagents(t, h, true) })
	t.Run("background subagent with its own background shell", func(t *testing.T) { testNestedShell(t, h, false) })
	t.Run("background subagent's shell ends after its first notification was read", func(t *testing.T) { testNestedShell(t, h, true) })
	t.Run("subagent, subagent, background shell", func(t *testing.T) { testThreeLevels(t, h) })
	t.Run("two shells end at once, A first", func(t *testing.T) { testTwoShellsAtOnce(t, h, 0) })
	t.Run("two shells end at once, B first", func(t *testing.T) { testTwoShellsAtOnce(t, h, 1) })
	t.Run("subagent request during another prompt's turn", func(t *testing.T) { testSubagentDuringOtherTurn(t, h) })
	t.Run("compact", func(t *testing.T) { testCompact(t, h) })
	t.Run("compact while a shell runs", func(t *testing.T) { testCompactWhileShellRuns(t, h) })
	t.Run("automatic compaction", func(t *testing.T) { testAutoCompaction(t, h) })
	t.Run("own telemetry", func(t *testing.T) { testOwnTelemetry(t, h) })
	t.Run("collector summaries equal the ledger's", func(t *testing.T) { testCollector(t, h) })
}

func testForeground(t *testing.T, h *harness) {
	h.router.SetRules(
		rule("tool", asks("FG-ONE"), calls(scriptedmodel.BashCall("echo hi", "Say hi", false))),
		rule("after-tool", hasToolResult, says("done")),
	)
	r := h.run(t, testCtx(t), h.client(t, "foreground"), "FG-ONE: run echo hi")
	if r.Result.Text != "done" || r.Result.IsError {
		t.Errorf("result %+v", r.Result)
	}
	sum := h.wait(t, r)
	wantStatus(t, "invocation", sum, contract.StatusFinal)
	checkUsage(t, "invocation", sum, h.want([]string{"tool", "after-tool"}, nil))
	if sum.Usage.BackgroundJobs != 0 || sum.Usage.Continuations != 0 {
		t.Errorf("usage %+v", sum.Usage)
	}
	id := r.Result.InvocationID
	if n := len(h.p.spans("execute_tool Bash", id)); n != 1 {
		t.Errorf("%d Bash tool spans", n)
	}
	root := h.p.spans("invoke_agent "+DefaultAgent, id)
	// Not remote: the CLI's own telemetry is off here (WithRemote).
	if len(root) != 1 || attr(root[0], contract.AttrRemote).AsBool() {
		t.Fatalf("root spans %v (want one, not remote: the CLI exports no spans of its own here)", root)
	}
	for _, c := range h.p.spans("", id) {
		if strings.HasPrefix(c.Name(), "chat ") && c.Parent().SpanID() != root[0].SpanContext().SpanID() {
			t.Errorf("model call %s is not a child of the root", c.Name())
		}
	}
	h.balance(t, r.Process.SessionID())
}

// bgRules launch a background shell running cmd for the prompt holding
// marker, answer its tool result with "launched" and the notification's
// turn with "noted".
func bgRules(marker, cmd string) []scriptedmodel.Rule {
	return []scriptedmodel.Rule{
		rule("launch-"+marker, asks(marker), calls(scriptedmodel.BashCall(cmd, "Wait for the gate", true))),
		rule("after-launch-"+marker, func(r scriptedmodel.Request) bool {
			return hasToolResult(r) && strings.Contains(r.NewText(), "running in background")
		}, says("launched")),
		rule("continuation", hasNotification, says("noted")),
	}
}

func testBackground(t *testing.T, h *harness) {
	g := newGate(t, "bg")
	h.router.SetRules(bgRules("BG-ONE", g.command("finished", 0))...)
	r := h.run(t, testCtx(t), h.client(t, "background"), "BG-ONE: start the job")
	id := r.Result.InvocationID
	if r.Result.Text != "launched" {
		t.Errorf("result %+v", r.Result)
	}
	// The caller has its result; the shell still runs.
	sum, _ := h.p.ledger().Summary(id)
	wantStatus(t, "at the result", sum, contract.StatusPending)
	checkUsage(t, "at the result", sum, h.want([]string{"launch-BG-ONE", "after-launch-BG-ONE"}, nil))
	if st, err := r.Process.State(); err != nil || !st.OwesWork || len(st.OpenJobs) != 1 {
		t.Errorf("session at the result: %+v %v", st, err)
	}
	select {
	case <-r.Process.Exited():
		t.Fatal("the CLI exited while its shell ran")
	default:
	}
	g.open(t)
	sum = h.wait(t, r)
	wantStatus(t, "after the continuation", sum, contract.StatusFinal)
	checkUsage(t, "after the continuation", sum, h.want([]string{"launch-BG-ONE", "after-launch-BG-ONE", "continuation"}, []string{"continuation"}))
	if sum.Usage.BackgroundJobs != 1 || sum.Usage.Continuations != 1 {
		t.Errorf("usage %+v", sum.Usage)
	}
	jobs := h.p.spans("background shell", id)
	if len(jobs) != 1 || attr(jobs[0], AttrTaskStatus).AsString() != "completed" || jobs[0].Status().Code == codes.Error {
		t.Fatalf("background spans %v", jobs)
	}
	conts := h.p.linksTo(jobs[0].SpanContext(), contract.LinkFollowup, id)
	if len(conts) != 1 || conts[0].Name() != "continue_agent "+DefaultAgent {
		t.Errorf("followups of the job: %v", conts)
	}
	checkDischargedOnce(t, h.p)
	checkGenAINames(t, h.p)
	if st, _ := r.Process.State(); st.OwesWork {
		t.Errorf("session owes work after exit: %+v", st)
	}
	h.balance(t, r.Process.SessionID())
}

// testPatience: the caller gives up waiting while the shell runs; the
// invocation is pending then, and final once the shell's turn is over.
func testPatience(t *testing.T, h *harness) {
	g := newGate(t, "patience")
	h.router.SetRules(bgRules("BG-TWO", g.command("late", 0))...)
	r := h.run(t, testCtx(t), h.client(t, "patience"), "BG-TWO: start the long job")
	impatient, cancel := context.WithCancel(context.Background())
	cancel()
	sum, err := r.Process.Wait(impatient, r.Result.InvocationID)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("impatient wait: %v %+v", err, sum)
	}
	wantStatus(t, "when the caller gave up", sum, contract.StatusPending)
	g.open(t)
	sum = h.wait(t, r)
	wantStatus(t, "in the end", sum, contract.StatusFinal)
	checkUsage(t, "in the end", sum, h.want([]string{"launch-BG-TWO", "after-launch-BG-TWO", "continuation"}, []string{"continuation"}))
	h.balance(t, r.Process.SessionID())
}
