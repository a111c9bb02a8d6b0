package otelcodex

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/testbin"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// TestNoGoroutineLeft: once a one-shot run and a warm session (closed, and
// killed) have exited, the Client has no goroutine left: the reader, the
// continuer and the turn waiters end with the process.
func TestNoGoroutineLeft(t *testing.T) {
	bin := testbin.Require(t, envCodexBin, "make codex", codexBin)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	func() {
		router := scriptedmodel.NewRouter(scriptedUsage, rule("plain", nil, says("hi")))
		srv := scriptedmodel.New(scriptedmodel.Options{Responder: router.Respond}).Start()
		defer srv.Close()
		p := newPipeline(t, nil)
		defer func() { _ = p.tp.Shutdown(context.Background()) }()
		h := &harness{bin: bin, router: router, srv: srv, p: p}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, _ := h.client(t, "leak")
		r, err := c.Run(ctx, "LEAK: say hi")
		if err != nil {
			t.Fatal(err)
		}
		if sum, err := c.Wait(ctx, r.InvocationID); err != nil || sum.Status != contract.StatusFinal {
			t.Fatalf("run: %v %+v", err, sum)
		}
		for _, kill := range []bool{false, true} {
			s, err := c.Start(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Prompt(ctx, "LEAK: say hi again"); err != nil {
				t.Fatal(err)
			}
			if kill {
				err = s.Kill()
			} else {
				err = s.Close(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		// Exec: a codex exec, an app-server whose host input ends, and a
		// subcommand passed through.
		for _, args := range [][]string{
			append(append([]string{"exec", "--json", "--skip-git-repo-check"}, h.hostConfig()...), "LEAK: say hi"),
			append(h.hostConfig(), "app-server"),
			{"--version"},
		} {
			p, err := c.Exec(ctx, args, Stdio{Stdin: strings.NewReader(""), Stdout: io.Discard})
			if err != nil {
				t.Fatal(err)
			}
			<-p.Exited()
			if code := p.ExitState().ExitCode(); code != 0 {
				t.Fatalf("exec %q: exit %d", args, code)
			}
		}
	}()
}
