package main

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/agentledger/agentledger/internal/testbin"
)

// timelineShotPath is where TestTimelinePagesInBrowser leaves the
// screenshot of the background invocation's page, relative to the
// repository root (docs/img/timeline.png is a copy of one).
const timelineShotPath = "out/timeline.png"

// timelineScenarios are the scenarios whose invocations' pages are
// checked: a job past the result and its continuation (background), a
// continuation woken while another invocation ran (warm-second), a
// followup closed because another invocation's turn consumed it
// (consumed).
var timelineScenarios = []string{"background", "warm-second", "consumed"}

// TestTimelinePagesInBrowser runs the demo and, while its collector runs,
// loads the timeline page of every invocation of timelineScenarios in
// headless Chromium. The rendered DOM is held against what the agent
// counted in process: one continuation lane per continuation, one bar per
// background job (past the result line when the job outlived the turn),
// a followup_closed lane for a consumed job, and the tokens of the model
// calls drawn after the result line equal to the summary's after-result
// tokens. The main page links every row to its timeline. A screenshot of
// the background invocation's page is saved to out/timeline.png.
func TestTimelinePagesInBrowser(t *testing.T) {
	bin := testbin.Require(t, testbin.EnvCollectorBin, "make build", ".bin/otelcol-agentledger")
	chromium := testbin.Require(t, testbin.EnvChromiumBin, "make chromium", "/usr/bin/chromium")
	root, err := testbin.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	browser := testbin.Browser{Bin: chromium, Dir: t.TempDir()}

	browse := func(ctx context.Context, pageURL, _ string, results []testbin.AgentInvocation) error {
		dom, err := browser.DumpDOM(ctx, pageURL, 500)
		if err != nil {
			return err
		}
		links := timelineLinks(dom)
		checked := 0
		for _, r := range results {
			if !slices.Contains(timelineScenarios, r.Scenario) {
				continue
			}
			checked++
			path := "invocations/" + url.PathEscape(r.InvocationID)
			if !links[path] {
				t.Errorf("the main page does not link %s (%s) to %s", r.InvocationID, r.Scenario, path)
			}
			dom, err := browser.DumpDOM(ctx, pageURL+path, 500)
			if err != nil {
				return err
			}
			checkTimeline(t, r, dom)
		}
		if checked < len(timelineScenarios)+2 { // warm-second and consumed start two invocations each
			t.Errorf("checked %d invocations of %v, want %d", checked, timelineScenarios, len(timelineScenarios)+2)
		}
		shot := filepath.Join(root, timelineShotPath)
		if err := browser.Screenshot(ctx, pageURL+"invocations/"+url.PathEscape(backgroundInvocation(results)), shot, 1400, 820, 500); err != nil {
			return err
		}
		t.Logf("screenshot: %s", shot)
		return nil
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	err = run(ctx, options{collector: bin, timeout: 3 * time.Minute, workDir: t.TempDir(), browse: browse}, &out)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "timeline of one background invocation: http://") {
		t.Errorf("the demo does not print the timeline's URL:\n%s", out.String())
	}
	if st, err := os.Stat(filepath.Join(root, timelineShotPath)); err != nil || st.Size() < 10_000 {
		t.Errorf("screenshot %s: %v (size %v)", timelineShotPath, err, st)
	}
}

// checkTimeline holds one invocation's rendered page against what the
// agent counted.
func checkTimeline(t *testing.T, r testbin.AgentInvocation, dom string) {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(dom))
	if err != nil {
		t.Errorf("%s: parse the DOM: %v", r.InvocationID, err)
		return
	}
	var (
		inv, after      map[string]string
		lanes, spans    []map[string]string
		resultLine, cut bool
	)
	walkElements(doc, func(n *html.Node, attrs map[string]string) {
		classes := strings.Fields(attrs["class"])
		switch {
		case attrs["id"] == "invocation":
			inv = attrs
		case attrs["id"] == "after-result":
			after = attrs
		case attrs["id"] == "result-line":
			resultLine = true
		case attrs["id"] == "cut":
			cut = true
		case n.Data == "g" && slices.Contains(classes, "lane"):
			lanes = append(lanes, attrs)
		case n.Data == "g" && slices.Contains(classes, "span"):
			spans = append(spans, attrs)
		}
	})
	name := fmt.Sprintf("%s (%s)", r.InvocationID, r.Scenario)
	if inv == nil {
		t.Errorf("%s: no invocation on the page:\n%.2000s", name, dom)
		return
	}
	if inv["data-status"] != r.Status {
		t.Errorf("%s: status %q, want %q", name, inv["data-status"], r.Status)
	}
	if !resultLine || after == nil {
		t.Errorf("%s: no result line (%v) or after-result note (%v)", name, resultLine, after != nil)
		return
	}
	if cut {
		t.Errorf("%s: the timeline says it was cut", name)
	}
	kinds := map[string]int{}
	for _, l := range lanes {
		kinds[l["data-kind"]]++
		if l["data-trace-id"] == "" {
			t.Errorf("%s: a lane without its trace id: %v", name, l)
		}
	}
	if kinds["root"] != 1 {
		t.Errorf("%s: %d root lanes, want 1 (%v)", name, kinds["root"], kinds)
	}
	if got := int64(kinds["continuation"]); got != r.Continuations {
		t.Errorf("%s: %d continuation lanes, want %d (the agent's continuations)", name, got, r.Continuations)
	}
	var jobs, jobsPast int64
	var afterIn, afterOut, calls int64
	for _, s := range spans {
		if s["data-role"] == "background" {
			jobs++
			if s["data-past-result"] == "true" {
				jobsPast++
			}
		}
		if s["data-model-call"] == "true" {
			calls++
		}
		if s["data-after-result"] == "true" {
			var in, out int64
			_, _ = fmt.Sscan(s["data-input-tokens"], &in)
			_, _ = fmt.Sscan(s["data-output-tokens"], &out)
			afterIn += in
			afterOut += out
		}
	}
	if jobs != r.BackgroundJobs {
		t.Errorf("%s: %d background bars, want %d", name, jobs, r.BackgroundJobs)
	}
	if r.BackgroundJobs > 0 && jobsPast == 0 {
		t.Errorf("%s: no background bar runs past the result line", name)
	}
	if calls != r.ModelCalls {
		t.Errorf("%s: %d model calls drawn, want %d", name, calls, r.ModelCalls)
	}
	if afterIn != r.AfterResultInputTokens || afterOut != r.AfterResultOutputTokens {
		t.Errorf("%s: the model calls after the result line add up to %d in / %d out, the summary says %d / %d",
			name, afterIn, afterOut, r.AfterResultInputTokens, r.AfterResultOutputTokens)
	}
	if after["data-input-tokens"] != fmt.Sprint(r.AfterResultInputTokens) || inv["data-after-input-tokens"] != fmt.Sprint(r.AfterResultInputTokens) {
		t.Errorf("%s: after-result note %q, summary %q, want %d", name, after["data-input-tokens"], inv["data-after-input-tokens"], r.AfterResultInputTokens)
	}
	if r.Scenario == "consumed" && r.BackgroundJobs > 0 && kinds["followup_closed"] != 1 {
		t.Errorf("%s: the consumed job's followup_closed is not in a lane of its own (%v)", name, kinds)
	}
}

// timelineLinks returns the timeline links of the main page's rows.
func timelineLinks(dom string) map[string]bool {
	out := map[string]bool{}
	doc, err := html.Parse(strings.NewReader(dom))
	if err != nil {
		return out
	}
	walkElements(doc, func(n *html.Node, attrs map[string]string) {
		if n.Data == "a" && attrs["class"] == "timeline-link" {
			out[attrs["href"]] = true
		}
	})
	return out
}

func walkElements(n *html.Node, f func(*html.Node, map[string]string)) {
	if n.Type == html.ElementNode {
		attrs := map[string]string{}
		for _, a := range n.Attr {
			attrs[a.Key] = a.Val
		}
		f(n, attrs)
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		walkElements(c, f)
	}
}
