package otelopencode

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/internal/testbin"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// usageSeed seeds the usage the scripted model reports in the model-wire
// tests: random per run (AGENTLEDGER_USAGE_SEED repeats one), printed, so
// that no expectation can be a constant.
var usageSeed = func() uint64 {
	if s := os.Getenv("AGENTLEDGER_USAGE_SEED"); s != "" {
		if v, err := strconv.ParseUint(s, 10, 64); err == nil {
			return v
		}
	}
	return rand.Uint64()
}()

// scriptedUsage is what the scripted model reports for its n-th request
// (GenAI sense), random from usageSeed and n. The chat completions API
// has no cache-creation count.
func scriptedUsage(seq int) scriptedmodel.Usage {
	r := rand.New(rand.NewPCG(usageSeed, uint64(seq)))
	in := 200 + r.IntN(8000)
	out := 5 + r.IntN(1500)
	return scriptedmodel.Usage{InputTokens: in, CacheReadTokens: r.IntN(in / 3), OutputTokens: out, ReasoningTokens: r.IntN(out/2 + 1)}
}

// TestServerModelWire drives a real opencode serve whose provider's
// baseURL is the Client's model-wire proxy (WithModelProxy): every model
// request is counted from the wire, attributed by what it carries, and
// no model call is made from the events. The scenarios of TestServer
// that involve tools, subagents and notifications are exact per
// invocation; at the end every request the scripted model answered is on
// exactly one invocation (the balance).
func TestServerModelWire(t *testing.T) {
	m := newModel(t)
	m.usage = scriptedUsage
	t.Logf("scripted usage seed %d (AGENTLEDGER_USAGE_SEED=%d repeats it)", usageSeed, usageSeed)
	s := startServerWith(t, m, true, nil)
	if s.client.ModelProxyURL() == "" {
		t.Fatal("no model proxy URL")
	}
	t.Run("foreground bash", func(t *testing.T) { testForegroundBash(t, s) })
	t.Run("foreground subagent", func(t *testing.T) { testForegroundSubagent(t, s) })
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
	t.Run("prompt from another client", func(t *testing.T) { testOtherClient(t, s) })
	t.Run("prompt abandoned while its turn runs", func(t *testing.T) { testAbandonedPrompt(t, s) })
	t.Run("title of an untitled session", func(t *testing.T) { testWireTitle(t, s) })
	t.Run("compaction", func(t *testing.T) { testWireCompaction(t, s) })
	t.Run("no model call from the events", func(t *testing.T) {
		for _, sp := range s.p.rec.Ended() {
			if strings.HasPrefix(sp.Name(), contract.OpChat+" ") && sp.InstrumentationScope().Name == ScopeName &&
				attr(sp, AttrMessageID).AsString() != "" {
				t.Errorf("model-call span %q made from the events (message %s)", sp.Name(), attr(sp, AttrMessageID).AsString())
			}
		}
	})
	t.Run("balance", func(t *testing.T) { wireBalance(t, s) })
}

// testWireTitle: the title request OpenCode makes for an untitled
// session's first prompt carries the prompt's text and is the prompt's
// invocation's model call.
func testWireTitle(t *testing.T, s *server) {
	s.model.reset(func(q req) (string, scriptedmodel.Step) {
		if tools, _ := q.Body["tools"].([]any); len(tools) == 0 {
			return "title", scriptedmodel.Step{Text: "A title"}
		}
		return "answer", scriptedmodel.Step{Text: "answered"}
	})
	sess := s.session(t, "")
	res := s.prompt(t, sess, "TITLE please answer")
	sum := s.wait(t, res.InvocationID)
	labels := s.model.labels()
	if !strings.Contains(fmt.Sprint(labels), "title") {
		t.Skipf("OpenCode made no title request (calls %v)", labels)
	}
	if sum.Status != contract.StatusFinal {
		t.Errorf("status %s %v", sum.Status, sum.Reasons)
	}
	checkUsage(t, "invocation", sum, s.model.sum("title", "answer"))
}

// checkBetween checks an invocation whose calls an abort may have cut:
// its usage is at least what OpenCode recorded and at most what the
// scripted model answered (a call cut before its answer reached OpenCode
// has no usage on the wire), with as many model calls as the model saw.
func checkBetween(t *testing.T, got instrument.Summary, low, high instrument.Usage) {
	t.Helper()
	u := got.Usage
	in := func(v, lo, hi int64) bool { return lo <= v && v <= hi }
	if !in(u.InputTokens, low.InputTokens, high.InputTokens) || !in(u.OutputTokens, low.OutputTokens, high.OutputTokens) ||
		!in(u.CacheReadInputTokens, low.CacheReadInputTokens, high.CacheReadInputTokens) || u.ModelCalls != high.ModelCalls {
		t.Errorf("usage %+v not between OpenCode's records %+v and the model's answers %+v", u, low, high)
	}
}

// wireBalance is genaitest.Balance over every session of the run but the
// ones the abort scenarios made (an aborted call the scripted model
// answered may never have reached the proxy), with every request the
// scripted model answered for them (a child session's by its parent).
// Every request of the run went through the proxy as a traced call, and
// no turn but another client's is unattributed.
func wireBalance(t *testing.T, s *server) {
	s.model.mu.Lock()
	all := append([]call(nil), s.model.all...)
	s.model.mu.Unlock()
	if st := s.client.proxy.Stats(); st.Calls != int64(len(all)) || st.Passed != 0 || st.Oversized != 0 {
		t.Errorf("proxy stats %+v, want %d calls (every request the model answered)", st, len(all))
	}
	for reason, roots := range unattributedRoots(s.p) {
		for _, r := range roots {
			sess := attr(r, contract.AttrConversationID).AsString()
			if title := sessionTitle(t, s.url, sess); !strings.HasPrefix(title, "other client") && title != "compaction" {
				t.Errorf("turn of session %s (%q) recorded as unattributed (%s)", sess, sessionTitle(t, s.url, sess), reason)
			}
		}
	}
	excluded := map[string]bool{}
	var sessions []string
	for _, sp := range s.p.rec.Ended() {
		sess := attr(sp, contract.AttrConversationID).AsString()
		if sess == "" || excluded[sess] || slices.Contains(sessions, sess) {
			continue
		}
		if strings.HasPrefix(sessionTitle(t, s.url, sess), "abort") {
			excluded[sess] = true
			continue
		}
		sessions = append(sessions, sess)
	}
	var answered []scriptedmodel.Answered
	for _, c := range all {
		if excluded[c.session] || excluded[c.parent] {
			continue
		}
		answered = append(answered, scriptedmodel.Answered{Seq: c.seq, Rule: c.label, Usage: c.usage})
	}
	t.Logf("balance over %d sessions and %d requests (%d sessions of the abort scenarios left out)", len(sessions), len(answered), len(excluded))
	genaitest.Balance(t, answered, s.p.sp.Ledger(), s.p.rec.Ended(), usageSeed, sessions...)
}

// TestServerModelWireCollector: in model-wire mode, the real collector's
// closing summary of every invocation (prompts with a tool, a background
// subagent and a notification during a second prompt, a title request,
// another client's unattributed turn) equals the ledger's.
func TestServerModelWireCollector(t *testing.T) {
	addrs := testbin.StartLocalCollector(t).Addrs
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	exp, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(addrs.OTLPGRPC), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	sp := instrument.NewSpanProcessor(sdktrace.NewBatchSpanProcessor(exp))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp), sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	m := newModel(t)
	m.usage = scriptedUsage
	t.Logf("scripted usage seed %d (AGENTLEDGER_USAGE_SEED=%d repeats it)", usageSeed, usageSeed)
	s := startServerWith(t, m, true, &pipeline{tp: tp, rec: rec, sp: sp, tracker: instrument.NewTracker(instrument.WithTracerProvider(tp))})
	t.Run("foreground bash", func(t *testing.T) { testForegroundBash(t, s) })
	t.Run("background subagent", func(t *testing.T) { testBackgroundSubagent(t, s) })
	t.Run("notification during the second prompt", func(t *testing.T) { testNotificationDuringSecondPrompt(t, s) })
	t.Run("prompt and notification answered by one request", func(t *testing.T) { testPromptAndNotificationOneRequest(t, s) })
	t.Run("title of an untitled session", func(t *testing.T) { testWireTitle(t, s) })
	t.Run("prompt from another client", func(t *testing.T) { testOtherClient(t, s) })
	t.Run("balance", func(t *testing.T) { wireBalance(t, s) })

	local := map[string]instrument.Summary{}
	for _, sp := range rec.Ended() {
		if id := attr(sp, contract.AttrInvocationID).AsString(); id != "" && local[id].InvocationID == "" {
			sum, err := s.client.Wait(ctx, id)
			if err != nil {
				t.Fatalf("ledger %s: %v %+v", id, err, sum)
			}
			local[id] = sum
		}
	}
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	closed, err := testbin.WaitClosed(ctx, addrs.TracesFile, slices.Collect(maps.Keys(local)))
	if err != nil {
		t.Fatal(err)
	}
	for id, l := range local {
		r, u := closed[id], l.Usage
		got := []int64{r.InputTokens, r.OutputTokens, r.CacheReadTokens, r.CacheCreationTokens, r.ReasoningTokens,
			r.AfterResultInputTokens, r.AfterResultOutputTokens, r.ModelCalls, r.BackgroundJobs, r.Continuations}
		want := []int64{u.InputTokens, u.OutputTokens, u.CacheReadInputTokens, u.CacheCreationInputTokens, u.ReasoningOutputTokens,
			u.AfterResultInputTokens, u.AfterResultOutputTokens, u.ModelCalls, u.BackgroundJobs, u.Continuations}
		if fmt.Sprint(got) != fmt.Sprint(want) || r.Status != string(l.Status) {
			t.Errorf("invocation %s: collector %s %v %v, ledger %s %v %v", id, r.Status, got, r.IncompleteReasons, l.Status, want, l.Reasons)
		}
	}
	t.Logf("%d invocations: the collector's summaries equal the ledger's", len(local))
}
