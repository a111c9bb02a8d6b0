package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"golang.org/x/net/html"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/internal/testbin"
)

// screenshotPath is where TestStatusPageInBrowser leaves its screenshot,
// relative to the repository root.
const screenshotPath = "out/status-page.png"

// pageWidth is the window the status page must fit, with one line a row.
const pageWidth = 1400

// checkFits reads the layout the page reports about itself (its script
// measures after each render): no horizontal scrolling at pageWidth, and
// no row taller than one line of text and its mini-timeline.
func checkFits(t *testing.T, dom string) {
	t.Helper()
	doc, err := html.Parse(strings.NewReader(dom))
	if err != nil {
		t.Fatalf("parse the DOM: %v", err)
	}
	attrs := map[string]string{}
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && n.Data == "body" {
			for _, a := range n.Attr {
				attrs[a.Key] = a.Val
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	var width, tallest int
	if _, err := fmt.Sscan(attrs["data-scroll-width"], &width); err != nil {
		t.Fatalf("the page reports no scroll width (data-scroll-width=%q)", attrs["data-scroll-width"])
	}
	if _, err := fmt.Sscan(attrs["data-tallest-row"], &tallest); err != nil {
		t.Fatalf("the page reports no row height (data-tallest-row=%q)", attrs["data-tallest-row"])
	}
	t.Logf("status page at %d px: %d px wide, tallest row %d px", pageWidth, width, tallest)
	if width > pageWidth {
		t.Errorf("the status page is %d px wide in a %d px window: it scrolls sideways", width, pageWidth)
	}
	if tallest == 0 || tallest > 40 {
		t.Errorf("the tallest row is %d px: rows are not one line", tallest)
	}
}

// TestStatusPageInBrowser runs the demo (every scenario) and, while its
// collector runs, loads the invocation status page in headless Chromium:
// every invocation the agent reported has a row with its final status and
// exact token counts, an open invocation sent by the test shows what it
// waits on, and the page has refreshed itself from the server at least
// once. A screenshot is saved to out/status-page.png.
func TestStatusPageInBrowser(t *testing.T) {
	bin := testbin.Require(t, testbin.EnvCollectorBin, "make build", ".bin/otelcol-agentledger")
	chromium := testbin.Require(t, testbin.EnvChromiumBin, "make chromium", "/usr/bin/chromium")
	root, err := testbin.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	browser := testbin.Browser{Bin: chromium, Dir: t.TempDir()}
	const pendingID = "browser-pending"

	browse := func(ctx context.Context, pageURL, otlp string, results []testbin.AgentInvocation) error {
		if err := exportPending(ctx, otlp, pendingID); err != nil {
			return err
		}
		// 5 s of virtual time: the page refreshes every 2 s.
		dom, err := browser.DumpDOMSized(ctx, pageURL, pageWidth, 900, 5000)
		if err != nil {
			return err
		}
		checkFits(t, dom)
		rows, refreshes, err := pageRows(dom)
		if err != nil {
			return err
		}
		if refreshes < 1 {
			t.Errorf("the page did not refresh itself in the browser (data-refreshes=%d)", refreshes)
		}
		for _, r := range results {
			row, ok := rows[r.InvocationID]
			if !ok {
				t.Errorf("no row for invocation %s (%s)", r.InvocationID, r.Scenario)
				continue
			}
			want := map[string]string{
				"data-status":              r.Status,
				"data-input-tokens":        fmt.Sprint(r.InputTokens),
				"data-output-tokens":       fmt.Sprint(r.OutputTokens),
				"data-after-input-tokens":  fmt.Sprint(r.AfterResultInputTokens),
				"data-after-output-tokens": fmt.Sprint(r.AfterResultOutputTokens),
			}
			for k, v := range want {
				if row.attrs[k] != v {
					t.Errorf("row %s (%s): %s = %q, want %q", r.InvocationID, r.Scenario, k, row.attrs[k], v)
				}
			}
			if !strings.Contains(row.text, r.SessionID) {
				t.Errorf("row %s does not show session %s: %q", r.InvocationID, r.SessionID, row.text)
			}
		}
		pending, ok := rows[pendingID]
		switch {
		case !ok:
			t.Errorf("no row for the open invocation %s", pendingID)
		case pending.attrs["data-status"] != "pending" || !strings.Contains(pending.text, "1 missing child span(s) of execute_tool shell"):
			t.Errorf("open invocation row: status %q, text %q", pending.attrs["data-status"], pending.text)
		}
		if len(rows) != len(results)+1 {
			t.Errorf("%d rows, want %d (one per invocation)", len(rows), len(results)+1)
		}
		shot := filepath.Join(root, screenshotPath)
		if err := browser.Screenshot(ctx, pageURL, shot, pageWidth, 900, 2500); err != nil {
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
	if !strings.Contains(out.String(), "invocation status page: http://") {
		t.Errorf("the demo does not print the page's URL:\n%s", out.String())
	}
	if st, err := os.Stat(filepath.Join(root, screenshotPath)); err != nil || st.Size() < 10_000 {
		t.Errorf("screenshot %s: %v (size %v)", screenshotPath, err, st)
	}
}

// row is one invocation row of the rendered page.
type row struct {
	attrs map[string]string
	text  string
}

// pageRows returns the rendered page's invocation rows by invocation id,
// and the body's data-refreshes counter.
func pageRows(dom string) (map[string]row, int, error) {
	doc, err := html.Parse(strings.NewReader(dom))
	if err != nil {
		return nil, 0, fmt.Errorf("parse the DOM: %w", err)
	}
	rows := map[string]row{}
	refreshes := -1
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			attrs := map[string]string{}
			for _, a := range n.Attr {
				attrs[a.Key] = a.Val
			}
			if n.Data == "body" {
				_, _ = fmt.Sscan(attrs["data-refreshes"], &refreshes)
			}
			if n.Data == "tr" && attrs["class"] == "invocation" {
				rows[attrs["data-invocation-id"]] = row{attrs: attrs, text: textOf(n)}
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	if refreshes < 0 {
		return nil, 0, fmt.Errorf("the DOM has no page body:\n%.2000s", dom)
	}
	return rows, refreshes, nil
}

func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

// exportPending sends an invocation whose tool's child (a job still
// running) has not arrived: it stays open.
func exportPending(ctx context.Context, endpoint, id string) error {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "browser-test")
	spans := rs.ScopeSpans().AppendEmpty().Spans()
	now := time.Now()
	trace := pcommon.TraceID{0xb0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	root := spans.AppendEmpty()
	root.SetTraceID(trace)
	root.SetSpanID(pcommon.SpanID{0xb0, 1})
	root.SetName("invoke_agent browser")
	root.SetStartTimestamp(pcommon.NewTimestampFromTime(now.Add(-90 * time.Second)))
	root.SetEndTimestamp(pcommon.NewTimestampFromTime(now.Add(-80 * time.Second)))
	ra := root.Attributes()
	ra.PutStr(contract.AttrInvocationID, id)
	ra.PutStr(contract.AttrRole, contract.RoleRoot)
	ra.PutInt(contract.AttrChildren, 1)
	ra.PutStr(contract.AttrConversationID, "browser-session")
	ra.PutStr(contract.AttrAgentName, "browser")
	tool := spans.AppendEmpty()
	tool.SetTraceID(trace)
	tool.SetSpanID(pcommon.SpanID{0xb0, 2})
	tool.SetParentSpanID(root.SpanID())
	tool.SetName("execute_tool shell")
	tool.SetStartTimestamp(pcommon.NewTimestampFromTime(now.Add(-85 * time.Second)))
	tool.SetEndTimestamp(pcommon.NewTimestampFromTime(now.Add(-85 * time.Second)))
	ta := tool.Attributes()
	ta.PutStr(contract.AttrInvocationID, id)
	ta.PutInt(contract.AttrChildren, 1)

	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = ptraceotlp.NewGRPCClient(conn).Export(ctx, ptraceotlp.NewExportRequestFromTraces(td))
	return err
}
