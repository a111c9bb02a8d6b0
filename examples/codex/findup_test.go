package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The default CLI path resolves from the repository's root and from any
// directory below it (go -C examples run ./...).
func TestFindUp(t *testing.T) {
	root := t.TempDir()
	cli := filepath.Join(root, defaultCLI)
	if err := os.MkdirAll(filepath.Dir(cli), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cli, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	below := filepath.Join(root, "examples", "x")
	if err := os.MkdirAll(below, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{root, below} {
		t.Chdir(dir)
		if got := findUp(defaultCLI); got != cli {
			t.Errorf("from %s: findUp = %q, want %q", dir, got, cli)
		}
	}
	t.Chdir(t.TempDir())
	if got := findUp(defaultCLI); got != defaultCLI {
		t.Errorf("with no CLI anywhere above: findUp = %q, want %q", got, defaultCLI)
	}
}
