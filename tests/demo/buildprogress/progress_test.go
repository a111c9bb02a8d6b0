package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func TestParseList(t *testing.T) {
	out := strings.Join([]string{
		"internal/abi\tfalse\t\tabi\ttrue",
		"example.com/m/a\ttrue\tbuild ID mismatch\ta\ttrue",
		"example.com/m/b\ttrue\tstale dependency: example.com/m/a\tb\ttrue",
		"example.com/m/cmd/x\ttrue\t" + staleOnlyForInstall + "\tmain\tfalse",
		"go: downloading example.com/y v1.0.0",
		"",
	}, "\n")
	p := parseList(out)
	if p.deps != 4 || p.toCompile != 2 || !p.mains["example.com/m/cmd/x"] || len(p.mains) != 1 {
		t.Errorf("parseList = %+v, want 4 deps, 2 to compile (the main package is only not installed), main example.com/m/cmd/x", p)
	}
}

func TestListArgs(t *testing.T) {
	args, then := listArgs([]string{"go", "build", "-trimpath", "-v", "-o", "/x/bin", "-tags", "a,b", "-ldflags=-s", "."})
	want := []string{"go", "list", "-deps", "-f", listFormat, "-trimpath", "-tags", "a,b", "-ldflags=-s", "."}
	if !slices.Equal(args, want) || then != "link /x/bin" {
		t.Errorf("listArgs = %q, %q\nwant %q, %q", args, then, want, "link /x/bin")
	}
	args, then = listArgs([]string{"go", "install", "-v", "tool"})
	if !slices.Equal(args, []string{"go", "list", "-deps", "-f", listFormat, "tool"}) || then != "link and install tool" {
		t.Errorf("listArgs(install) = %q, %q", args, then)
	}
}

func TestGoTrackerPhases(t *testing.T) {
	tr := newGoTracker("collector", "link .bin/c", t0)
	tr.line("go: downloading golang.org/x/net v0.60.0")
	if got, want := tr.status(t0.Add(12*time.Second)), "collector 12s: listing packages (go list -deps), 1 modules downloaded, last golang.org/x/net v0.60.0; next: compile"; got != want {
		t.Errorf("listing:\n got %q\nwant %q", got, want)
	}
	tr.listed(plan{deps: 10, toCompile: 4, mains: map[string]bool{"example.com/cmd/c": true}}, true)
	if got, want := tr.status(t0.Add(13*time.Second)), "collector 13s: 4 packages to compile, waiting for the first; then link .bin/c"; got != want {
		t.Errorf("listed:\n got %q\nwant %q", got, want)
	}
	for _, l := range []string{"internal/abi", "# example.com/b", "b/b.go:1:2: warning", "example.com/b"} {
		if tr.line(l) {
			t.Errorf("line %q changed the phase", l)
		}
	}
	if got, want := tr.status(t0.Add(80*time.Second)), "collector 1m20s: package 2 of 4 (50%), now example.com/b; then link .bin/c"; got != want {
		t.Errorf("compiling:\n got %q\nwant %q", got, want)
	}
	if !tr.line("example.com/cmd/c") {
		t.Error("the main package did not start the link phase")
	}
	if got, want := tr.status(t0.Add(90*time.Second)), "collector 1m30s: 3 of 4 (75%) compiled; now link .bin/c"; got != want {
		t.Errorf("linking:\n got %q\nwant %q", got, want)
	}
	if got, want := tr.done(t0.Add(95*time.Second), "out/logs/c.log", nil), "collector: done in 1m35s, 3 packages compiled, 7 from the build cache, 1 modules downloaded; full output in out/logs/c.log"; got != want {
		t.Errorf("done:\n got %q\nwant %q", got, want)
	}
}

func TestGoTrackerWarmAndUnknown(t *testing.T) {
	tr := newGoTracker("jaeger", "link", t0)
	tr.listed(plan{deps: 2325, mains: map[string]bool{}}, true)
	if got, want := tr.status(t0.Add(3*time.Second)), "jaeger 3s: all 2325 packages are in the build cache; now link"; got != want {
		t.Errorf("warm:\n got %q\nwant %q", got, want)
	}
	tr.built([]string{"a", "b"}) // the trace of a warm build: still all cached
	if got, want := tr.status(t0.Add(4*time.Second)), "jaeger 4s: all 2325 packages are in the build cache; now link"; got != want {
		t.Errorf("warm, traced:\n got %q\nwant %q", got, want)
	}
	u := newGoTracker("x", "link", t0)
	u.listed(plan{}, false)
	u.line("example.com/a")
	if got, want := u.status(t0.Add(time.Second)), "x 1s: package 1, now example.com/a; then link"; got != want {
		t.Errorf("without a plan:\n got %q\nwant %q", got, want)
	}
	// A package the forecast missed raises the total instead of passing 100%.
	o := newGoTracker("x", "link", t0)
	o.listed(plan{toCompile: 1}, true)
	o.line("example.com/a")
	o.line("example.com/b")
	if got := o.status(t0); !strings.Contains(got, "package 2 of 2 (100%)") {
		t.Errorf("over the forecast: %q", got)
	}
}

// Packages found in the build cache count as done: another build sharing
// the cache compiled them after go list forecast them (the progress used to
// stop at the compiled share, 57%, and then say done).
func TestGoTrackerCountsCachedPackages(t *testing.T) {
	tr := newGoTracker("collector", "link .bin/c", t0)
	tr.listed(plan{deps: 10, toCompile: 10, mains: map[string]bool{"example.com/cmd/c": true}}, true)
	tr.built([]string{"internal/abi", "runtime", "example.com/a"})
	if got, want := tr.status(t0.Add(5*time.Second)), "collector 5s: package 3 of 10 (30%, 3 from the build cache), now example.com/a; then link .bin/c"; got != want {
		t.Errorf("cached only:\n got %q\nwant %q", got, want)
	}
	tr.line("example.com/b")
	tr.built([]string{"example.com/b"}) // printed and traced: one package
	if got, want := tr.status(t0.Add(6*time.Second)), "collector 6s: package 4 of 10 (40%, 3 from the build cache), now example.com/b; then link .bin/c"; got != want {
		t.Errorf("mixed:\n got %q\nwant %q", got, want)
	}
	tr.built([]string{"p5", "p6", "p7", "p8", "p9"})
	tr.line("example.com/cmd/c")
	tr.built([]string{"example.com/cmd/c"})
	if got, want := tr.status(t0.Add(7*time.Second)), "collector 7s: 10 of 10 (100%, 8 from the build cache) compiled; now link .bin/c"; got != want {
		t.Errorf("linking:\n got %q\nwant %q", got, want)
	}
}

func TestWithTrace(t *testing.T) {
	got, ok := withTrace([]string{"go", "build", "-v", "."}, "/t/f")
	if want := []string{"go", "build", "-debug-trace=/t/f", "-v", "."}; !ok || !slices.Equal(got, want) {
		t.Errorf("withTrace = %q, %v; want %q", got, ok, want)
	}
	mine := []string{"go", "install", "-debug-trace", "/mine", "tool"}
	if got, ok := withTrace(mine, "/t/f"); ok || !slices.Equal(got, mine) {
		t.Errorf("withTrace kept the caller's trace? %q, %v", got, ok)
	}
}

// The trace of a real go build names both packages of the module, whether
// they were compiled or came from the build cache, and the reader copes
// with a file read while half a line is written.
func TestTraceReaderOnARealBuild(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not in PATH")
	}
	tinyModule(t, false)
	for _, round := range []string{"cold", "cached"} {
		file := filepath.Join(t.TempDir(), "trace.json")
		if out, err := exec.Command(goBin, "build", traceFlag+"="+file, "./a", "./b").CombinedOutput(); err != nil {
			t.Fatalf("%s build: %v\n%s", round, err, out)
		}
		whole, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// Half of the file first, then the rest, as while the build runs.
		part := filepath.Join(t.TempDir(), "part.json")
		if err := os.WriteFile(part, whole[:len(whole)/2], 0o644); err != nil {
			t.Fatal(err)
		}
		r := &traceReader{path: part}
		got := r.poll()
		if err := os.WriteFile(part, whole, 0o644); err != nil {
			t.Fatal(err)
		}
		got = append(got, r.poll()...)
		got = append(got, r.poll()...) // nothing new
		slices.Sort(got)
		if want := []string{"example.com/m/a", "example.com/m/b"}; !slices.Equal(got, want) {
			t.Errorf("%s build: packages built per the trace %q, want %q", round, got, want)
		}
	}
}

func TestNPMSteps(t *testing.T) {
	tr := newNPMTracker("claude", t0)
	cases := []struct{ in, want string }{
		{"npm http fetch GET 200 https://registry.npmjs.org/@anthropic-ai%2fclaude-code 531ms (cache miss)", "claude 1s: resolved @anthropic-ai/claude-code (531ms, cache miss)"},
		{"npm http fetch GET 200 https://registry.npmjs.org/@anthropic-ai/claude-code-linux-x64/-/claude-code-linux-x64-2.1.328.tgz 9120ms (cache miss)", "claude 1s: downloaded claude-code-linux-x64-2.1.328.tgz (9120ms, cache miss)"},
		{"npm info run opencode-ai@1.18.33 postinstall node_modules/opencode-ai node ./postinstall.mjs", "claude 1s: running opencode-ai@1.18.33 postinstall script"},
		{"npm warn EBADENGINE Unsupported engine {", ""},
		{"npm http fetch GET 404 https://registry.npmjs.org/opencode-darwin-x64 20ms (cache skip)", ""},
		{"npm http fetch GET 500 https://registry.npmjs.org/x 20ms", "claude 1s: GET https://registry.npmjs.org/x 500 (20ms)"},
		{"added 3 packages in 14s", "claude 1s: added 3 packages in 14s"},
	}
	for _, c := range cases {
		if got := tr.line(c.in, t0.Add(time.Second)); got != c.want {
			t.Errorf("line(%q)\n got %q\nwant %q", c.in, got, c.want)
		}
	}
	if got, want := tr.idle(t0.Add(30*time.Second)), "claude 30s: npm is working (last step: added 3 packages in 14s)"; got != want {
		t.Errorf("idle:\n got %q\nwant %q", got, want)
	}
	if got, want := tr.done(t0.Add(31*time.Second), "l", nil), "claude: done in 31s, 1 registry lookups answered 404 (optional packages npm skips), 1 lines of npm warnings; full output in l"; got != want {
		t.Errorf("done:\n got %q\nwant %q", got, want)
	}
}

func TestPrinterRedrawsOnATerminal(t *testing.T) {
	var b bytes.Buffer
	p := &printer{w: &b, tty: true}
	p.show("a")
	p.show("b")
	p.println("c")
	if got, want := b.String(), "\r\x1b[Ka\r\x1b[Kb\r\x1b[Kc\n"; got != want {
		t.Errorf("terminal output %q, want %q", got, want)
	}
}

// tinyModule writes a module of two packages, b importing a, that need
// nothing from the standard library, so that a build with an empty build
// cache compiles exactly those two.
func tinyModule(t *testing.T, broken bool) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/m\n\ngo 1.22\n",
		"a/a.go": "package a\n\nfunc A() int { return 1 }\n",
		"b/b.go": "package b\n\nimport \"example.com/m/a\"\n\nfunc B() int { return a.A() }\n",
	}
	if broken {
		files["b/b.go"] = "package b\n\nfunc B() int { return undefinedName }\n"
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("GOCACHE", filepath.Join(t.TempDir(), "gocache"))
	t.Setenv("GOFLAGS", "")
	t.Chdir(dir)
	return dir
}

func runOpts(t *testing.T, cmd ...string) options {
	return options{
		name: "tiny", log: filepath.Join(t.TempDir(), "logs", "tiny.log"), mode: "auto", cmd: cmd,
		tick: make(chan time.Time), // never ticks: only phase lines
		now:  func() time.Time { return t0 },
	}
}

func TestRunGoBuildColdCache(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not in PATH")
	}
	tinyModule(t, false)
	o := runOpts(t, goBin, "build", "-v", "./a", "./b")
	var out bytes.Buffer
	if err := run(o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"tiny 0s: 2 packages to compile, waiting for the first; then link\n",
		"tiny: done in 0s, 2 packages compiled; full output in " + o.log + "\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "\nexample.com/m/a\n") {
		t.Errorf("package names reached the output:\n%s", out.String())
	}
	log, err := os.ReadFile(o.log)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"$ " + goBin + " build -debug-trace=", "example.com/m/a\n", "example.com/m/b\n"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

func TestRunGoBuildFailure(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go not in PATH")
	}
	tinyModule(t, true)
	o := runOpts(t, goBin, "build", "-v", "./...")
	var out bytes.Buffer
	err = run(o, &out)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("run = %v, want go build's exit status\n%s", err, out.String())
	}
	for _, want := range []string{"tiny: the last lines of output:", "undefined: undefinedName", "tiny: FAILED after 0s", "full output in " + o.log} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestRunNPMPrintsSteps(t *testing.T) {
	dir := t.TempDir()
	npm := filepath.Join(dir, "npm")
	script := "#!/bin/sh\n" +
		"echo 'npm http fetch GET 200 https://registry.npmjs.org/opencode-ai 50ms (cache miss)'\n" +
		"echo 'npm warn EBADENGINE Unsupported engine' >&2\n" +
		"echo 'some noise'\n" +
		"echo 'added 2 packages in 1s'\n"
	if err := os.WriteFile(npm, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	o := runOpts(t, npm, "install", "--loglevel", "http", "opencode-ai")
	var out bytes.Buffer
	if err := run(o, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	want := "tiny: " + npm + " install --loglevel http opencode-ai (full output: " + o.log + ")\n" +
		"tiny 0s: resolved opencode-ai (50ms, cache miss)\n" +
		"tiny 0s: added 2 packages in 1s\n" +
		"tiny: done in 0s, 1 lines of npm warnings; full output in " + o.log + "\n"
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
	log, _ := os.ReadFile(o.log)
	if !strings.Contains(string(log), "some noise\n") {
		t.Errorf("log lacks the noise:\n%s", log)
	}
}
