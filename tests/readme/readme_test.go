// Package readme checks that the commands the READMEs show work as
// written, as far as can be told without running them: every shell block
// parses (bash -n), every make target exists, every `go -C dir run ./pkg`
// and `go run ./pkg` names a main package from the directory the command
// runs in (the repository's root), every path a command names (configs,
// .bin/ binaries) exists or is what a make target builds, and every
// relative link leads to a file.
package readme

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/agentledger/agentledger/internal/testbin"
)

// readmes are the READMEs whose commands run from the repository's root.
var readmes = []string{"README.md", "cmd/agentledger/README.md", "examples/opencode/README.md"}

func root(t *testing.T) string {
	t.Helper()
	r, err := testbin.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// block is one fenced code block.
type block struct {
	lang, text string
	line       int
}

func blocks(text string) []block {
	var out []block
	var cur *block
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		l := sc.Text()
		trimmed := strings.TrimSpace(l)
		switch {
		case cur == nil && strings.HasPrefix(trimmed, "```"):
			cur = &block{lang: strings.TrimPrefix(trimmed, "```"), line: n}
		case cur != nil && trimmed == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.text += l + "\n"
		}
	}
	return out
}

// inlineCode is every `code span` outside fenced blocks.
var inlineCode = regexp.MustCompile("`([^`\n]+)`")

// commands are the shell blocks' lines and the inline code spans that
// start with make or go, joined over trailing backslashes.
func commands(text string) []string {
	var out []string
	for _, b := range blocks(text) {
		if b.lang != "sh" && b.lang != "bash" && b.lang != "" {
			continue
		}
		joined := strings.ReplaceAll(b.text, "\\\n", " ")
		for _, l := range strings.Split(joined, "\n") {
			out = append(out, withoutComment(l))
		}
	}
	outside := fencedRE.ReplaceAllString(text, "")
	for _, m := range inlineCode.FindAllStringSubmatch(strings.ReplaceAll(outside, "\n", " "), -1) {
		if c := withoutComment(m[1]); strings.HasPrefix(c, "make ") || strings.HasPrefix(c, "go ") {
			out = append(out, c)
		}
	}
	return out
}

// withoutComment is a shell line without its comment ("" for a comment
// line).
func withoutComment(l string) string {
	l = strings.TrimSpace(l)
	if strings.HasPrefix(l, "#") {
		return ""
	}
	if i := strings.Index(l, " #"); i >= 0 {
		l = l[:i]
	}
	return strings.TrimSpace(l)
}

var fencedRE = regexp.MustCompile("(?s)```.*?```")

func TestShellBlocksParse(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	r := root(t)
	for _, name := range readmes {
		for _, b := range blocks(read(t, filepath.Join(r, name))) {
			if b.lang != "sh" && b.lang != "bash" {
				continue
			}
			cmd := exec.Command(bash, "-n")
			cmd.Stdin = strings.NewReader(b.text)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s:%d: the sh block does not parse: %v\n%s\n%s", name, b.line, err, out, b.text)
			}
		}
	}
}

// makeTargets are the Makefile's rule names.
func makeTargets(t *testing.T, r string) []string {
	var targets []string
	rule := regexp.MustCompile(`^([a-z][a-z0-9-]*):`)
	for _, l := range strings.Split(read(t, filepath.Join(r, "Makefile")), "\n") {
		if m := rule.FindStringSubmatch(l); m != nil {
			targets = append(targets, m[1])
		}
	}
	return targets
}

func TestMakeTargetsExist(t *testing.T) {
	r := root(t)
	targets := makeTargets(t, r)
	seen := 0
	for _, name := range readmes {
		for _, c := range commands(read(t, filepath.Join(r, name))) {
			f := strings.Fields(c)
			if len(f) < 2 || f[0] != "make" {
				continue
			}
			for _, a := range f[1:] {
				if a == "&&" || a == ";" || a == "|" {
					break
				}
				if strings.Contains(a, "=") || strings.HasPrefix(a, "-") {
					continue
				}
				seen++
				if !slices.Contains(targets, a) {
					t.Errorf("%s: `%s`: the Makefile has no target %q", name, c, a)
				}
			}
		}
	}
	if seen < 5 {
		t.Errorf("found only %d make targets in the READMEs: the extraction is broken", seen)
	}
}

// goRun matches `go [-C dir] run ./pkg`.
var goRun = regexp.MustCompile(`^go (?:-C (\S+) )?run (\./\S+)`)

func TestGoRunPackagesExist(t *testing.T) {
	r := root(t)
	seen := 0
	for _, name := range readmes {
		for _, c := range commands(read(t, filepath.Join(r, name))) {
			m := goRun.FindStringSubmatch(c)
			if m == nil {
				continue
			}
			seen++
			dir := filepath.Join(r, m[1], m[2])
			files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
			main := false
			for _, f := range files {
				if !strings.HasSuffix(f, "_test.go") && strings.Contains(read(t, f), "\npackage main\n") {
					main = true
				}
			}
			if !main {
				t.Errorf("%s: `%s`: no main package in %s", name, c, dir)
			}
		}
	}
	if seen < 3 {
		t.Errorf("found only %d go run commands in the READMEs: the extraction is broken", seen)
	}
}

// pathArg is a path a command names under a directory of the repository.
var pathArg = regexp.MustCompile(`(?:^|[\s=])((?:collector-config|\.bin|examples|cmd|dashboards|docs)/[A-Za-z0-9_./-]+)`)

func TestCommandPathsExist(t *testing.T) {
	r := root(t)
	makefile := read(t, filepath.Join(r, "Makefile"))
	seen := 0
	for _, name := range readmes {
		for _, c := range commands(read(t, filepath.Join(r, name))) {
			for _, m := range pathArg.FindAllStringSubmatch(c, -1) {
				p := strings.TrimRight(m[1], ".,;:")
				seen++
				if strings.HasPrefix(p, ".bin/") {
					// Built, not committed: a make target must write it.
					if bin := strings.TrimPrefix(p, ".bin/"); !strings.Contains(makefile, "$(BIN)/"+bin) && !strings.Contains(makefile, "-"+strings.TrimPrefix(bin, "otelcol-agentledger-")) {
						t.Errorf("%s: `%s`: no make target builds %s", name, c, p)
					}
					continue
				}
				if _, err := os.Stat(filepath.Join(r, p)); err != nil {
					t.Errorf("%s: `%s`: %s does not exist", name, c, p)
				}
			}
		}
	}
	if seen < 5 {
		t.Errorf("found only %d paths in the READMEs' commands: the extraction is broken", seen)
	}
}

// link is a Markdown link to a relative path.
var link = regexp.MustCompile(`\]\(([^)#\s]+)(?:#[^)]*)?\)`)

func TestRelativeLinksExist(t *testing.T) {
	r := root(t)
	for _, name := range readmes {
		dir := filepath.Dir(filepath.Join(r, name))
		for _, m := range link.FindAllStringSubmatch(fencedRE.ReplaceAllString(read(t, filepath.Join(r, name)), ""), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			if _, err := os.Stat(filepath.Join(dir, target)); err != nil {
				t.Errorf("%s: link %s: %v", name, target, err)
			}
		}
	}
}

// anchors: every #fragment link of README.md names a heading of it.
func TestAnchorsExist(t *testing.T) {
	text := read(t, filepath.Join(root(t), "README.md"))
	ids := map[string]bool{}
	for _, l := range strings.Split(fencedRE.ReplaceAllString(text, ""), "\n") {
		if h, ok := strings.CutPrefix(l, "#"); ok {
			h = strings.TrimLeft(h, "#")
			ids[slug(strings.TrimSpace(h))] = true
		}
	}
	frag := regexp.MustCompile(`\]\(#([^)]+)\)`)
	for _, m := range frag.FindAllStringSubmatch(text, -1) {
		if !ids[m[1]] {
			t.Errorf("README.md links #%s, which no heading makes", m[1])
		}
	}
}

// slug is GitHub's anchor for a heading: lower case, spaces to dashes,
// punctuation dropped.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}
