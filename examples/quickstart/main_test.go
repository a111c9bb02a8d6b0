package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestQuickstart runs the README example against the scripted model and
// checks both ledger lines: pending at the caller's result, then final with
// the continuation's usage as after-result tokens.
func TestQuickstart(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out, "", ""); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want 2 lines, got %q", out.String())
	}
	wants := []string{
		"status=pending input=12 output=5 after_result_input=0 after_result_output=0 continuations=0",
		"status=final input=32 output=9 after_result_input=20 after_result_output=4 continuations=1",
	}
	for i, want := range wants {
		if _, rest, _ := strings.Cut(lines[i], " "); rest != want {
			t.Errorf("line %d = %q, want %q", i+1, rest, want)
		}
	}
}
