package main

import (
	"testing"
	"time"
)

// The reaper says it keeps an idle session that owes work once an idle
// spell, not on every pass; a new spell (the session ran again) says it
// again.
func TestReaperSaysKeptOnceASpell(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	s := &Session{lastActive: t0}
	if !s.firstKept() {
		t.Fatal("the first pass of an idle spell does not say kept")
	}
	if s.firstKept() || s.firstKept() {
		t.Fatal("later passes of the same spell say kept again")
	}
	s.lastActive = t0.Add(time.Minute)
	if !s.firstKept() {
		t.Fatal("a new idle spell does not say kept")
	}
}
