package instrument_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/genaitest"
)

// TestWakeFlush: with WithWakeFlush, the wake span of a continuation and
// of an unattributed turn reaches the exporter while the turn runs,
// though the batch schedule is an hour away; the turn's start does not
// wait for it.
func TestWakeFlush(t *testing.T) {
	tp, exp := genaitest.WakeProvider(t)
	tracker := instrument.NewTracker(instrument.WithTracerProvider(tp), instrument.WithWakeFlush(time.Minute))
	ctx, inv := tracker.StartInvocation(context.Background(), "coder", "s1")
	_, job := tracker.StartBackground(ctx, "shell")
	inv.End()
	job.EndWithFollowup(nil)
	start := time.Now()
	_, cont, err := tracker.StartContinuation(context.Background(), "coder", "s1", job.Carrier())
	if err != nil {
		t.Fatal(err)
	}
	returned := time.Since(start)
	w := exp.WaitWake(t)
	if w.Invocation != inv.ID() {
		t.Fatalf("wake of %q exported, want %q", w.Invocation, inv.ID())
	}
	t.Logf("StartContinuation returned after %s; its wake span was exported %s after the start (batch schedule: 1h)", returned, w.At.Sub(start))
	cont.End()
	_, un := tracker.StartUnattributed(context.Background(), "coder", "s2", "")
	if w := exp.WaitWake(t); w.Invocation != un.ID() {
		t.Fatalf("wake of %q exported, want %q", w.Invocation, un.ID())
	}
	un.End()
}

// TestNoWakeFlushByDefault: a Tracker without WithWakeFlush (or with a
// negative timeout) leaves the wake span to the schedule.
func TestNoWakeFlushByDefault(t *testing.T) {
	for _, opts := range [][]instrument.TrackerOption{nil, {instrument.WithWakeFlush(-1)}} {
		tp, exp := genaitest.WakeProvider(t)
		tracker := instrument.NewTracker(append(opts, instrument.WithTracerProvider(tp))...)
		_, un := tracker.StartUnattributed(context.Background(), "coder", "s2", "")
		un.End()
		// The provider's own flush is what exports it: nothing did before.
		select {
		case w := <-exp.Wakes:
			t.Fatalf("wake %v exported without a flush", w)
		default:
		}
		if err := tp.ForceFlush(context.Background()); err != nil {
			t.Fatal(err)
		}
		exp.WaitWake(t)
	}
}
