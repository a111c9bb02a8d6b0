package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentledger/agentledger/internal/testbin"
)

// fakeCLI is a stand-in for claude: it copies stdin to stdout byte for
// byte, writes its arguments to stderr, then acts as FAKE_MODE says.
const fakeCLI = `#!/bin/sh
printf '%s|' "$@" >&2
case "$FAKE_MODE" in
term)
	trap 'echo got-TERM >&2; exit 143' TERM
	echo ready
	while :; do sleep 0.05; done ;;
kill)
	cat
	kill -KILL $$ ;;
*)
	cat
	exit "${FAKE_EXIT:-0}" ;;
esac
`

// dropIn builds agentledger and a fake CLI, and returns a command running
// `agentledger claude args...` with them.
func dropIn(t *testing.T) func(mode string, args ...string) *exec.Cmd {
	t.Helper()
	bin := testbin.BuildT(t, "cmd/agentledger")
	cli := filepath.Join(t.TempDir(), "claude")
	if err := os.WriteFile(cli, []byte(fakeCLI), 0o755); err != nil {
		t.Fatal(err)
	}
	return func(mode string, args ...string) *exec.Cmd {
		cmd := exec.Command(bin, append([]string{"claude"}, args...)...)
		cmd.Env = append(os.Environ(), "AGENTLEDGER_CLAUDE_BIN="+cli, "OTEL_TRACES_EXPORTER=none", "FAKE_MODE="+mode)
		return cmd
	}
}

// TestPassthrough checks that stdin reaches the CLI and its stdout the
// host byte for byte (a host's stream-json prompts, a partial last line,
// bytes that are no JSON) but for the uuid given to a prompt without one,
// that the arguments arrive unchanged and nothing is added, and that the
// exit code is the CLI's.
func TestPassthrough(t *testing.T) {
	run := dropIn(t)
	input := []byte(`{"type":"control_request","request_id":"r1","request":{"subtype":"initialize"}}` + "\n" +
		`{"type":"user","uuid":"5a4dcbae-d853-46d2-a1b5-9783320a12d0","message":{"role":"user","content":[{"type":"text","text":"hi"}]},"parent_tool_use_id":null}` + "\n" +
		`{"type":"user","message":{"role":"user","content":"no uuid"}}` + "\n" +
		"not json \x00\xff\n" + strings.Repeat("x", 200<<10) + "\n" + `{"partial":`)
	for _, code := range []int{0, 3} {
		cmd := run("", "--output-format", "stream-json", "--verbose", "--input-format", "stream-json", "a b")
		cmd.Env = append(cmd.Env, "FAKE_EXIT="+string(rune('0'+code)))
		cmd.Stdin = bytes.NewReader(input)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case code == 0 && err != nil, code != 0 && (!errors.As(err, &exit) || exit.ExitCode() != code):
			t.Fatalf("exit: %v, want %d; stderr %s", err, code, stderr.String())
		}
		// The fake CLI echoes what it read: the prompt without a uuid
		// has one now, first.
		named := regexp.MustCompile(`\{"uuid":"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",("type":"user","message":\{"role":"user","content":"no uuid"\}\})`)
		if got := named.ReplaceAll(stdout.Bytes(), []byte("{$1")); !bytes.Equal(got, input) || bytes.Equal(stdout.Bytes(), input) {
			t.Errorf("stdout differs from stdin but for the uuid given: %d bytes, want %d", stdout.Len(), len(input)+46)
		}
		if got, want := stderr.String(), "--output-format|stream-json|--verbose|--input-format|stream-json|a b|"; got != want {
			t.Errorf("args %q, want %q", got, want)
		}
	}
}

// TestPassthroughSignals checks that a signal the host sends reaches the
// CLI, and that a CLI killed by a signal kills the drop-in with it.
func TestPassthroughSignals(t *testing.T) {
	run := dropIn(t)

	cmd := run("term")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make([]byte, len("ready\n"))
	if _, err := stdout.Read(ready); err != nil || string(ready) != "ready\n" {
		t.Fatalf("fake CLI not ready: %q %v", ready, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the drop-in did not exit after SIGTERM")
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 143 || !strings.Contains(stderr.String(), "got-TERM") {
		t.Fatalf("after SIGTERM: %v, stderr %q; want the CLI's exit 143 after it got TERM", err, stderr.String())
	}

	cmd = run("kill")
	cmd.Stdin = strings.NewReader("bye\n")
	out, err := cmd.Output()
	if !errors.As(err, &exit) {
		t.Fatalf("killed CLI: %v", err)
	}
	ws := exit.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL || string(out) != "bye\n" {
		t.Fatalf("killed CLI: status %v, stdout %q; want killed by SIGKILL after its output", ws, out)
	}
}

// codexDropIn is dropIn for `agentledger codex`: the fake CLI stands in
// for codex.
func codexDropIn(t *testing.T) func(mode string, args ...string) *exec.Cmd {
	t.Helper()
	bin := testbin.BuildT(t, "cmd/agentledger")
	cli := filepath.Join(t.TempDir(), "codex")
	if err := os.WriteFile(cli, []byte(fakeCLI), 0o755); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	return func(mode string, args ...string) *exec.Cmd {
		cmd := exec.Command(bin, append([]string{"codex"}, args...)...)
		cmd.Env = append(os.Environ(), "AGENTLEDGER_CODEX_BIN="+cli, "OTEL_TRACES_EXPORTER=none", "FAKE_MODE="+mode,
			"HOME="+home, "CODEX_HOME="+filepath.Join(home, ".codex"))
		return cmd
	}
}

// TestCodexPassthrough checks `agentledger codex`: stdin and stdout pass
// byte for byte, the exit code is Codex's, the arguments arrive unchanged
// but for the provider's base URL, which is the proxy's (given in place
// and once more after the host's), and a subcommand it does not record
// gets its arguments exactly.
func TestCodexPassthrough(t *testing.T) {
	run := codexDropIn(t)
	input := []byte("the prompt \x00\xff\n" + strings.Repeat("y", 100<<10) + "\nno newline")
	proxied := regexp.MustCompile(`^exec\|--json\|-c\|model_provider="p"\|-c\|model_providers\.p\.base_url="(http://127\.0\.0\.1:\d+)"\|-\|-c\|model_providers\.p\.base_url="(http://127\.0\.0\.1:\d+)"\|$`)
	for _, code := range []int{0, 3} {
		cmd := run("", "exec", "--json", "-c", `model_provider="p"`, "-c", `model_providers.p.base_url="http://upstream.invalid/v1"`, "-")
		cmd.Env = append(cmd.Env, "FAKE_EXIT="+string(rune('0'+code)))
		cmd.Stdin = bytes.NewReader(input)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case code == 0 && err != nil, code != 0 && (!errors.As(err, &exit) || exit.ExitCode() != code):
			t.Fatalf("exit: %v, want %d; stderr %s", err, code, stderr.String())
		}
		if !bytes.Equal(stdout.Bytes(), input) {
			t.Errorf("stdout differs from stdin: %d bytes, want %d", stdout.Len(), len(input))
		}
		if m := proxied.FindStringSubmatch(stderr.String()); m == nil || m[1] != m[2] {
			t.Errorf("args %q, want the base URL the proxy's", stderr.String())
		}
	}
	cmd := run("", "--version")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil || stderr.String() != "--version|" {
		t.Errorf("codex --version: %v, args %q", err, stderr.String())
	}
}

// TestCodexPassthroughSignals checks that a signal the host sends reaches
// Codex through `agentledger codex exec`.
func TestCodexPassthroughSignals(t *testing.T) {
	run := codexDropIn(t)
	cmd := run("term", "exec", "--json", "hi")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make([]byte, len("ready\n"))
	if _, err := stdout.Read(ready); err != nil || string(ready) != "ready\n" {
		t.Fatalf("fake CLI not ready: %q %v", ready, err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the drop-in did not exit after SIGTERM")
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 143 || !strings.Contains(stderr.String(), "got-TERM") {
		t.Fatalf("after SIGTERM: %v, stderr %q; want Codex's exit 143 after it got TERM", err, stderr.String())
	}
}
