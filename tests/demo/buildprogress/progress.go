package main

import (
	"fmt"
	"net/url"
	"path"
	"strings"
	"time"
)

// staleOnlyForInstall is go list's StaleReason for a package whose compiled
// form is in the build cache and which is stale only because it is not
// installed (a main package before it is linked): go build -v does not
// print it, so it does not count as a package to compile.
const staleOnlyForInstall = "not installed but available in build cache"

// listFormat is the go list -f template parseList reads: one package a
// line, tab-separated.
const listFormat = "{{.ImportPath}}\t{{.Stale}}\t{{.StaleReason}}\t{{.Name}}\t{{.DepOnly}}"

// plan is what go list -deps says about a build: how many packages it
// involves, which of them need compiling, and its main packages.
type plan struct {
	deps      int
	toCompile int
	mains     map[string]bool
}

// parseList reads go list -deps -f listFormat output.
func parseList(out string) plan {
	p := plan{mains: map[string]bool{}}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			continue
		}
		p.deps++
		if f[1] == "true" && f[2] != staleOnlyForInstall {
			p.toCompile++
		}
		if f[3] == "main" && f[4] == "false" {
			p.mains[f[0]] = true
		}
	}
	return p
}

// goTracker follows a go build -v or go install -v: the go list phase
// (module downloads), then one printed import path per package compiled,
// then the link.
type goTracker struct {
	name  string // shown first on every line, e.g. "collector"
	then  string // what follows the compiles, e.g. "link .bin/otelcol-agentledger"
	start time.Time

	listing    bool
	downloads  int
	lastModule string
	known      bool // plan came from go list
	plan       plan
	compiled   int
	current    string
	linking    bool

	// finished holds every package whose build ended: printed by go build
	// -v (compiled) or ended in the build's trace (compiled or found in
	// the build cache). traced is set once the trace reported one; until
	// then progress counts compiled packages against the forecast.
	finished map[string]bool
	traced   bool
}

func newGoTracker(name, then string, start time.Time) *goTracker {
	return &goTracker{name: name, then: then, start: start, listing: true, finished: map[string]bool{}}
}

// built records packages whose build action ended in the build's trace.
func (t *goTracker) built(pkgs []string) {
	for _, p := range pkgs {
		t.traced = true
		t.finished[p] = true
		if !t.linking {
			t.current = p
		}
	}
}

// listed ends the go list phase; ok is false when go list failed, and the
// build then runs without a total.
func (t *goTracker) listed(p plan, ok bool) {
	t.listing = false
	t.known = ok
	t.plan = p
}

// line takes one line of go's output (go list's stderr, or go build's
// stdout and stderr) and reports whether it changed the phase.
func (t *goTracker) line(s string) bool {
	s = strings.TrimRight(s, "\r")
	if m, ok := strings.CutPrefix(s, "go: downloading "); ok {
		t.downloads++
		t.lastModule = m
		return false
	}
	if t.listing || !isImportPath(s) {
		return false
	}
	t.compiled++
	t.current = s
	t.finished[s] = true
	if t.plan.mains[s] && !t.linking {
		t.linking = true
		return true
	}
	return false
}

// isImportPath tells go build -v's lines (an import path alone) from
// errors and notes ("# pkg", "file.go:1:2: ...", "go: ...").
func isImportPath(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t:#") {
		return false
	}
	return !strings.HasPrefix(s, "-")
}

// status is the one-line progress at time now.
func (t *goTracker) status(now time.Time) string {
	el := elapsed(now.Sub(t.start))
	if t.listing {
		s := fmt.Sprintf("%s %s: listing packages (go list -deps)", t.name, el)
		if t.downloads > 0 {
			s += fmt.Sprintf(", %d modules downloaded, last %s", t.downloads, t.lastModule)
		}
		return s + "; next: compile"
	}
	if t.linking {
		return fmt.Sprintf("%s %s: %s compiled; now %s", t.name, el, t.count(), t.then)
	}
	if t.compiled == 0 && t.known && t.plan.toCompile == 0 {
		// Nothing to compile: the trace only shows the cache being read.
		return fmt.Sprintf("%s %s: all %d packages are in the build cache; now %s", t.name, el, t.plan.deps, t.then)
	}
	if len(t.finished) == 0 {
		return fmt.Sprintf("%s %s: %s to compile, waiting for the first; then %s", t.name, el, t.total(), t.then)
	}
	return fmt.Sprintf("%s %s: package %s, now %s; then %s", t.name, el, t.count(), shorten(t.current, 60), t.then)
}

func (t *goTracker) total() string {
	if !t.known {
		return "packages"
	}
	return fmt.Sprintf("%d packages", t.plan.toCompile)
}

// count is "412 of 1700 (24%)", or "412" without a plan. A package the
// plan did not expect (the total is a forecast) raises the total. With the
// build's trace, packages from the build cache count as done and the total
// is every package of the build: "412 of 1700 (24%, 300 from the build
// cache)".
func (t *goTracker) count() string {
	if !t.known {
		return fmt.Sprint(t.compiled)
	}
	if t.traced {
		n := len(t.finished)
		total := max(t.plan.deps, n)
		s := fmt.Sprintf("%d of %d (%d%%", n, total, 100*n/max(total, 1))
		if cached := n - t.compiled; cached > 0 {
			s += fmt.Sprintf(", %d from the build cache", cached)
		}
		return s + ")"
	}
	total := max(t.plan.toCompile, t.compiled)
	pct := 100
	if total > 0 {
		pct = 100 * t.compiled / total
	}
	return fmt.Sprintf("%d of %d (%d%%)", t.compiled, total, pct)
}

// done is the closing line.
func (t *goTracker) done(now time.Time, log string, err error) string {
	el := elapsed(now.Sub(t.start))
	if err != nil {
		return fmt.Sprintf("%s: FAILED after %s (%v); full output in %s", t.name, el, err, log)
	}
	s := fmt.Sprintf("%s: done in %s, %d packages compiled", t.name, el, t.compiled)
	if t.known && t.plan.deps > t.compiled {
		s += fmt.Sprintf(", %d from the build cache", t.plan.deps-t.compiled)
	}
	if t.downloads > 0 {
		s += fmt.Sprintf(", %d modules downloaded", t.downloads)
	}
	return s + "; full output in " + log
}

// npmTracker turns npm's --loglevel http (or info) output into one line per
// step: a package's metadata resolved, a tarball downloaded, an install
// script run, the closing "added N packages".
type npmTracker struct {
	name     string
	start    time.Time
	last     string
	warnings int
	notFound int
}

func newNPMTracker(name string, start time.Time) *npmTracker {
	return &npmTracker{name: name, start: start}
}

// line returns the step line for s, or "" when s is not a step (it still
// goes to the log).
func (t *npmTracker) line(s string, now time.Time) string {
	s = strings.TrimRight(s, "\r")
	step := npmStep(s)
	if step == notFound {
		// npm asks for every platform's optional package; the missing
		// ones answer 404 and are skipped.
		t.notFound++
		return ""
	}
	if step == "" {
		if strings.HasPrefix(s, "npm warn") || strings.HasPrefix(s, "npm WARN") {
			t.warnings++
		}
		return ""
	}
	t.last = step
	return fmt.Sprintf("%s %s: %s", t.name, elapsed(now.Sub(t.start)), step)
}

// notFound is npmStep's answer for a registry 404.
const notFound = "404"

func npmStep(s string) string {
	f := strings.Fields(s)
	switch {
	case len(f) >= 6 && f[0] == "npm" && f[1] == "http" && f[2] == "fetch":
		// npm http fetch GET 200 https://registry.npmjs.org/opencode-ai 531ms (cache miss)
		u, err := url.Parse(f[5])
		if err != nil {
			return ""
		}
		took := "" // " (531ms, cache miss)"
		if len(f) >= 7 {
			took = " (" + f[6]
			if rest := strings.Trim(strings.Join(f[7:], " "), "()"); rest != "" {
				took += ", " + rest
			}
			took += ")"
		}
		if f[4] == "404" {
			return notFound
		}
		if f[4] != "200" && f[4] != "304" {
			return fmt.Sprintf("%s %s %s%s", f[3], f[5], f[4], took)
		}
		p, _ := url.PathUnescape(u.EscapedPath())
		if strings.HasSuffix(p, ".tgz") {
			return "downloaded " + path.Base(p) + took
		}
		return "resolved " + strings.TrimPrefix(p, "/") + took
	case len(f) >= 5 && f[0] == "npm" && f[1] == "info" && f[2] == "run" && !strings.Contains(s, "{ code:"):
		// npm info run opencode-ai@1.18.33 postinstall node_modules/opencode-ai node ./postinstall.mjs
		return fmt.Sprintf("running %s %s script", f[3], f[4])
	case len(f) >= 3 && (f[0] == "added" || f[0] == "changed" || f[0] == "removed" || f[0] == "up"):
		return s
	}
	return ""
}

// idle is the line printed when npm has been quiet for a while.
func (t *npmTracker) idle(now time.Time) string {
	s := fmt.Sprintf("%s %s: npm is working", t.name, elapsed(now.Sub(t.start)))
	if t.last != "" {
		s += " (last step: " + t.last + ")"
	}
	return s
}

func (t *npmTracker) done(now time.Time, log string, err error) string {
	el := elapsed(now.Sub(t.start))
	if err != nil {
		return fmt.Sprintf("%s: FAILED after %s (%v); full output in %s", t.name, el, err, log)
	}
	s := fmt.Sprintf("%s: done in %s", t.name, el)
	if t.notFound > 0 {
		s += fmt.Sprintf(", %d registry lookups answered 404 (optional packages npm skips)", t.notFound)
	}
	if t.warnings > 0 {
		s += fmt.Sprintf(", %d lines of npm warnings", t.warnings)
	}
	return s + "; full output in " + log
}

// elapsed is a duration in whole seconds: 7s, 1m20s, 1h2m0s.
func elapsed(d time.Duration) string {
	return d.Truncate(time.Second).String()
}

// shorten keeps the end of an import path, which tells packages apart.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n+3:]
}
