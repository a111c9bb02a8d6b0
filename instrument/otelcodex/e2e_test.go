package otelcodex

import (
	"context"
	"errors"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/internal/testbin"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// codexBin is where `make codex` (npm install --prefix .cache/codex
// @openai/codex@0.169.0) puts the native CLI, relative to the repository;
// envCodexBin overrides it.
const (
	codexBin    = ".cache/codex/node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
	envCodexBin = "CODEX_BIN"
)

var record = flag.Bool("record", false, "write each session scenario's app-server output to testdata/<scenario>.jsonl")

// usageSeed seeds the usage the scripted model reports: random per run
// (AGENTLEDGER_USAGE_SEED repeats one), printed by the harness.
var usageSeed = func() uint64 {
	if s := os.Getenv("AGENTLEDGER_USAGE_SEED"); s != "" {
		if v, err := strconv.ParseUint(s, 10, 64); err == nil {
			return v
		}
	}
	return rand.Uint64()
}()

// scriptedUsage is what the scripted model reports for its n-th request
// (GenAI sense): random from usageSeed and n, with cache reads and
// reasoning (the Responses API has no cache creation).
func scriptedUsage(seq int) scriptedmodel.Usage {
	r := rand.New(rand.NewPCG(usageSeed, uint64(seq)))
	in := 200 + r.IntN(8000)
	out := 5 + r.IntN(1500)
	return scriptedmodel.Usage{InputTokens: in, CacheReadTokens: r.IntN(in / 3), OutputTokens: out, ReasoningTokens: r.IntN(out/2 + 1)}
}

// harness is what the scenarios share: the real CLI, one scripted model,
// one pipeline whose ledger is compared with the real collector's
// summaries at the end.
type harness struct {
	bin    string
	router *scriptedmodel.Router
	srv    *scriptedmodel.Server
	p      *pipeline
	col    *testbin.LocalCollector

	// mu guards ids.
	mu  sync.Mutex
	ids []string
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{bin: testbin.Require(t, envCodexBin, "make codex", codexBin)}
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

// home returns a private HOME for one scenario, outside the system's
// temporary directory (Codex warns about its helper binaries there):
// under the repository's out/, removed when the test ends.
func home(t *testing.T) string {
	t.Helper()
	root, err := testbin.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(filepath.Join(root, "out"), "otelcodex-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// client returns a Client for one scenario: its own HOME and working
// directory, the scripted model as the only endpoint, app-server's output
// kept (with -record, in testdata/<name>.jsonl).
func (h *harness) client(t *testing.T, name string, opts ...Option) (*Client, string) {
	t.Helper()
	dir := home(t)
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".jsonl")
	if *record {
		path = filepath.Join("testdata", name+".jsonl")
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	var stderr strings.Builder
	var mu sync.Mutex
	t.Cleanup(func() {
		if t.Failed() {
			mu.Lock()
			t.Logf("codex stderr:\n%s", stderr.String())
			mu.Unlock()
			if out, err := os.ReadFile(path); err == nil {
				t.Logf("codex stdout (%s), last part:\n%s", path, lastBytes(string(out), 6000))
			}
		}
	})
	base := []Option{
		WithTracerProvider(h.p.tp), WithLedger(h.p.ledger()),
		WithHome(dir), WithDir(work), WithUpstream(h.srv.URL() + "/v1"),
		WithEnv("OPENAI_API_KEY=scripted"), WithTranscript(f), WithKillDelay(5 * time.Second),
		WithStderr(writerFunc(func(b []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return stderr.Write(b)
		})),
	}
	c, err := New(h.bin, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c, work
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

func lastBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// start starts a session, killed (by its process group) if it still runs
// when the test ends.
func (h *harness) start(t *testing.T, c *Client) *Session {
	t.Helper()
	s, err := c.Start(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		select {
		case <-s.Exited():
		default:
			_ = s.Kill()
		}
	})
	return s
}

func (h *harness) prompt(t *testing.T, s *Session, text string) Result {
	t.Helper()
	r, err := s.Prompt(testCtx(t), text)
	if err != nil {
		t.Fatalf("prompt %q: %v (model calls %v)", text, err, h.router.Labels())
	}
	return r
}

func (h *harness) wait(t *testing.T, c *Client, id string) instrument.Summary {
	t.Helper()
	sum, err := c.Wait(testCtx(t), id)
	if err != nil {
		t.Fatalf("wait %s: %v; summary %+v; model calls %v", id, err, sum, h.router.Labels())
	}
	return sum
}

// want is the ledger usage the scripted model's answers of the rules
// named amount to; after names those answered after the caller's result.
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

// checkUsage compares the usage of a summary with want (the counts of
// jobs and continuations are wantSummary's).
func checkUsage(t *testing.T, what string, got instrument.Summary, want instrument.Usage) {
	t.Helper()
	g := got.Usage
	g.BackgroundJobs, g.Continuations, g.Spans = 0, 0, 0
	if g != want {
		t.Errorf("%s: usage %+v, want %+v (usage seed %d)", what, g, want, usageSeed)
	}
}

// balance is genaitest.Balance over this harness; the invocations join the
// collector comparison.
func (h *harness) balance(t *testing.T, sessions ...string) {
	t.Helper()
	ids := genaitest.Balance(t, h.router.Answered(), h.p.ledger(), h.p.rec.Ended(), usageSeed, sessions...)
	h.mu.Lock()
	h.ids = append(h.ids, ids...)
	h.mu.Unlock()
}

// Rules of the scripted model for Codex's Responses requests.

func rule(name string, match func(scriptedmodel.Request) bool, answer func(scriptedmodel.Request) scriptedmodel.Step) scriptedmodel.Rule {
	return scriptedmodel.Rule{Name: name, Match: match, Answer: answer}
}

// asks matches the request that brings a prompt (or continuation text)
// holding word.
func asks(word string) func(scriptedmodel.Request) bool {
	return func(r scriptedmodel.Request) bool { return strings.Contains(r.NewUserText(), word) }
}

// returns matches a request returning the result of a tool call named
// tool whose text holds word.
func returns(tool, word string) func(scriptedmodel.Request) bool {
	return func(r scriptedmodel.Request) bool {
		for _, o := range r.FunctionOutputs() {
			if o.Name == tool && strings.Contains(o.Text, word) {
				return true
			}
		}
		return false
	}
}

func says(text string) func(scriptedmodel.Request) scriptedmodel.Step {
	return func(scriptedmodel.Request) scriptedmodel.Step { return scriptedmodel.Step{Text: text} }
}

func calls(tc scriptedmodel.ToolCall) func(scriptedmodel.Request) scriptedmodel.Step {
	return func(scriptedmodel.Request) scriptedmodel.Step {
		return scriptedmodel.Step{ToolCalls: []scriptedmodel.ToolCall{tc}}
	}
}

var sessionIDRe = regexp.MustCompile(`session ID (\d+)`)

// polls answers with a write_stdin of the session the request's new text
// names (a continuation's), or else the last one its history shows
// running, waiting up to yieldMS for the process.
func polls(yieldMS int) func(scriptedmodel.Request) scriptedmodel.Step {
	return func(r scriptedmodel.Request) scriptedmodel.Step {
		sid := "0"
		if m := sessionIDRe.FindStringSubmatch(r.NewUserText()); m != nil {
			sid = m[1]
		} else if s := r.RunningSessions(); len(s) > 0 {
			sid = s[len(s)-1]
		}
		return scriptedmodel.Step{ToolCalls: []scriptedmodel.ToolCall{scriptedmodel.WriteStdinCall(sid, yieldMS)}}
	}
}

// gate is a command that blocks until the test opens it: it reads a FIFO
// the test writes to.
type gate struct{ path string }

func newGate(t *testing.T, dir, name string) gate {
	t.Helper()
	path := filepath.Join(dir, name+".fifo")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return gate{path: path}
}

// command is a shell command that waits for the gate, then prints word.
func (g gate) command(word string) string {
	return "read x < " + g.path + "; echo " + word
}

// open lets the command go on (the command must be running: it holds the
// FIFO open for reading).
func (g gate) open(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(g.path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString("go\n")
	if err = errors.Join(err, f.Close()); err != nil {
		t.Fatal(err)
	}
}

// waitUntil polls cond (bounded) every few milliseconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := testbin.Poll(ctx, 10*time.Millisecond, func() (bool, string, error) { return cond(), what, nil }); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
