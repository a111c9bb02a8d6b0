package otelclaudecode

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/testbin"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// TestNoGoroutineLeft: once the CLI of a run and of a warm session has
// exited, the Client has no goroutine left (the reader ends with the
// process), whether the process ended by itself or was killed.
func TestNoGoroutineLeft(t *testing.T) {
	bin := testbin.Require(t, envClaudeBin, "make claude", claudeBin)
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
		r, err := h.client(t, "leak").Run(ctx, "LEAK: say hi")
		if err != nil {
			t.Fatal(err)
		}
		if sum, err := r.Wait(ctx); err != nil || sum.Status != contract.StatusFinal {
			t.Fatalf("run: %v %+v", err, sum)
		}
		s, err := h.client(t, "leak_session").Start(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Prompt(ctx, "LEAK: say hi again"); err != nil {
			t.Fatal(err)
		}
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := s.WaitExit(ctx); err != nil {
			t.Fatal(err)
		}
	}()
}
