package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/agentledger/internal/testbin"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// TestHostExample runs the example as `make host-example` does: the host
// prints the invocation's final summary, read from the collector's status
// API, and it equals what the scripted model served.
func TestHostExample(t *testing.T) {
	// The shell outlasts the host's single question even on a loaded CI
	// machine (the question comes right after the result, but a 2-core
	// runner under make test can stall a process for seconds).
	cfg := config{seed: usageSeed(t), shell: 12 * time.Second, timeout: 3 * time.Minute}
	if err := locate(&cfg); err != nil {
		if os.Getenv(testbin.EnvE2E) == "1" {
			t.Fatalf("%v; %s=1 makes this a failure", err, testbin.EnvE2E)
		}
		t.Skipf("%v; skipping (set %s=1 to fail instead)", err, testbin.EnvE2E)
	}
	var out strings.Builder
	o, err := run(context.Background(), cfg, &out)
	t.Logf("host output:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}
	if err := o.Matches(); err != nil {
		t.Fatal(err)
	}
	// The story the README tells: owed at the result, released, woken,
	// reattached, final.
	for _, want := range []string{"asked once: owes_work true", "released: watching the session", "reattached: \"The tests passed.\"", "\nfinal {"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the host's output lacks %q", want)
		}
	}
	// The Python half reported the same final summary (Matches compared it).
	if cfg.python != "" && (o.Python == nil || !strings.Contains(out.String(), "\nrelease_watch.py: final {")) {
		t.Errorf("python3 at %s, but release_watch.py reported no final summary", cfg.python)
	}
	if o.Final.BackgroundJobs != 1 || o.Final.Continuations != 1 || o.Requests != 3 {
		t.Errorf("background jobs %d, continuations %d, model requests %d; want 1, 1, 3", o.Final.BackgroundJobs, o.Final.Continuations, o.Requests)
	}
}

func usageSeed(t *testing.T) uint64 {
	seed := defaultSeed()
	t.Logf("scripted usage seed %d (AGENTLEDGER_USAGE_SEED=%d repeats it)", seed, seed)
	return seed
}

// TestMatches: a summary that is not final, or that differs from what
// the model served in any figure, does not match.
func TestMatches(t *testing.T) {
	served := scriptedmodel.Usage{InputTokens: 10, OutputTokens: 20, CacheReadTokens: 3, CacheCreationTokens: 4, ReasoningTokens: 5}
	good := Outcome{Served: served, Requests: 2}
	good.Final.Status = "final"
	good.Final.ModelCalls = 2
	good.Final.Usage.InputTokens, good.Final.Usage.OutputTokens = 10, 20
	good.Final.Usage.CacheReadInputTokens, good.Final.Usage.CacheCreationInputTokens, good.Final.Usage.ReasoningOutputTokens = 3, 4, 5
	if err := good.Matches(); err != nil {
		t.Fatal(err)
	}
	py := good.Final
	if withPy := (Outcome{Final: good.Final, Python: &py, Served: served, Requests: 2}); withPy.Matches() != nil {
		t.Fatal(withPy.Matches())
	}
	for name, spoil := range map[string]func(*Outcome){
		"pending":        func(o *Outcome) { o.Final.Status = "pending" },
		"input":          func(o *Outcome) { o.Final.Usage.InputTokens++ },
		"output":         func(o *Outcome) { o.Final.Usage.OutputTokens-- },
		"cache read":     func(o *Outcome) { o.Final.Usage.CacheReadInputTokens++ },
		"cache creation": func(o *Outcome) { o.Final.Usage.CacheCreationInputTokens++ },
		"reasoning":      func(o *Outcome) { o.Final.Usage.ReasoningOutputTokens++ },
		"calls":          func(o *Outcome) { o.Final.ModelCalls++ },
		"python pending": func(o *Outcome) { p := o.Final; p.Status = "pending"; o.Python = &p },
		"python usage":   func(o *Outcome) { p := o.Final; p.Usage.OutputTokens++; o.Python = &p },
	} {
		o := good
		spoil(&o)
		if o.Matches() == nil {
			t.Errorf("%s: a spoiled summary matches", name)
		}
	}
}
