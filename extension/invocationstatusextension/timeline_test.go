package invocationstatusextension

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
)

func traceN(n byte) statusapi.TraceID { return statusapi.TraceID{15: n} }
func spanN(n byte) statusapi.SpanID   { return statusapi.SpanID{7: n} }

// backgroundTimeline is the canonical background invocation as the
// processor records it, the root starting at start: root and a model call
// and tool, a job running past the result, the continuation its
// notification woke (another trace) with an after-result model call, and
// a second job whose followup closed consumed (a third trace).
func backgroundTimeline(start time.Time) []statusapi.Span {
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	return []statusapi.Span{
		{TraceID: traceN(1), SpanID: spanN(2), ParentSpanID: spanN(1), Name: "chat gpt-test", Start: at(1), End: at(2), ModelCall: true, InputTokens: 100, OutputTokens: 10},
		{TraceID: traceN(1), SpanID: spanN(3), ParentSpanID: spanN(1), Name: "execute_tool shell", Start: at(3), End: at(3)},
		{TraceID: traceN(1), SpanID: spanN(1), Name: "invoke_agent coder", Role: statusapi.RoleRoot, Start: at(0), End: at(10)},
		{TraceID: traceN(1), SpanID: spanN(4), ParentSpanID: spanN(3), Name: "background shell", Role: statusapi.RoleBackground, Start: at(3), End: at(20)},
		{TraceID: traceN(2), SpanID: spanN(10), Name: "continue_agent coder", Role: statusapi.RoleContinuation, Start: at(21), End: at(30),
			Link: statusapi.LinkFollowup, LinkedSpanID: spanN(4), Links: 1},
		{TraceID: traceN(2), SpanID: spanN(11), ParentSpanID: spanN(10), Name: "chat gpt-test", Start: at(22), End: at(29), ModelCall: true, InputTokens: 50, OutputTokens: 5},
		{TraceID: traceN(3), SpanID: spanN(20), Name: "followup_closed", Role: statusapi.RoleFollowupClosed, Start: at(25), End: at(25),
			Link: statusapi.LinkFollowup, LinkedSpanID: spanN(4), Links: 1},
	}
}

// timelineView is a closed final invocation with its timeline.
func timelineView(id string) statusapi.Invocation {
	v := closedView(id, "s1", statusapi.StatusFinal, 1, time.Hour)
	resultAt := v.Started.Add(10 * time.Second)
	v.ResultAt = &resultAt
	v.Timeline = &statusapi.Timeline{Spans: backgroundTimeline(v.Started), Limit: 1000}
	v.TraceIDs = []string{traceN(1).String(), traceN(2).String()}
	return v
}

func TestInvocationJSONWithSpans(t *testing.T) {
	e := newTestExtension(t, nil)
	srv := serve(t, e)
	v := timelineView("inv-a")
	e.PublishInvocations([]statusapi.Invocation{v})

	var got statusapi.Invocation
	getJSON(t, srv, "/v1/invocations/inv-a?spans=1", &got)
	require.NotNil(t, got.Timeline)
	assert.Equal(t, *v.Timeline, *got.Timeline)

	got = statusapi.Invocation{}
	getJSON(t, srv, "/v1/invocations/inv-a", &got)
	assert.Nil(t, got.Timeline, "spans only when asked")
	getJSON(t, srv, "/v1/invocations/inv-a?spans=0", &got)
	assert.Nil(t, got.Timeline)
	var list statusapi.InvocationList
	getJSON(t, srv, "/v1/invocations", &list)
	require.Len(t, list.Invocations, 1)
	assert.Nil(t, list.Invocations[0].Timeline, "lists carry no spans")

	_, body := get(t, srv, "/v1/invocations/inv-a?spans=1")
	for _, want := range []string{`"trace_id": "` + traceN(2).String() + `"`, `"role": "continuation"`, `"linked_span_id": "` + spanN(4).String() + `"`, `"limit": 1000`} {
		assert.Contains(t, string(body), want)
	}
	assert.NotContains(t, string(body), `"parent_span_id": "0000000000000000"`, "a trace's root has no parent")

	for _, bad := range []string{"?spans=2", "?spans=1&spans=1", "?spans=yes"} {
		code, _ := get(t, srv, "/v1/invocations/inv-a"+bad)
		assert.Equal(t, http.StatusBadRequest, code, bad)
	}

	// Without records the answer says so: an empty timeline of limit 0.
	e.PublishInvocations([]statusapi.Invocation{closedView("inv-b", "s1", statusapi.StatusFinal, 1, time.Hour)})
	got = statusapi.Invocation{}
	getJSON(t, srv, "/v1/invocations/inv-b?spans=1", &got)
	require.NotNil(t, got.Timeline)
	assert.Empty(t, got.Timeline.Spans)
	assert.Zero(t, got.Timeline.Limit)
}

func TestClientTimeline(t *testing.T) {
	e := newTestExtension(t, nil)
	base := startExtension(t, e, nil)
	v := timelineView("inv-a")
	e.PublishInvocations([]statusapi.Invocation{v})
	c, err := statusapi.NewClient([]string{base})
	require.NoError(t, err)
	got, err := c.Timeline(context.Background(), "inv-a")
	require.NoError(t, err)
	require.NotNil(t, got.Timeline)
	assert.Equal(t, v.Timeline.Spans, got.Timeline.Spans)
	plain, err := c.Invocation(context.Background(), "inv-a")
	require.NoError(t, err)
	assert.Nil(t, plain.Timeline)
	_, err = c.Timeline(context.Background(), "nope")
	assert.ErrorIs(t, err, statusapi.ErrNotFound)
}

// attrsOf returns the data attributes of the elements whose class
// attribute starts with class, in document order.
func attrsOf(page, class string) []map[string]string {
	tag := regexp.MustCompile(`<[a-z]+ class="` + regexp.QuoteMeta(class) + `[ "][^>]*>`)
	attr := regexp.MustCompile(`(data-[a-z-]+)="([^"]*)"`)
	var out []map[string]string
	for _, t := range tag.FindAllString(page, -1) {
		m := map[string]string{}
		for _, a := range attr.FindAllStringSubmatch(t, -1) {
			m[a[1]] = a[2]
		}
		out = append(out, m)
	}
	return out
}

func TestTimelinePageDrawsEveryTrace(t *testing.T) {
	e := newTestExtension(t, func(c *Config) { c.JaegerURL = "http://jaeger.example:16686" })
	srv := serve(t, e)
	e.PublishInvocations([]statusapi.Invocation{timelineView("inv-a")})

	code, body := get(t, srv, "/invocations/inv-a")
	require.Equal(t, http.StatusOK, code, string(body))
	page := string(body)

	lanes := attrsOf(page, "lane")
	require.Len(t, lanes, 3)
	assert.Equal(t, []string{"root", "continuation", "followup_closed"}, []string{lanes[0]["data-kind"], lanes[1]["data-kind"], lanes[2]["data-kind"]})
	assert.Equal(t, traceN(2).String(), lanes[1]["data-trace-id"])
	assert.Contains(t, page, "continuation trace "+traceN(2).String()[:16]+"…")
	assert.Contains(t, page, "<title>trace "+traceN(2).String()+"</title>")

	spans := attrsOf(page, "span")
	require.Len(t, spans, 7)
	names := []string{}
	for _, s := range spans {
		names = append(names, s["data-name"])
	}
	assert.Equal(t, []string{"invoke_agent coder", "chat gpt-test", "execute_tool shell", "background shell", "continue_agent coder", "chat gpt-test", "followup_closed"}, names,
		"each trace in parent order, siblings by start")
	byName := map[string]map[string]string{}
	for _, s := range spans {
		byName[s["data-name"]+"/"+s["data-role"]] = s
	}
	assert.Equal(t, "true", byName["background shell/background"]["data-past-result"], "the job runs past the result line")
	assert.Equal(t, "false", byName["invoke_agent coder/root"]["data-past-result"])
	assert.Equal(t, "followup", byName["continue_agent coder/continuation"]["data-link"])
	var afterIn int
	for _, s := range spans {
		if s["data-after-result"] == "true" {
			var n int
			_, _ = fmt.Sscan(s["data-input-tokens"], &n)
			afterIn += n
		}
	}
	assert.Equal(t, 50, afterIn, "the shaded model calls add up to the summary's after-result input")
	after := attrsOf(page, "after-note")
	require.Len(t, after, 1)
	assert.Equal(t, "50", after[0]["data-input-tokens"])
	assert.Equal(t, "5", after[0]["data-output-tokens"])
	assert.Contains(t, page, `id="result-line"`)
	assert.Contains(t, page, "50 in · 5 out")
	assert.Equal(t, 2, strings.Count(page, `<path class="link link-followup"`), "the continuation and the followup_closed link to the job")
	assert.Contains(t, page, `href="http://jaeger.example:16686/trace/`+traceN(2).String()+`"`)
	assert.Contains(t, page, `href="../v1/invocations/inv-a?spans=1"`)
	assert.NotContains(t, page, `id="cut"`)
	local := strings.ReplaceAll(strings.ReplaceAll(page, "http://jaeger.example:16686", ""), "http://www.w3.org/2000/svg", "")
	assert.NotContains(t, local, "http://", "nothing loads from elsewhere")
	assert.NotContains(t, local, "https://")
	assert.Equal(t, `data-refresh-ms="0"`, regexp.MustCompile(`data-refresh-ms="\d+"`).FindString(page), "a closed invocation's page does not refresh")

	// The main page links the row to it and draws a mini-timeline.
	_, body = get(t, srv, "/")
	assert.Contains(t, string(body), `<a class="timeline-link" href="invocations/inv-a">inv-a</a>`)
	assert.Contains(t, string(body), `<svg class="spark"`)
	assert.Contains(t, string(body), `class="model after-result"`)

	code, _ = get(t, srv, "/invocations/nope")
	assert.Equal(t, http.StatusNotFound, code)
	code, _ = get(t, srv, "/invocations/inv-a?spans=1")
	assert.Equal(t, http.StatusBadRequest, code)
}

func TestTimelinePageShowsWhatAnOpenInvocationWaitsOn(t *testing.T) {
	e := newTestExtension(t, nil)
	srv := serve(t, e)
	v := openView("inv-open", "s1", 40*time.Second, jobWaiting("background shell", t0.Add(-37*time.Second)))
	v.Waiting.ExpectedFollowups[0].SpanID = spanN(4).String()
	v.Waiting.MissingChildren = []statusapi.MissingChildren{{Parent: "execute_tool shell", Missing: 1, Parents: 1}}
	v.Waiting.RemoteSettling = &statusapi.RemoteSettling{Spans: []string{"chat gpt-test"}, Until: t0.Add(2 * time.Second)}
	spans := backgroundTimeline(v.Started)[:4]
	spans[0].Remote = true
	v.Timeline = &statusapi.Timeline{Spans: spans, Limit: 1000}
	e.PublishInvocations([]statusapi.Invocation{v})

	_, body := get(t, srv, "/invocations/inv-open")
	page := string(body)
	assert.Contains(t, page, `data-open="true"`)
	assert.Contains(t, page, `data-refresh-ms="2000"`)
	assert.Contains(t, page, "awaits 1 followup(s), job started 37s ago")
	assert.Contains(t, page, "1 child span(s) missing under 1 span(s) of this name")
	assert.Contains(t, page, "remote subtree settling until 05:06:09.000")
	assert.Contains(t, page, `<line class="now"`)
	assert.Contains(t, page, `<line class="settle"`)
	waits := 0
	for _, s := range attrsOf(page, "span") {
		if s["data-waits"] == "true" {
			waits++
		}
	}
	assert.Equal(t, 3, waits, "the job, the tool and the remote call")
	assert.Contains(t, page, "Not final yet: waiting on")

	code, body := get(t, srv, "/invocations/inv-open?fragment=1")
	assert.Equal(t, http.StatusOK, code)
	assert.NotContains(t, string(body), "<script")
	assert.Contains(t, string(body), `id="invocation"`)
}

// An invocation with more spans than the processor records draws those it
// has and says how many it does not.
func TestTimelinePageSaysWhenCut(t *testing.T) {
	e := newTestExtension(t, nil)
	srv := serve(t, e)
	v := timelineView("inv-big")
	v.Timeline = &statusapi.Timeline{Spans: v.Timeline.Spans[:3], Limit: 3, Omitted: 4}
	v.Spans = 7
	e.PublishInvocations([]statusapi.Invocation{v})
	_, body := get(t, srv, "/invocations/inv-big")
	page := string(body)
	assert.Len(t, attrsOf(page, "span"), 3)
	assert.Contains(t, page, `id="cut"`)
	assert.Contains(t, page, "showing the first 3 of 7 spans: 4 not drawn (the processor records at most status_spans = 3")

	e.PublishInvocations([]statusapi.Invocation{closedView("inv-none", "s1", statusapi.StatusFinal, 1, time.Hour)})
	_, body = get(t, srv, "/invocations/inv-none")
	assert.Contains(t, string(body), `id="no-spans"`)
}

// Every name on the page comes from senders: ids, sessions, tenants,
// span names, reasons.
func TestTimelinePageEscapes(t *testing.T) {
	e := newTestExtension(t, nil)
	srv := serve(t, e)
	const evil = `<script>alert(1)</script>`
	v := timelineView(`"><img src=x onerror=alert(1)>`)
	v.Tenant = `t&<b>`
	v.Session = evil
	v.Agent = `</title><script>alert(2)</script>`
	v.Reasons = []string{"open_followup:" + evil}
	v.Status = statusapi.StatusIncomplete
	v.Anomalies = []string{"late_span:" + evil}
	for i := range v.Timeline.Spans {
		v.Timeline.Spans[i].Name = evil + `" onmouseover="x` + fmt.Sprint(i)
	}
	e.PublishInvocations([]statusapi.Invocation{v})
	code, body := get(t, srv, "/invocations/"+urlPathEscape(v.ID)+"?tenant="+urlQueryEscape(v.Tenant))
	require.Equal(t, http.StatusOK, code, string(body))
	page := string(body)
	assert.NotContains(t, page, "<script>alert")
	assert.NotContains(t, page, "<img")
	assert.NotContains(t, page, "<b>")
	assert.NotContains(t, page, `" onmouseover="`)
	assert.Contains(t, page, "&lt;script&gt;alert(1)&lt;/script&gt;")
	assert.Equal(t, 1, strings.Count(page, "<script>"), "only the page's own script")

	_, body = get(t, srv, "/?session="+urlQueryEscape(evil)+"&tenant="+urlQueryEscape(v.Tenant))
	page = string(body)
	assert.NotContains(t, page, "<script>alert")
	assert.NotContains(t, page, "<img")
	assert.Equal(t, 1, strings.Count(page, "<script>"))
}

func TestTimelinePageCSPAdmitsItsOwnScript(t *testing.T) {
	e := newTestExtension(t, nil)
	srv := serve(t, e)
	e.PublishInvocations([]statusapi.Invocation{timelineView("inv-a")})
	resp, err := srv.Client().Get(srv.URL + "/invocations/inv-a")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	csp := resp.Header.Get("Content-Security-Policy")
	for _, el := range []struct{ open, close, directive string }{
		{"<script>", "</script>", "script-src"},
		{"<style>", "</style>", "style-src"},
	} {
		_, rest, ok := strings.Cut(string(body), el.open)
		require.True(t, ok)
		inline, _, ok := strings.Cut(rest, el.close)
		require.True(t, ok)
		sum := sha256.Sum256([]byte(inline))
		assert.Contains(t, csp, el.directive+" 'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
	}
	assert.Contains(t, csp, "default-src 'none'")
	assert.NotContains(t, csp, "unsafe-inline")
	assert.NotContains(t, string(body), " style=", "no inline style attributes: the policy would refuse them")
}

func TestPageFiltersBySession(t *testing.T) {
	e := newTestExtension(t, nil)
	srv := serve(t, e)
	other := closedView("inv-b", "s2", statusapi.StatusFinal, 1, time.Hour)
	e.PublishInvocations([]statusapi.Invocation{
		timelineView("inv-a"), other,
		openView("inv-c", "s1", time.Minute, childWaiting("x")),
		openView("inv-d", "s2", time.Minute, childWaiting("x")),
	})
	_, body := get(t, srv, "/?session=s1")
	page := string(body)
	assert.Contains(t, page, `data-invocation-id="inv-a"`)
	assert.Contains(t, page, `data-invocation-id="inv-c"`)
	assert.NotContains(t, page, `data-invocation-id="inv-b"`)
	assert.NotContains(t, page, `data-invocation-id="inv-d"`)
	assert.Contains(t, page, `id="filter"`)
	assert.Contains(t, page, "Open (1)")
	assert.Contains(t, page, "Recently closed (1)")

	_, body = get(t, srv, "/")
	assert.Contains(t, string(body), `<a class="session-link" href="?session=s2">s2</a>`)
	assert.NotContains(t, string(body), `id="filter"`)

	for _, bad := range []string{"/?session=", "/?session=a&session=b", "/?sort=age"} {
		code, _ := get(t, srv, bad)
		assert.Equal(t, http.StatusBadRequest, code, bad)
	}
}

func TestClosedViewBytesCountSpans(t *testing.T) {
	v := timelineView("inv-a")
	without := v
	without.Timeline = nil
	names := 0
	for _, s := range v.Timeline.Spans {
		names += len(s.Name)
	}
	assert.Equal(t, viewBytes(&without)+int64(len(v.Timeline.Spans))*sizeSpan+int64(names), viewBytes(&v))

	// max_closed_bytes holds views by their spans too.
	s := newStore(1000, 64<<10, 10)
	big := timelineView("big")
	for range 9 {
		big.Timeline.Spans = append(big.Timeline.Spans, big.Timeline.Spans...)
	}
	require.Greater(t, viewBytes(&big), int64(64<<10))
	s.publish([]statusapi.Invocation{timelineView("small"), big})
	assert.LessOrEqual(t, s.closedBytes, int64(64<<10))
	_, ok := s.get("", "small")
	assert.False(t, ok, "the earlier view gave way")
}

// A scoped caller sees its own tenant's timelines and filters, no other's.
func TestTimelinePageScoped(t *testing.T) {
	e := newTestExtension(t, scoped)
	srv := serveAs(t, e)
	a := timelineView("inv-1")
	a.Tenant = "alice"
	b := timelineView("inv-1")
	b.Tenant = "bob"
	b.Session = "s-bob"
	e.PublishInvocations([]statusapi.Invocation{a, b})

	code, body := getAs(t, srv, "alice", "/invocations/inv-1")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `data-tenant="alice"`)
	assert.Contains(t, body, `href="../?tenant=alice"`)
	for _, path := range []string{"/invocations/inv-1?tenant=bob", "/?tenant=bob", "/?session=s-bob&tenant=bob"} {
		code, body := getAs(t, srv, "alice", path)
		assert.Equal(t, http.StatusForbidden, code, path)
		assert.NotContains(t, body, "s-bob", path)
	}
	code, body = getAs(t, srv, "alice", "/?session=s-bob")
	assert.Equal(t, http.StatusOK, code)
	assert.NotContains(t, body, `data-invocation-id="inv-1"`, "bob's session is not alice's")
	code, body = getAs(t, srv, "ops", "/invocations/inv-1?tenant=bob")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `data-tenant="bob"`)
}
