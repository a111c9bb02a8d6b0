package otelopencode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/genaireg"
	"github.com/agentledger/agentledger/internal/testbin"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// openCodeBin is where `make opencode` (npm install --prefix .cache/opencode
// opencode-ai@1.18.33) puts the server binary, relative to the repository.
const openCodeBin = ".cache/opencode/node_modules/opencode-linux-x64/bin/opencode"

// call is one request the scripted model answered, with the usage it
// reported (GenAI sense) and a label the test gave it.
type call struct {
	seq   int
	label string
	usage scriptedmodel.Usage
	// session and parent are OpenCode's X-Session-Id and
	// X-Parent-Session-Id headers of the request.
	session, parent string
}

// model is a scripted model server whose answers a test routes by the
// request's content; every request reports a distinct usage, so sums are
// checked exactly.
type model struct {
	t   *testing.T
	srv *scriptedmodel.Server

	// mu guards calls and route.
	mu    sync.Mutex
	calls []call
	// all are the calls since the model started (reset keeps them).
	all   []call
	route func(req) (label string, st scriptedmodel.Step)
	// arrived is signalled (without blocking) for every request.
	arrived chan string
	// stop is closed when the test ends, releasing every request a route
	// holds (a failed test must not leave the server waiting).
	stop     chan struct{}
	stopOnce sync.Once
	// usage, when set, is the usage of the n-th request (set before the
	// first request).
	usage func(seq int) scriptedmodel.Usage
}

// release lets every held request go.
func (m *model) release() { m.stopOnce.Do(func() { close(m.stop) }) }

// req is what routing needs to know of a chat request.
type req struct {
	scriptedmodel.Request
	// lastRole is the role of the last message.
	lastRole string
	// firstUser and lastUser are the texts of the first and the last user
	// message.
	firstUser, lastUser string
}

func newModel(t *testing.T) *model {
	m := &model{t: t, arrived: make(chan string, 64), stop: make(chan struct{})}
	m.srv = scriptedmodel.New(scriptedmodel.Options{Responder: m.respond}).Start()
	t.Cleanup(func() {
		m.release()
		m.srv.Close()
	})
	return m
}

func (m *model) respond(r scriptedmodel.Request) scriptedmodel.Step {
	q := req{Request: r, lastUser: r.LastUserText()}
	if msgs, ok := r.Body["messages"].([]any); ok && len(msgs) > 0 {
		if last, ok := msgs[len(msgs)-1].(map[string]any); ok {
			q.lastRole, _ = last["role"].(string)
		}
		for _, x := range msgs {
			if mm, ok := x.(map[string]any); ok && mm["role"] == "user" {
				q.firstUser = textOf(mm["content"])
				break
			}
		}
	}
	m.mu.Lock()
	route := m.route
	m.mu.Unlock()
	label, st := "unrouted", scriptedmodel.Step{Text: "ok"}
	if route != nil {
		label, st = route(q)
	}
	n := r.Seq
	st.Usage = scriptedmodel.Usage{
		InputTokens:     1000 + n,
		CacheReadTokens: 10 + n,
		OutputTokens:    100 + n,
		ReasoningTokens: 5,
	}
	if m.usage != nil {
		st.Usage = m.usage(n)
	}
	m.mu.Lock()
	c := call{seq: n, label: label, usage: st.Usage, session: r.Header.Get(headerSessionID), parent: r.Header.Get(headerParentSessionID)}
	m.calls = append(m.calls, c)
	m.all = append(m.all, c)
	m.mu.Unlock()
	select {
	case m.arrived <- label:
	default:
	}
	return st
}

func textOf(c any) string {
	switch v := c.(type) {
	case string:
		return v
	case []any:
		var b strings.Builder
		for _, x := range v {
			if mm, ok := x.(map[string]any); ok {
				if s, ok := mm["text"].(string); ok {
					b.WriteString(s)
				}
			}
		}
		return b.String()
	}
	return ""
}

// sum returns the usage of the calls whose label is one of labels.
func (m *model) sum(labels ...string) instrument.Usage {
	m.mu.Lock()
	defer m.mu.Unlock()
	var u instrument.Usage
	for _, c := range m.calls {
		for _, l := range labels {
			if c.label == l {
				u.InputTokens += int64(c.usage.InputTokens)
				u.OutputTokens += int64(c.usage.OutputTokens)
				u.CacheReadInputTokens += int64(c.usage.CacheReadTokens)
				u.ReasoningOutputTokens += int64(c.usage.ReasoningTokens)
				u.ModelCalls++
			}
		}
	}
	return u
}

// reset forgets the calls so far and the route (between subtests that
// share a server).
func (m *model) reset(route func(req) (string, scriptedmodel.Step)) {
	m.mu.Lock()
	m.calls = nil
	m.route = route
	m.mu.Unlock()
}

func (m *model) labels() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, c := range m.calls {
		out = append(out, fmt.Sprintf("%d:%s", c.seq, c.label))
	}
	return out
}

// waitArrived waits until a request with label arrives.
func (m *model) waitArrived(t *testing.T, label string) {
	t.Helper()
	timeout := time.NewTimer(60 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case l := <-m.arrived:
			if l == label {
				return
			}
		case <-timeout.C:
			t.Fatalf("no %q request arrived; calls %v", label, m.labels())
		}
	}
}

// server is a real opencode serve, isolated in temporary HOME and XDG
// directories, whose only provider is the scripted model.
type server struct {
	url    string
	client *Client
	p      *pipeline
	model  *model
	// wire is set when the Client counts the model wire (WithModelProxy).
	wire bool
}

// startServer starts opencode serve against a new scripted model and a
// started Client on a fresh pipeline. It skips (or fails with
// AGENTLEDGER_E2E=1) when the binary is absent.
func startServer(t *testing.T) *server { return startServerWith(t, newModel(t), false, nil) }

// startServerWith is startServer against model m and pipeline p (a new
// one when nil); with proxy the Client counts the model wire
// (WithModelProxy) and the provider's baseURL is its proxy, written with
// WriteProviderConfig.
func startServerWith(t *testing.T, m *model, proxy bool, p *pipeline) *server {
	t.Helper()
	bin := testbin.Require(t, testbin.EnvOpenCodeBin, "make opencode", openCodeBin)
	dir := t.TempDir()
	for _, d := range []string{"home", "config/opencode", "data", "cache", "state", "project"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := map[string]any{
		"$schema":    "https://opencode.ai/config.json",
		"autoupdate": false,
		"share":      "disabled",
		"permission": map[string]any{"*": "allow"},
		"provider": map[string]any{"scripted": map[string]any{
			"npm":     "@ai-sdk/openai-compatible",
			"name":    "Scripted",
			"options": map[string]any{"baseURL": m.srv.URL() + "/v1", "apiKey": "unused"},
			"models":  map[string]any{"scripted-model": map[string]any{"name": "Scripted Model"}},
		}},
		"model":       "scripted/scripted-model",
		"small_model": "scripted/scripted-model",
	}
	raw, _ := json.Marshal(cfg)
	cfgPath := filepath.Join(dir, "config/opencode/opencode.json")
	if err := os.WriteFile(cfgPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	addr, err := testbin.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + addr
	if p == nil {
		p = newPipeline(t)
	}
	opts := []Option{WithTracerProvider(p.tp), WithLedger(p.sp.Ledger())}
	if proxy {
		opts = append(opts, WithModelProxy(m.srv.URL()+"/v1"))
	}
	c, err := New(base, &http.Client{}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if proxy {
		if err := WriteProviderConfig(cfgPath, "scripted", c.ModelProxyURL()); err != nil {
			t.Fatal(err)
		}
	}
	skipPluginInstall(t, filepath.Join(dir, "config/opencode"))
	env := []string{
		"HOME=" + filepath.Join(dir, "home"),
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"),
		"XDG_DATA_HOME=" + filepath.Join(dir, "data"),
		"XDG_CACHE_HOME=" + filepath.Join(dir, "cache"),
		"XDG_STATE_HOME=" + filepath.Join(dir, "state"),
		"OPENCODE_DISABLE_AUTOUPDATE=1",
		"OPENCODE_DISABLE_MODELS_FETCH=1",
		"OPENCODE_DISABLE_SHARE=1",
		"OPENCODE_DISABLE_LSP_DOWNLOAD=1",
		"OPENCODE_DISABLE_DEFAULT_PLUGINS=1",
		"OPENCODE_PURE=1",
		"OPENCODE_EXPERIMENTAL_BACKGROUND_SUBAGENTS=1",
	}
	proc, err := testbin.Start("opencode", filepath.Join(dir, "opencode.log"), filepath.Join(dir, "project"), env, bin,
		"serve", "--hostname", "127.0.0.1", "--port", testbin.Port(addr), "--print-logs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Held model requests and idle keep-alive connections of the
		// helpers' http.Get would keep the server's shutdown waiting.
		m.release()
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		if err := proc.Stop(testbin.StopTimeout); err != nil {
			t.Logf("stop opencode: %v", err)
		}
		if t.Failed() {
			t.Logf("--- opencode log (%s), last lines:\n%s", proc.LogPath, proc.Tail(40))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := testbin.WaitReady(ctx, proc, base+"/global/health"); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Shutdown(sctx); err != nil {
			t.Errorf("client shutdown: %v", err)
		}
	})
	return &server{url: base, client: c, p: p, model: m, wire: proxy}
}

// skipPluginInstall makes OpenCode's config directory look as if its
// plugin SDK (@opencode-ai/plugin) were installed. OpenCode otherwise runs
// npm install there in the background at start; it takes tens of seconds,
// needs the registry, and an install still running at SIGTERM kept the
// server from exiting for more than 10 s. No plugin is used here.
func skipPluginInstall(t *testing.T, configDir string) {
	t.Helper()
	const dep = `{"dependencies":{"@opencode-ai/plugin":"*"}}`
	files := map[string]string{
		"package.json":      dep,
		"package-lock.json": `{"lockfileVersion":3,"packages":{"":` + dep + `}}`,
	}
	if err := os.MkdirAll(filepath.Join(configDir, "node_modules"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(configDir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func (s *server) session(t *testing.T, title string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id, err := s.client.CreateSession(ctx, title)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func (s *server) prompt(t *testing.T, session, text string) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	res, err := s.client.Prompt(ctx, session, Prompt{Text: text})
	if err != nil {
		t.Fatalf("prompt %q: %v (model calls %v)", text, err, s.model.labels())
	}
	return res
}

func (s *server) wait(t *testing.T, id string) instrument.Summary {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	sum, err := s.client.Wait(ctx, id)
	if err != nil {
		t.Fatalf("wait %s: %v; summary %+v; model calls %v", id, err, sum, s.model.labels())
	}
	return sum
}

// checkUsage compares the summary's sums with the scripted model's.
func checkUsage(t *testing.T, what string, got instrument.Summary, want instrument.Usage) {
	t.Helper()
	u := got.Usage
	if u.InputTokens != want.InputTokens || u.OutputTokens != want.OutputTokens ||
		u.CacheReadInputTokens != want.CacheReadInputTokens || u.ReasoningOutputTokens != want.ReasoningOutputTokens ||
		u.ModelCalls != want.ModelCalls {
		t.Errorf("%s usage:\n got %+v\nwant %+v", what, u, want)
	}
}

const bgTask = `{"description":"child job","prompt":"CHILD please work","subagent_type":"general","background":true}`

// TestServer drives a real opencode serve through the scenarios of a
// background job's life; the subtests share one server (it takes 10-20 s
// to start) and run one after the other.
func TestServer(t *testing.T) {
	m := newModel(t)
	t.Logf("scripted usage seed %d (AGENTLEDGER_USAGE_SEED=%d repeats it)", usageSeed, usageSeed)
	m.usage = scriptedUsage
	s := startServerWith(t, m, false, nil)
	t.Run("foreground bash", func(t *testing.T) { testForegroundBash(t, s) })
	t.Run("foreground subagent", func(t *testing.T) { testForegroundSubagent(t, s) })
	t.Run("foreground subagent resumed", func(t *testing.T) { testForegroundSubagentResumed(t, s) })
	t.Run("background subagent", func(t *testing.T) { testBackgroundSubagent(t, s) })
	t.Run("second prompt done first", func(t *testing.T) { testSecondPromptDoneFirst(t, s) })
	t.Run("notification during the second prompt", func(t *testing.T) { testNotificationDuringSecondPrompt(t, s) })
	t.Run("notification read by a later prompt", func(t *testing.T) { testNotificationConsumed(t, s) })
	t.Run("prompt and notification answered by one request", func(t *testing.T) { testPromptAndNotificationOneRequest(t, s) })
	t.Run("abort first", func(t *testing.T) { testAbortRacingCompletion(t, s, true) })
	t.Run("abort racing the completion", func(t *testing.T) { testAbortRacingCompletion(t, s, false) })
	t.Run("abort during the continuation", func(t *testing.T) { testAbortDuringContinuation(t, s) })
	t.Run("transport", func(t *testing.T) { testTransport(t, s) })
	t.Run("prompt_async", func(t *testing.T) { testPromptAsync(t, s) })
	t.Run("stream cut while the job finishes", func(t *testing.T) { testStreamCut(t, s) })
	t.Run("prompt from another client", func(t *testing.T) { testOtherClient(t, s) })
	t.Run("prompt abandoned while its turn runs", func(t *testing.T) { testAbandonedPrompt(t, s) })
	t.Run("collector summaries equal the ledger's", func(t *testing.T) { testCollector(t, s) })
	t.Run("GenAI names", func(t *testing.T) { testGenAINames(t, s) })
	t.Run("no other turn unattributed", func(t *testing.T) {
		for reason, roots := range unattributedRoots(s.p) {
			for _, r := range roots {
				if sess := attr(r, contract.AttrConversationID).AsString(); !strings.HasPrefix(sessionTitle(t, s.url, sess), "other client") {
					t.Errorf("turn of session %s (%q) recorded as unattributed (%s)", sess, sessionTitle(t, s.url, sess), reason)
				}
			}
		}
	})
}

// testGenAINames: no span of the whole run has a gen_ai attribute outside
// the GenAI registry; the invoke_agent spans (roots and continuations)
// carry the provider of their turn's model calls (the scripted provider,
// whose id the registry does not list, so it is kept) once one was seen.
func testGenAINames(t *testing.T, s *server) {
	withProvider := map[string]int{}
	for _, sp := range s.p.rec.Ended() {
		genaireg.WantRegistered(t, sp)
		if attr(sp, contract.AttrOperationName).AsString() != contract.OpInvokeAgent {
			continue
		}
		switch got := attr(sp, contract.AttrProviderName).AsString(); got {
		case "scripted":
			withProvider[attr(sp, contract.AttrRole).AsString()]++
		case "":
		default:
			t.Errorf("%s: gen_ai.provider.name %q", sp.Name(), got)
		}
	}
	if withProvider[contract.RoleRoot] == 0 || withProvider[contract.RoleContinuation] == 0 {
		t.Errorf("invoke_agent spans with the provider, by role: %v", withProvider)
	}
}

// sessionTitle returns the title of a session (a test oracle).
func sessionTitle(t *testing.T, base, session string) string {
	t.Helper()
	resp, err := http.Get(base + "/session/" + session)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info struct {
		Title string `json:"title"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		t.Fatal(err)
	}
	return info.Title
}

// postPrompt sends a prompt to the server as another client would, not
// through the Client, and returns when it is answered.
func postPrompt(t *testing.T, base, session, text string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"parts": []any{map[string]any{"type": "text", "text": text}}})
	resp, err := http.Post(base+"/session/"+session+"/message", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("POST message: %s %v", resp.Status, err)
	}
}

// testOtherClient: another client of the server (a TUI, a script) prompts
// a session the Client tracks. That turn belongs to no invocation of the
// Client; it is recorded as an unattributed invocation (other_prompt) with
// its usage, incomplete, never final, and the Client's invocation and it
// together hold exactly OpenCode's own record of the session's usage.
func testOtherClient(t *testing.T, s *server) {
	s.model.reset(func(q req) (string, scriptedmodel.Step) {
		if strings.Contains(q.lastUser, "FOREIGN") {
			return "foreign", scriptedmodel.Step{Text: "answer to someone else"}
		}
		return "own", scriptedmodel.Step{Text: "own answer"}
	})
	sess := s.session(t, "other client")
	own := s.prompt(t, sess, "hello")
	postPrompt(t, s.url, sess, "FOREIGN question")
	var root sdktrace.ReadOnlySpan
	for i := 0; root == nil; i++ {
		if i == 1200 {
			t.Fatalf("no unattributed turn recorded; calls %v", s.model.labels())
		}
		for _, r := range unattributedRoots(s.p)[UnattributedOtherPrompt] {
			if attr(r, contract.AttrConversationID).AsString() == sess {
				root = r
			}
		}
		if root == nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
	other := s.wait(t, attr(root, contract.AttrInvocationID).AsString())
	if other.Status != contract.StatusIncomplete || !slices.Contains(other.Reasons, contract.ReasonUnattributedWakeup+":"+UnattributedOtherPrompt) {
		t.Errorf("unattributed turn: %+v", other)
	}
	checkUsage(t, "unattributed turn", other, s.model.sum("foreign"))
	mine := s.wait(t, own.InvocationID)
	if mine.Status != contract.StatusFinal {
		t.Errorf("the Client's own prompt: %+v", mine)
	}
	checkUsage(t, "own prompt", mine, s.model.sum("own"))
	total := mine
	total.Usage.InputTokens += other.Usage.InputTokens
	total.Usage.OutputTokens += other.Usage.OutputTokens
	total.Usage.CacheReadInputTokens += other.Usage.CacheReadInputTokens
	total.Usage.ReasoningOutputTokens += other.Usage.ReasoningOutputTokens
	total.Usage.ModelCalls += other.Usage.ModelCalls
	checkUsage(t, "both vs OpenCode's records", total, serverUsage(t, s.url, sess))
	if st, _ := s.client.Session(sess); st.OwesWork {
		t.Errorf("session owes work after the other client's turn ended: %+v", st)
	}
}

// abandonRoute holds the first model call of a prompt containing
// "ABANDON" at first, which then runs bash; the call after the tool
// answers at once. Other prompts get a text answer labelled "other".
func abandonRoute(stop <-chan struct{}, first *gate) func(req) (string, scriptedmodel.Step) {
	return func(q req) (string, scriptedmodel.Step) {
		switch {
		case strings.Contains(q.firstUser, "ABANDON") && q.lastRole == "tool":
			return "after-tool", scriptedmodel.Step{Text: "done"}
		case strings.Contains(q.lastUser, "ABANDON"):
			first.pass(stop)
			return "first", scriptedmodel.Step{ToolCalls: []scriptedmodel.ToolCall{{Name: "bash", Arguments: `{"command":"echo hi","description":"say hi"}`}}}
		}
		return "other", scriptedmodel.Step{Text: "other"}
	}
}

// abandonPrompt sends a prompt containing "ABANDON" with c and gives the
// call up (cancels its context) while its first model call is held; it
// returns the invocation id and the gate that holds the call (open it to
// let the turn go on).
func abandonPrompt(t *testing.T, c *Client, m *model, sess string) (string, *gate) {
	t.Helper()
	first := newGate()
	m.reset(abandonRoute(m.stop, first))
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		res *Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := c.Prompt(ctx, sess, Prompt{Text: "ABANDON this call"})
		done <- result{res, err}
	}()
	select {
	case <-first.arrived:
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("the first model call never arrived; calls %v", m.labels())
	}
	cancel()
	r := <-done
	if !errors.Is(r.err, context.Canceled) || r.res == nil || r.res.InvocationID == "" {
		t.Fatalf("abandoned Prompt: %+v %v, want context.Canceled and an invocation", r.res, r.err)
	}
	return r.res.InvocationID, first
}

// testAbandonedPrompt: the caller gives a Prompt call up while the first
// model call of its turn runs; OpenCode goes on with the turn (the bash
// call, the model call after it). The whole turn is the caller's
// invocation, which is not final before the turn ends, then final with
// exactly OpenCode's record of the session.
func testAbandonedPrompt(t *testing.T, s *server) {
	sess := s.session(t, "abandoned prompt")
	id, first := abandonPrompt(t, s.client, s.model, sess)
	if sum, _ := s.p.sp.Ledger().Summary(id); sum.Status != contract.StatusPending {
		t.Errorf("status when the call was given up = %q, want pending (%+v)", sum.Status, sum)
	}
	if st, _ := s.client.Session(sess); !st.OwesWork {
		t.Errorf("session owes nothing while the abandoned turn runs: %+v", st)
	}
	close(first.open)
	sum := s.wait(t, id)
	if sum.Status != contract.StatusFinal {
		t.Fatalf("status %q: %+v", sum.Status, sum)
	}
	checkUsage(t, "invocation vs the scripted model", sum, s.model.sum("first", "after-tool"))
	checkUsage(t, "invocation vs OpenCode's records", sum, serverUsage(t, s.url, sess))
	after := s.model.sum("after-tool")
	if sum.Usage.AfterResultInputTokens < after.InputTokens || sum.Usage.BackgroundJobs != 1 || len(sum.Anomalies) > 0 {
		t.Errorf("summary %+v, want the call after the tool after the result, one job, no anomaly", sum)
	}
	if spanOf(s.p, "execute_tool bash", id) == nil {
		t.Errorf("the turn's bash call is not in the invocation")
	}
	if st, _ := s.client.Session(sess); st.OwesWork {
		t.Errorf("session owes work after the turn: %+v", st)
	}
}

// bashArgs are the bash calls a foreground shell is asked with: plain,
// and asking for the background, which OpenCode 1.18.33 has no parameter
// for and runs in the foreground (issue 32, observation 5): no job.
var bashArgs = []struct{ name, args string }{
	{"foreground bash", `{"command":"echo hi","description":"say hi"}`},
	{"bash asking for the background runs in the foreground", `{"command":"sleep 1; echo hi","description":"say hi","background":true}`},
}

func testForegroundBash(t *testing.T, s *server) {
	for _, tc := range bashArgs {
		t.Run(tc.name, func(t *testing.T) { testBash(t, s, tc.args) })
	}
}

func testBash(t *testing.T, s *server, args string) {
	s.model.reset(func(q req) (string, scriptedmodel.Step) {
		if q.lastRole == "tool" {
			return "after-tool", scriptedmodel.Step{Text: "done"}
		}
		return "bash", scriptedmodel.Step{ToolCalls: []scriptedmodel.ToolCall{{Name: "bash", Arguments: args}}}
	})
	sess := s.session(t, "foreground bash")
	res := s.prompt(t, sess, "run echo")
	if res.Text != "done" {
		t.Errorf("answer %q", res.Text)
	}
	sum, ok := s.p.sp.Ledger().Summary(res.InvocationID)
	if !ok || sum.Status != contract.StatusFinal {
		t.Fatalf("not final when the prompt returned: %+v", sum)
	}
	checkUsage(t, "invocation", sum, s.model.sum("bash", "after-tool"))
	if sum.Usage.AfterResultInputTokens != 0 || sum.Usage.BackgroundJobs != 0 {
		t.Errorf("usage %+v", sum.Usage)
	}
	if n := len(spansNamed(s.p, "execute_tool bash")); n < 1 {
		t.Errorf("%d bash tool spans", n)
	}
	if n := len(spansNamed(s.p, "background shell")); n != 0 {
		t.Errorf("%d background shell spans for a shell that ran in the foreground", n)
	}
	if st, _ := s.client.Session(sess); st.OwesWork {
		t.Errorf("session owes work: %+v", st)
	}
}

// A foreground subagent's model calls are the invocation's, under the
// task tool's span, and the invocation is final at its result.
func testForegroundSubagent(t *testing.T, s *server) {
	s.model.reset(func(q req) (string, scriptedmodel.Step) {
		switch {
		case strings.Contains(q.firstUser, "CHILD"):
			return "child", scriptedmodel.Step{Text: "child result"}
		case q.lastRole == "tool":
			return "after-task", scriptedmodel.Step{Text: "the subagent said: child result"}
		}
		return "task", scriptedmodel.Step{ToolCalls: []scriptedmodel.ToolCall{{Name: "task",
			Arguments: `{"description":"child job","prompt":"CHILD please work","subagent_type":"general"}`}}}
	})
	sess := s.session(t, "foreground subagent")
	res := s.prompt(t, sess, "delegate")
	sum, _ := s.p.sp.Ledger().Summary(res.InvocationID)
	if sum.Status != contract.StatusFinal {
		t.Fatalf("not final at the result: %+v", sum)
	}
	checkUsage(t, "invocation", sum, s.model.sum("task", "child", "after-task"))
	if sum.Usage.BackgroundJobs != 0 || sum.Usage.AfterResultInputTokens != 0 {
		t.Errorf("usage %+v", sum.Usage)
	}
	tool := spanOf(s.p, "execute_tool task", res.InvocationID)
	var under int
	for _, c := range spansNamed(s.p, "chat scripted-model") {
		if tool != nil && c.Parent().SpanID() == tool.SpanContext().SpanID() {
			under++
		}
	}
	if under != 1 {
		t.Errorf("%d model calls under the task tool's span, want the subagent's 1", under)
	}
}

// testForegroundSubagentResumed: a second prompt's task call resumes the
// subagent session the first prompt's ran (task_id). The subagent's new
// turn is the second invocation's, under its task call; the first stays
// as it was, final.
func testForegroundSubagentResumed(t *testing.T, s *server) {
	var mu sync.Mutex
	var resume string // the child session to resume
	s.model.reset(func(q req) (string, scriptedmodel.Step) {
		mu.Lock()
		child := resume
		mu.Unlock()
		switch {
		case strings.Contains(q.lastUser, "CHILD again"):
			return "child-2", scriptedmodel.Step{Text: "child result again"}
		case strings.Contains(q.firstUser, "CHILD"):
			return "child-1", scriptedmodel.Step{Text: "child result"}
		case q.lastRole == "tool" && strings.Contains(q.lastUser, "RESUME"):
			return "after-resume", scriptedmodel.Step{Text: "the subagent answered again"}
		case q.lastRole == "tool":
			return "after-task", scriptedmodel.Step{Text: "the subagent answered"}
		case strings.Contains(q.lastUser, "RESUME"):
			return "resume", scriptedmodel.Step{ToolCalls: []scriptedmodel.ToolCall{{Name: "task",
				Arguments: fmt.Sprintf(`{"description":"child job","prompt":"CHILD again","subagent_type":"general","task_id":%q}`, child)}}}
		}
		return "task", scriptedmodel.Step{ToolCalls: []scriptedmodel.ToolCall{{Name: "task",
			Arguments: `{"description":"child job","prompt":"CHILD please work","subagent_type":"general"}`}}}
	})
	sess := s.session(t, "foreground subagent resumed")
	first := s.prompt(t, sess, "delegate")
	sum1 := s.wait(t, first.InvocationID)
	children := childSessions(t, s.url, sess)
	if len(children) != 1 {
		t.Fatalf("child sessions %v", children)
	}
	mu.Lock()
	resume = children[0]
	mu.Unlock()
	second := s.prompt(t, sess, "RESUME the same subagent")
	if got := childSessions(t, s.url, sess); len(got) != 1 {
		t.Fatalf("the task call did not resume the child session: %v; calls %v", got, s.model.labels())
	}
	sum2 := s.wait(t, second.InvocationID)
	if sum2.Status != contract.StatusFinal || len(sum2.Anomalies) > 0 {
		t.Errorf("second: %+v", sum2)
	}
	checkUsage(t, "first", sum1, s.model.sum("task", "child-1", "after-task"))
	checkUsage(t, "second", sum2, s.model.sum("resume", "child-2", "after-resume"))
	checkUsage(t, "both vs OpenCode's records", instrument.Summary{Usage: instrument.Usage{
		InputTokens: sum1.Usage.InputTokens + sum2.Usage.InputTokens, OutputTokens: sum1.Usage.OutputTokens + sum2.Usage.OutputTokens,
		CacheReadInputTokens:  sum1.Usage.CacheReadInputTokens + sum2.Usage.CacheReadInputTokens,
		ReasoningOutputTokens: sum1.Usage.ReasoningOutputTokens + sum2.Usage.ReasoningOutputTokens,
		ModelCalls:            sum1.Usage.ModelCalls + sum2.Usage.ModelCalls,
	}}, serverUsage(t, s.url, sess, children[0]))
	if now, _ := s.p.sp.Ledger().Summary(first.InvocationID); now.Revision != 1 || now.Usage != sum1.Usage {
		t.Errorf("the first invocation changed: %+v, was %+v", now, sum1)
	}
	tool := spanOf(s.p, "execute_tool task", second.InvocationID)
	var under int
	for _, c := range spansNamed(s.p, "chat scripted-model") {
		if tool != nil && c.Parent().SpanID() == tool.SpanContext().SpanID() {
			under++
		}
	}
	if under != 1 {
		t.Errorf("%d model calls under the resuming task call, want the subagent's 1", under)
	}
}

// bgRoute answers a prompt containing "BG" with a background subagent
// whose model call waits for childGate, the parent's next step only once
// the child's call has arrived (so the child's call surely starts before
// the result), and the continuation at once. Other prompts get a text
// answer labelled "other".
func bgRoute(stop, childGate <-chan struct{}, contGate *gate, other func(req) (string, scriptedmodel.Step)) func(req) (string, scriptedmodel.Step) {
	var once sync.Once
	arrived := make(chan struct{})
	return func(q req) (string, scriptedmodel.Step) {
		switch {
		case strings.Contains(q.firstUser, "CHILD"):
			once.Do(func() { close(arrived) })
			select {
			case <-childGate:
			case <-stop:
			}
			return "child", scriptedmodel.Step{Text: "child result"}
		case strings.Contains(q.lastUser, "<task id="):
			if contGate != nil {
				contGate.pass(stop)
			}
			return "continuation", scriptedmodel.Step{Text: "noted"}
		case strings.Contains(q.firstUser, "BG") && q.lastRole == "tool":
			select {
			case <-arrived:
			case <-stop:
			}
			return "after-launch", scriptedmodel.Step{Text: "launched"}
		case strings.Contains(q.lastUser, "BG"):
			return "launch", scriptedmodel.Step{ToolCalls: []scriptedmodel.ToolCall{{Name: "task", Arguments: bgTask}}}
		}
		if other != nil {
			return other(q)
		}
		return "other", scriptedmodel.Step{Text: "other"}
	}
}

// gate holds a request until opened, and tells when one arrived.
type gate struct {
	arrivedOnce sync.Once
	arrived     chan struct{}
	open        chan struct{}
}

func newGate() *gate { return &gate{arrived: make(chan struct{}), open: make(chan struct{})} }

func (g *gate) pass(stop <-chan struct{}) {
	g.arrivedOnce.Do(func() { close(g.arrived) })
	select {
	case <-g.open:
	case <-stop:
	}
}

func testBackgroundSubagent(t *testing.T, s *server) {
	gate := make(chan struct{})
	s.model.reset(bgRoute(s.model.stop, gate, nil, nil))
	sess := s.session(t, "background subagent")
	res := s.prompt(t, sess, "BG start a job")
	sum, _ := s.p.sp.Ledger().Summary(res.InvocationID)
	if sum.Status != contract.StatusPending {
		t.Errorf("status at the result = %q, want pending (%+v)", sum.Status, sum)
	}
	if st, _ := s.client.Session(sess); !st.OwesWork || len(st.OpenJobs) != 1 {
		t.Errorf("session state at the result: %+v", st)
	}
	close(gate)
	sum = s.wait(t, res.InvocationID)
	if sum.Status != contract.StatusFinal {
		t.Fatalf("status %q: %+v", sum.Status, sum)
	}
	checkUsage(t, "invocation", sum, s.model.sum("launch", "after-launch", "child", "continuation"))
	after := s.model.sum("continuation")
	if sum.Usage.AfterResultInputTokens != after.InputTokens || sum.Usage.AfterResultOutputTokens != after.OutputTokens {
		t.Errorf("after result %d/%d, want %d/%d (the continuation's)", sum.Usage.AfterResultInputTokens,
			sum.Usage.AfterResultOutputTokens, after.InputTokens, after.OutputTokens)
	}
	if sum.Usage.BackgroundJobs != 1 || sum.Usage.Continuations != 1 {
		t.Errorf("jobs %d continuations %d", sum.Usage.BackgroundJobs, sum.Usage.Continuations)
	}
	// The session owes nothing once the invocation is final.
	if st, _ := s.client.Session(sess); st.OwesWork {
		t.Errorf("session owes work after final: %+v", st)
	}
}

func testSecondPromptDoneFirst(t *testing.T, s *server) {
	gate := make(chan struct{})
	s.model.reset(bgRoute(s.model.stop, gate, nil, nil))
	sess := s.session(t, "second prompt")
	first := s.prompt(t, sess, "BG start a job")
	second := s.prompt(t, sess, "hello again")
	sum2, _ := s.p.sp.Ledger().Summary(second.InvocationID)
	if sum2.Status != contract.StatusFinal {
		t.Errorf("second invocation not final at its result: %+v", sum2)
	}
	checkUsage(t, "second", sum2, s.model.sum("other"))
	close(gate)
	sum1 := s.wait(t, first.InvocationID)
	checkUsage(t, "first", sum1, s.model.sum("launch", "after-launch", "child", "continuation"))
	if sum1.Usage.Continuations != 1 {
		t.Errorf("first: %d continuations", sum1.Usage.Continuations)
	}
	sum2 = s.wait(t, second.InvocationID)
	checkUsage(t, "second after the continuation", sum2, s.model.sum("other"))
}

func testNotificationDuringSecondPrompt(t *testing.T, s *server) {
	gate := make(chan struct{})
	var sess string
	slow := func(q req) (string, scriptedmodel.Step) {
		// Let the child finish and wait until OpenCode has posted its
		// notification into the session while this call runs.
		close(gate)
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) && !hasNotification(s.url, sess) {
			time.Sleep(50 * time.Millisecond)
		}
		return "other", scriptedmodel.Step{Text: "slow answer"}
	}
	s.model.reset(bgRoute(s.model.stop, gate, nil, slow))
	sess = s.session(t, "notification during turn")
	first := s.prompt(t, sess, "BG start a job")
	second := s.prompt(t, sess, "slow question")
	sum1 := s.wait(t, first.InvocationID)
	checkUsage(t, "first", sum1, s.model.sum("launch", "after-launch", "child", "continuation"))
	sum2 := s.wait(t, second.InvocationID)
	checkUsage(t, "second", sum2, s.model.sum("other"))
	if sum1.Usage.Continuations != 1 {
		t.Errorf("first: %d continuations", sum1.Usage.Continuations)
	}
	// OpenCode ran the continuation inside the second prompt's call: the
	// continuation's model call started before the second root ended, and
	// still counts for the first invocation.
	root2 := spanOf(s.p, "invoke_agent build", second.InvocationID)
	var contCall bool
	for _, c := range spansNamed(s.p, "chat scripted-model") {
		if attr(c, contract.AttrInvocationID).AsString() == first.InvocationID && root2 != nil &&
			c.StartTime().After(root2.StartTime()) && c.StartTime().Before(root2.EndTime()) &&
			c.StartTime().After(spanOf(s.p, "invoke_agent build", first.InvocationID).EndTime()) {
			contCall = true
		}
	}
	if !contCall {
		t.Errorf("no model call of the first invocation ran during the second prompt")
	}
}

// abortCutACall reports whether an abort cut a model call of sum's
// invocation that had reached the model (through the wire proxy): what
// that call billed is unknown (contract, "How a model call ended"), so
// the invocation must be incomplete with usage_missing, and nothing else.
// It fails t when sum says otherwise.
func (s *server) abortCutACall(t *testing.T, sum instrument.Summary) bool {
	t.Helper()
	if !s.wire {
		return false
	}
	cut := 0
	for _, sp := range s.p.rec.Ended() {
		if attr(sp, contract.AttrInvocationID).AsString() != sum.InvocationID {
			continue
		}
		switch attr(sp, contract.AttrResponseEnding).AsString() {
		case contract.EndingCallerClosed, contract.EndingCut, contract.EndingNoResponse:
			cut++
		}
	}
	if cut == 0 {
		return false
	}
	if sum.Status != contract.StatusIncomplete || len(sum.Reasons) == 0 {
		t.Fatalf("%d calls cut by the abort, summary %+v: want incomplete, usage_missing", cut, sum)
	}
	for _, r := range sum.Reasons {
		if !strings.HasPrefix(r, contract.ReasonUsageMissing+":") {
			t.Errorf("reason %q beside the cut calls' usage_missing", r)
		}
	}
	t.Logf("the abort cut %d model calls in flight: %s %v", cut, sum.Status, sum.Reasons)
	return true
}

func spanOf(p *pipeline, name, invocation string) sdktrace.ReadOnlySpan {
	for _, sp := range spansNamed(p, name) {
		if attr(sp, contract.AttrInvocationID).AsString() == invocation {
			return sp
		}
	}
	return nil
}

// hasNotification reports whether session holds a completion
// notification (read from the server, as a test oracle).
func hasNotification(base, session string) bool {
	resp, err := http.Get(base + "/session/" + session + "/message")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var msgs []messageWithParts
	if json.NewDecoder(resp.Body).Decode(&msgs) != nil {
		return false
	}
	for _, m := range msgs {
		for _, p := range m.Parts {
			if _, _, ok := parseNotification(p); ok {
				return true
			}
		}
	}
	return false
}

// serverUsage sums OpenCode's own record of the session and its child
// sessions (GenAI sense): what the ledger must equal, no more, no less.
func serverUsage(t *testing.T, base string, sessions ...string) instrument.Usage {
	t.Helper()
	var u instrument.Usage
	for _, id := range sessions {
		resp, err := http.Get(base + "/session/" + id + "/message")
		if err != nil {
			t.Fatal(err)
		}
		var msgs []messageWithParts
		err = json.NewDecoder(resp.Body).Decode(&msgs)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range msgs {
			if m.Info.Role != "assistant" || m.Info.Tokens == nil {
				continue
			}
			tk := m.Info.Tokens
			u.InputTokens += tk.Input + tk.Cache.Read + tk.Cache.Write
			u.OutputTokens += tk.Output + tk.Reasoning
			u.CacheReadInputTokens += tk.Cache.Read
			u.ReasoningOutputTokens += tk.Reasoning
			u.ModelCalls++
		}
	}
	return u
}

func childSessions(t *testing.T, base, parent string) []string {
	t.Helper()
	resp, err := http.Get(base + "/session/" + parent + "/children")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []struct {
		ID string `json:"id"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, len(out))
	for _, s := range out {
		ids = append(ids, s.ID)
	}
	return ids
}

// testAbortRacingCompletion aborts the session right after the prompt
// that launched a background subagent returned, before (abortFirst) or
// while the child's model call is released. Two outcomes are legitimate,
// and the job's span says which one happened: the child was cancelled
// (its span ends in error) and its one followup is closed as
// interrupted, or the child finished first and its notification's turn,
// cancelled or not, is a continuation. Exactly one of them, as many as
// the span's invocation.followups.
func testAbortRacingCompletion(t *testing.T, s *server, abortFirst bool) {
	gate := make(chan struct{})
	s.model.reset(bgRoute(s.model.stop, gate, nil, nil))
	sess := s.session(t, "abort")
	res := s.prompt(t, sess, "BG start a job")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if abortFirst {
		if err := s.client.Abort(ctx, sess); err != nil {
			t.Fatal(err)
		}
		close(gate)
	} else {
		close(gate)
		if err := s.client.Abort(ctx, sess); err != nil {
			t.Fatal(err)
		}
	}
	sum := s.wait(t, res.InvocationID)
	if s.abortCutACall(t, sum) {
		return
	}
	if sum.Status != contract.StatusFinal {
		t.Fatalf("status %q: %+v", sum.Status, sum)
	}
	bg := spanOf(s.p, "background subagent", res.InvocationID)
	if bg == nil {
		t.Fatalf("no background span; model calls %v", s.model.labels())
	}
	followups := attr(bg, contract.AttrFollowups).AsInt64()
	cancelled := bg.Status().Code == codes.Error
	var closed, conts int64
	for _, c := range spansNamed(s.p, contract.SpanNameFollowupClosed) {
		if attr(c, contract.AttrInvocationID).AsString() == res.InvocationID {
			closed++
			if r := attr(c, contract.AttrFollowupReason).AsString(); r != contract.ReasonInterrupted {
				t.Errorf("followup closed with reason %q", r)
			}
		}
	}
	for _, c := range spansNamed(s.p, "continue_agent build") {
		if attr(c, contract.AttrInvocationID).AsString() == res.InvocationID {
			conts++
		}
	}
	t.Logf("outcome: job cancelled %v, followups %d, %d followup_closed, %d continuations; model calls %v",
		cancelled, followups, closed, conts, s.model.labels())
	switch {
	case followups != 1 || closed+conts != followups:
		t.Errorf("followups %d settled %d times (closed %d, continuations %d)", followups, closed+conts, closed, conts)
	case cancelled && closed != 1:
		t.Errorf("cancelled job: %d followup_closed, %d continuations", closed, conts)
	case !cancelled && conts != 1:
		t.Errorf("finished job: %d followup_closed, %d continuations", closed, conts)
	case abortFirst && !cancelled:
		t.Errorf("abort before the completion, yet the job finished")
	}
	if sum.Usage.Continuations != conts || sum.Usage.BackgroundJobs != 1 {
		t.Errorf("summary %+v; %d continuation spans", sum.Usage, conts)
	}
	want := serverUsage(t, s.url, append([]string{sess}, childSessions(t, s.url, sess)...)...)
	if s.wire {
		// The wire counts what reached OpenCode, also of a call the abort
		// cut after its answer was in, which OpenCode does not record.
		checkBetween(t, sum, want, s.model.sum("launch", "after-launch", "child", "continuation"))
	} else {
		checkUsage(t, "invocation vs OpenCode's records", sum, want)
	}
	if st, _ := s.client.Session(sess); st.OwesWork {
		t.Errorf("session owes work: %+v", st)
	}
}

func testAbortDuringContinuation(t *testing.T, s *server) {
	child := make(chan struct{})
	cont := newGate()
	s.model.reset(bgRoute(s.model.stop, child, cont, nil))
	sess := s.session(t, "abort during continuation")
	closedBefore := len(spansNamed(s.p, contract.SpanNameFollowupClosed))
	res := s.prompt(t, sess, "BG start a job")
	close(child)
	select {
	case <-cont.arrived:
	case <-time.After(60 * time.Second):
		t.Fatalf("no continuation request; model calls %v", s.model.labels())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.client.Abort(ctx, sess); err != nil {
		t.Fatal(err)
	}
	close(cont.open)
	sum := s.wait(t, res.InvocationID)
	if s.abortCutACall(t, sum) {
		return
	}
	if sum.Status != contract.StatusFinal || sum.Usage.Continuations != 1 {
		t.Fatalf("summary %+v", sum)
	}
	if n := len(spansNamed(s.p, contract.SpanNameFollowupClosed)) - closedBefore; n != 0 {
		t.Errorf("%d followup_closed spans for a followup the continuation discharged", n)
	}
	want := serverUsage(t, s.url, append([]string{sess}, childSessions(t, s.url, sess)...)...)
	checkUsage(t, "invocation vs OpenCode's records", sum, want)
	// The aborted continuation call reported nothing; all else is exact.
	exact := s.model.sum("launch", "after-launch", "child")
	exact.ModelCalls++
	checkUsage(t, "invocation vs the scripted model", sum, exact)
}

// testTransport sends the prompt with a plain HTTP client through
// Client.Transport, as a user of another OpenCode client would.
func testTransport(t *testing.T, s *server) {
	gate := make(chan struct{})
	s.model.reset(bgRoute(s.model.stop, gate, nil, nil))
	sess := s.session(t, "transport")
	hc := &http.Client{Transport: s.client.Transport(nil)}
	resp, err := hc.Post(s.url+"/session/"+sess+"/message", "application/json",
		strings.NewReader(`{"parts":[{"type":"text","text":"BG via the transport"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var answer messageWithParts
	err = json.NewDecoder(resp.Body).Decode(&answer)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || answer.Info.Role != "assistant" {
		t.Fatalf("answer %s %+v: %v", resp.Status, answer.Info, err)
	}
	id := resp.Header.Get(HeaderInvocationID)
	if id == "" {
		t.Fatal("no invocation id header")
	}
	if sum, _ := s.p.sp.Ledger().Summary(id); sum.Status != contract.StatusPending {
		t.Errorf("status at the result %q", sum.Status)
	}
	close(gate)
	sum := s.wait(t, id)
	checkUsage(t, "invocation", sum, s.model.sum("launch", "after-launch", "child", "continuation"))
}

// cutTransport breaks the first event stream on demand and holds the
// reconnection until allowed.
type cutTransport struct {
	base  http.RoundTripper
	cut   chan struct{}
	allow chan struct{}

	// mu guards n.
	mu sync.Mutex
	n  int
}

func (c *cutTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path != "/event" {
		return c.base.RoundTrip(r)
	}
	c.mu.Lock()
	c.n++
	n := c.n
	c.mu.Unlock()
	if n > 1 {
		select {
		case <-c.allow:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
	resp, err := c.base.RoundTrip(r)
	if err != nil || n > 1 {
		return resp, err
	}
	body := resp.Body
	done := make(chan struct{})
	go func() {
		select {
		case <-c.cut:
			body.Close()
		case <-done:
		}
	}()
	resp.Body = &closeNotify{ReadCloser: body, done: done}
	return resp, nil
}

type closeNotify struct {
	io.ReadCloser
	once sync.Once
	done chan struct{}
}

func (c *closeNotify) Close() error {
	c.once.Do(func() { close(c.done) })
	return c.ReadCloser.Close()
}

// testStreamCut breaks the event stream after the prompt returned and
// reconnects only once the job, its notification and the continuation are
// over: the Client must read it all back from the server.
func testStreamCut(t *testing.T, s *server) {
	ct := &cutTransport{base: http.DefaultTransport, cut: make(chan struct{}), allow: make(chan struct{})}
	c, err := New(s.url, &http.Client{Transport: ct}, WithTracerProvider(s.p.tp), WithLedger(s.p.sp.Ledger()),
		WithReconnectBackoff(time.Millisecond, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	}()
	gate := make(chan struct{})
	s.model.reset(bgRoute(s.model.stop, gate, nil, nil))
	sess := s.session(t, "stream cut")
	res, err := c.Prompt(ctx, sess, Prompt{Text: "BG while the stream breaks"})
	if err != nil {
		t.Fatal(err)
	}
	close(ct.cut)
	close(gate)
	s.model.waitArrived(t, "continuation")
	// Wait (bounded) until OpenCode is done with the session.
	for i := 0; ; i++ {
		if i == 600 {
			t.Fatalf("session %s still busy", sess)
		}
		if sessionIdle(t, s.url, sess) && lastAssistantDone(t, s.url, sess) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if sum, _ := s.p.sp.Ledger().Summary(res.InvocationID); sum.Status != contract.StatusPending {
		t.Fatalf("final while the stream was down: %+v", sum)
	}
	close(ct.allow)
	sum := s.wait(t, res.InvocationID)
	checkUsage(t, "invocation", sum, s.model.sum("launch", "after-launch", "child", "continuation"))
	if sum.Usage.Continuations != 1 || c.Stats().Reconnects < 1 {
		t.Errorf("summary %+v, stats %+v", sum, c.Stats())
	}
}

func sessionIdle(t *testing.T, base, session string) bool {
	t.Helper()
	resp, err := http.Get(base + "/session/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st map[string]json.RawMessage
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	_, busy := st[session]
	return !busy
}

func lastAssistantDone(t *testing.T, base, session string) bool {
	t.Helper()
	resp, err := http.Get(base + "/session/" + session + "/message")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var msgs []messageWithParts
	if err := json.NewDecoder(resp.Body).Decode(&msgs); err != nil {
		t.Fatal(err)
	}
	if len(msgs) == 0 {
		return false
	}
	last := msgs[len(msgs)-1].Info
	return last.Role == "assistant" && last.Time.Completed != 0 && strings.Contains(textOfParts(msgs[len(msgs)-1].Parts), "noted")
}

func textOfParts(ps []part) string {
	var b strings.Builder
	for _, p := range ps {
		b.WriteString(p.Text)
	}
	return b.String()
}

// testCollector exports the spans of a few scenarios to the real
// collector distribution (collector-config/local.yaml) and checks that its
// invocation summaries equal the in-process ledger's.
func testCollector(t *testing.T, s *server) {
	addrs := testbin.StartLocalCollector(t).Addrs
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(addrs.OTLPGRPC), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	sp := instrument.NewSpanProcessor(sdktrace.NewBatchSpanProcessor(exp))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp), sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	c, err := New(s.url, &http.Client{}, WithTracerProvider(tp), WithLedger(sp.Ledger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Shutdown(context.Background()) }()

	var ids []string
	prompt := func(sess, text string) string {
		res, err := c.Prompt(ctx, sess, Prompt{Text: text})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.InvocationID)
		return res.InvocationID
	}
	// A background job with a second prompt while it runs.
	gate := make(chan struct{})
	s.model.reset(bgRoute(s.model.stop, gate, nil, nil))
	sess := s.session(t, "collector 1")
	prompt(sess, "BG start a job")
	prompt(sess, "hello again")
	close(gate)
	// An abort before the job completes.
	gate = make(chan struct{})
	s.model.reset(bgRoute(s.model.stop, gate, nil, nil))
	sess = s.session(t, "collector 2")
	prompt(sess, "BG start a job")
	if err := c.Abort(ctx, sess); err != nil {
		t.Fatal(err)
	}
	close(gate)
	// Another client's prompt into a tracked session: an unattributed
	// turn, incomplete on both halves with the same usage.
	s.model.reset(func(req) (string, scriptedmodel.Step) { return "foreign", scriptedmodel.Step{Text: "foreign answer"} })
	postPrompt(t, s.url, sess, "FOREIGN question")
	var foreign string
	for i := 0; foreign == ""; i++ {
		if i == 1200 {
			t.Fatal("no unattributed turn recorded")
		}
		for _, sp := range rec.Ended() {
			if attr(sp, contract.AttrUnattributed).AsString() == UnattributedOtherPrompt {
				foreign = attr(sp, contract.AttrInvocationID).AsString()
			}
		}
		if foreign == "" {
			time.Sleep(50 * time.Millisecond)
		}
	}
	// A prompt given up while its turn runs: on the wire too, the rest of
	// the turn is a job the root counts, so the collector waits for it.
	abandoned, first := abandonPrompt(t, c, s.model, s.session(t, "collector 3"))
	close(first.open)
	ids = append(ids, abandoned)

	local := map[string]instrument.Summary{}
	for _, id := range append(ids, foreign) {
		sum, err := c.Wait(ctx, id)
		want := contract.StatusFinal
		if id == foreign {
			want = contract.StatusIncomplete
		}
		if err != nil || string(sum.Status) != want {
			t.Fatalf("ledger %s: %v %+v", id, err, sum)
		}
		local[id] = sum
	}
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	closed, err := testbin.WaitClosed(ctx, addrs.TracesFile, append(ids, foreign))
	if err != nil {
		t.Fatal(err)
	}
	// Contract rule 7 on the collector's half: the root's
	// invocation.unattributed closes the invocation incomplete.
	t.Run("unattributed turn closes incomplete", func(t *testing.T) {
		if r := closed[foreign]; r.Status != contract.StatusIncomplete ||
			!slices.Contains(r.IncompleteReasons, contract.ReasonUnattributedWakeup+":"+UnattributedOtherPrompt) {
			t.Errorf("unattributed turn %s: collector %s %v, want incomplete with %s:%s", foreign, r.Status, r.IncompleteReasons,
				contract.ReasonUnattributedWakeup, UnattributedOtherPrompt)
		}
	})
	for _, id := range append(ids, foreign) {
		l, r := local[id], closed[id]
		u := l.Usage
		got := []int64{r.InputTokens, r.OutputTokens, r.CacheReadTokens, r.CacheCreationTokens, r.ReasoningTokens,
			r.AfterResultInputTokens, r.AfterResultOutputTokens, r.ModelCalls, r.BackgroundJobs, r.Continuations}
		want := []int64{u.InputTokens, u.OutputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens, u.ReasoningOutputTokens,
			u.AfterResultInputTokens, u.AfterResultOutputTokens, u.ModelCalls, u.BackgroundJobs, u.Continuations}
		// The only anomaly these runs make is an aborted job's
		// (followup_interrupted, contract v0.7), on both halves alike.
		ra, la := slices.Sorted(slices.Values(r.Anomalies)), slices.Sorted(slices.Values(l.Anomalies))
		if fmt.Sprint(got) != fmt.Sprint(want) || id != foreign && r.Status != string(l.Status) || fmt.Sprint(ra) != fmt.Sprint(la) ||
			slices.ContainsFunc(ra, func(a string) bool { return !strings.HasPrefix(a, contract.AnomalyFollowupInterrupted+":") }) {
			t.Errorf("invocation %s: collector %s %v anomalies %v, ledger %s %v anomalies %v", id, r.Status, got, r.Anomalies, l.Status, want, l.Anomalies)
		}
	}
}

// testPromptAsync: the root of a prompt sent with prompt_async ends when
// the session goes idle after answering it; the job's work after that is
// after the result.
func testPromptAsync(t *testing.T, s *server) {
	gate := make(chan struct{})
	s.model.reset(bgRoute(s.model.stop, gate, nil, nil))
	sess := s.session(t, "prompt_async")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	id, err := s.client.PromptAsync(ctx, sess, Prompt{Text: "BG asynchronously"})
	if err != nil {
		t.Fatal(err)
	}
	// The root ends when the session is idle after the answer; only then
	// may the job finish, or OpenCode runs its continuation in the same
	// loop, before that idle.
	for i := 0; spanOf(s.p, "invoke_agent build", id) == nil; i++ {
		if i == 1200 {
			t.Fatalf("root never ended; model calls %v", s.model.labels())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if sum, _ := s.p.sp.Ledger().Summary(id); sum.Status != contract.StatusPending {
		t.Errorf("status at the result %q", sum.Status)
	}
	close(gate)
	sum := s.wait(t, id)
	checkUsage(t, "invocation", sum, s.model.sum("launch", "after-launch", "child", "continuation"))
	after := s.model.sum("continuation")
	if sum.Usage.AfterResultInputTokens != after.InputTokens || sum.Usage.Continuations != 1 {
		t.Errorf("usage %+v; want after-result input %d (the continuation's)", sum.Usage, after.InputTokens)
	}
}

// testNotificationConsumed: the notification is posted while a second
// prompt's turn runs, and a third prompt arrives before that turn ends;
// OpenCode's next turn answers the newest user message, the third prompt,
// which reads the notification: the followup is closed consumed_by the
// third invocation, and every invocation keeps its own usage.
func testNotificationConsumed(t *testing.T, s *server) {
	child := make(chan struct{})
	hold := newGate()
	var sess string
	other := func(q req) (string, scriptedmodel.Step) {
		switch {
		case strings.Contains(q.lastUser, "SECOND"):
			hold.pass(s.model.stop)
			return "second", scriptedmodel.Step{Text: "second answer"}
		case strings.Contains(q.lastUser, "THIRD"):
			return "third", scriptedmodel.Step{Text: "third answer"}
		}
		return "other", scriptedmodel.Step{Text: "other"}
	}
	s.model.reset(bgRoute(s.model.stop, child, nil, other))
	sess = s.session(t, "consumed")
	first := s.prompt(t, sess, "BG start a job")
	secondDone := make(chan *Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		res, err := s.client.Prompt(ctx, sess, Prompt{Text: "SECOND question"})
		if err != nil {
			t.Errorf("second prompt: %v", err)
		}
		secondDone <- res
	}()
	select {
	case <-hold.arrived:
	case <-time.After(60 * time.Second):
		t.Fatalf("second prompt's call never arrived; calls %v", s.model.labels())
	}
	close(child)
	for i := 0; !hasNotification(s.url, sess); i++ {
		if i == 1200 {
			t.Fatal("no notification posted")
		}
		time.Sleep(50 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	third, err := s.client.PromptAsync(ctx, sess, Prompt{Text: "THIRD question"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; !hasUserText(s.url, sess, "THIRD"); i++ {
		if i == 1200 {
			t.Fatal("third prompt never stored")
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(hold.open)
	second := <-secondDone
	if second == nil {
		t.FailNow()
	}
	sums := map[string]instrument.Summary{}
	for _, id := range []string{first.InvocationID, second.InvocationID, third} {
		sums[id] = s.wait(t, id)
	}
	var closed []string
	for _, c := range spansNamed(s.p, contract.SpanNameFollowupClosed) {
		if attr(c, contract.AttrInvocationID).AsString() == first.InvocationID {
			closed = append(closed, attr(c, contract.AttrFollowupReason).AsString()+":"+attr(c, contract.AttrFollowupConsumer).AsString())
		}
	}
	conts := sums[first.InvocationID].Usage.Continuations
	t.Logf("outcome: followup_closed %v, continuations %d; calls %v", closed, conts, s.model.labels())
	if int64(len(closed))+conts != 1 {
		t.Fatalf("followup settled %d times", int64(len(closed))+conts)
	}
	if len(closed) == 1 && closed[0] != contract.ReasonConsumedBy+":"+third {
		t.Errorf("closed %v, want consumed_by the third invocation %s", closed, third)
	}
	checkUsage(t, "second", sums[second.InvocationID], s.model.sum("second"))
	if len(closed) == 1 {
		checkUsage(t, "first", sums[first.InvocationID], s.model.sum("launch", "after-launch", "child"))
		checkUsage(t, "third", sums[third], s.model.sum("third"))
	}
	var total instrument.Usage
	for _, sum := range sums {
		total.InputTokens += sum.Usage.InputTokens
		total.OutputTokens += sum.Usage.OutputTokens
		total.CacheReadInputTokens += sum.Usage.CacheReadInputTokens
		total.ReasoningOutputTokens += sum.Usage.ReasoningOutputTokens
		total.ModelCalls += sum.Usage.ModelCalls
	}
	want := serverUsage(t, s.url, append([]string{sess}, childSessions(t, s.url, sess)...)...)
	checkUsage(t, "all invocations vs OpenCode's records", instrument.Summary{Usage: total}, want)
}

// testPromptAndNotificationOneRequest (issue 32, observation 3): while
// the second prompt's turn runs, the caller posts a third prompt and then
// the first prompt's job ends, its notification posted after the third
// prompt. When the second turn's step ends, OpenCode answers both with
// one request whose parent is the notification: the third prompt's
// invocation owns it and A's notification is consumed_by it.
func testPromptAndNotificationOneRequest(t *testing.T, s *server) {
	child := make(chan struct{})
	hold := newGate()
	other := func(q req) (string, scriptedmodel.Step) {
		if strings.Contains(q.lastUser, "SECOND") {
			hold.pass(s.model.stop)
			return "second", scriptedmodel.Step{Text: "second answer"}
		}
		return "other", scriptedmodel.Step{Text: "other"}
	}
	base := bgRoute(s.model.stop, child, nil, other)
	s.model.reset(func(q req) (string, scriptedmodel.Step) {
		if strings.Contains(q.lastUser, "<task id=") && bytes.Contains(q.Raw, []byte("THIRD")) {
			return "third", scriptedmodel.Step{Text: "third answer, job noted"}
		}
		if strings.Contains(q.lastUser, "THIRD") {
			return "third-alone", scriptedmodel.Step{Text: "third answer"}
		}
		return base(q)
	})
	sess := s.session(t, "prompt and notification in one request")
	first := s.prompt(t, sess, "BG start a job")
	secondDone := make(chan *Result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		res, err := s.client.Prompt(ctx, sess, Prompt{Text: "SECOND question"})
		if err != nil {
			t.Errorf("second prompt: %v", err)
		}
		secondDone <- res
	}()
	select {
	case <-hold.arrived:
	case <-time.After(60 * time.Second):
		t.Fatalf("second prompt's call never arrived; calls %v", s.model.labels())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	third, err := s.client.PromptAsync(ctx, sess, Prompt{Text: "THIRD question"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; !hasUserText(s.url, sess, "THIRD"); i++ {
		if i == 1200 {
			t.Fatal("third prompt never stored")
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(child)
	for i := 0; !hasNotification(s.url, sess); i++ {
		if i == 1200 {
			t.Fatal("no notification posted")
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(hold.open)
	second := <-secondDone
	if second == nil {
		t.FailNow()
	}
	sums := map[string]instrument.Summary{}
	for _, id := range []string{first.InvocationID, second.InvocationID, third} {
		sums[id] = s.wait(t, id)
		if sums[id].Status != contract.StatusFinal {
			t.Errorf("invocation %s: %s %v", id, sums[id].Status, sums[id].Reasons)
		}
	}
	labels := s.model.labels()
	t.Logf("calls %v", labels)
	if !slices.ContainsFunc(labels, func(l string) bool { return strings.HasSuffix(l, ":third") }) {
		t.Fatalf("OpenCode did not answer the third prompt and the notification with one request: %v", labels)
	}
	checkUsage(t, "first", sums[first.InvocationID], s.model.sum("launch", "after-launch", "child"))
	checkUsage(t, "second", sums[second.InvocationID], s.model.sum("second"))
	checkUsage(t, "third", sums[third], s.model.sum("third"))
	var closed []string
	for _, c := range spansNamed(s.p, contract.SpanNameFollowupClosed) {
		if attr(c, contract.AttrInvocationID).AsString() == first.InvocationID {
			closed = append(closed, attr(c, contract.AttrFollowupReason).AsString()+":"+attr(c, contract.AttrFollowupConsumer).AsString())
		}
	}
	if want := contract.ReasonConsumedBy + ":" + third; len(closed) != 1 || closed[0] != want {
		t.Errorf("first's followup closed %v, want [%s]", closed, want)
	}
	var total instrument.Usage
	for _, sum := range sums {
		total.InputTokens += sum.Usage.InputTokens
		total.OutputTokens += sum.Usage.OutputTokens
		total.CacheReadInputTokens += sum.Usage.CacheReadInputTokens
		total.ReasoningOutputTokens += sum.Usage.ReasoningOutputTokens
		total.ModelCalls += sum.Usage.ModelCalls
	}
	want := serverUsage(t, s.url, append([]string{sess}, childSessions(t, s.url, sess)...)...)
	if s.wire {
		want = s.model.sum("launch", "after-launch", "child", "second", "third")
	}
	checkUsage(t, "all invocations vs the model's answers", instrument.Summary{Usage: total}, want)
}

// hasUserText reports whether session holds a user message with text.
func hasUserText(base, session, text string) bool {
	resp, err := http.Get(base + "/session/" + session + "/message")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var msgs []messageWithParts
	if json.NewDecoder(resp.Body).Decode(&msgs) != nil {
		return false
	}
	for _, m := range msgs {
		if m.Info.Role == "user" && strings.Contains(textOfParts(m.Parts), text) {
			return true
		}
	}
	return false
}
