package otelopencode

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
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
	s := startServerWith(t, m, true)
	if s.client.ModelProxyURL() == "" {
		t.Fatal("no model proxy URL")
	}
	t.Run("foreground bash", func(t *testing.T) { testForegroundBash(t, s) })
	t.Run("foreground subagent", func(t *testing.T) { testForegroundSubagent(t, s) })
	t.Run("background subagent", func(t *testing.T) { testBackgroundSubagent(t, s) })
	t.Run("second prompt done first", func(t *testing.T) { testSecondPromptDoneFirst(t, s) })
	t.Run("notification during the second prompt", func(t *testing.T) { testNotificationDuringSecondPrompt(t, s) })
	t.Run("title of an untitled session", func(t *testing.T) { testWireTitle(t, s) })
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

// wireBalance: the usage of every request the scripted model answered
// equals the sum over every invocation in the ledger, each closed.
func wireBalance(t *testing.T, s *server) {
	s.model.mu.Lock()
	all := append([]call(nil), s.model.all...)
	s.model.mu.Unlock()
	var want instrument.Usage
	for _, c := range all {
		want.InputTokens += int64(c.usage.InputTokens)
		want.OutputTokens += int64(c.usage.OutputTokens)
		want.CacheReadInputTokens += int64(c.usage.CacheReadTokens)
		want.CacheCreationInputTokens += int64(c.usage.CacheCreationTokens)
		want.ReasoningOutputTokens += int64(c.usage.ReasoningTokens)
		want.ModelCalls++
	}
	ids := map[string]bool{}
	for _, sp := range s.p.rec.Ended() {
		if id := attr(sp, contract.AttrInvocationID).AsString(); id != "" {
			ids[id] = true
		}
	}
	var got instrument.Usage
	for id := range ids {
		sum := s.wait(t, id)
		u := sum.Usage
		got.InputTokens += u.InputTokens
		got.OutputTokens += u.OutputTokens
		got.CacheReadInputTokens += u.CacheReadInputTokens
		got.CacheCreationInputTokens += u.CacheCreationInputTokens
		got.ReasoningOutputTokens += u.ReasoningOutputTokens
		got.ModelCalls += u.ModelCalls
	}
	if st := s.client.proxy.Stats(); st.Calls != int64(len(all)) || st.Oversized != 0 || st.Failed != 0 {
		t.Errorf("proxy stats %+v, want %d calls (every request the model answered)", st, len(all))
	}
	var unattributed int
	for _, roots := range unattributedRoots(s.p) {
		unattributed += len(roots)
	}
	if unattributed != 0 {
		t.Errorf("%d unattributed invocations: %v", unattributed, unattributedRoots(s.p))
	}
	if got != want {
		t.Errorf("balance over %d invocations and %d requests:\nledger %+v\nmodel  %+v (seed %d)", len(ids), len(all), got, want, usageSeed)
	}
}
