package invocationstatusextension

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
)

func TestPageRendersRowsAndLinks(t *testing.T) {
	e := newTestExtension(t, func(c *Config) {
		c.JaegerURL = "http://jaeger.example:16686/"
		c.PageRows = 2
	})
	srv := serve(t, e)
	job := openView("inv-job", "s1", 9*time.Minute, jobWaiting("background shell", t0.Add(-8*time.Minute)))
	job.Waiting.MissingChildren = []statusapi.MissingChildren{{Parent: "execute_tool shell", Missing: 2, Parents: 1}}
	job.Waiting.RemoteSettling = &statusapi.RemoteSettling{Spans: []string{"background shell"}, Until: t0.Add(1500 * time.Millisecond)}
	evil := openView(`<script>alert(1)</script>`, "s2", time.Minute, childWaiting(`<b>bold</b>`))
	incomplete := closedView("inv-inc", "s1", statusapi.StatusIncomplete, 1, time.Hour)
	incomplete.Reasons = []string{"open_followup:background shell", "open_timeout"}
	e.PublishInvocations([]statusapi.Invocation{
		job, evil,
		openView("inv-young", "s3", 10*time.Second, childWaiting("a")),
		closedView("inv-final", "s1", statusapi.StatusFinal, 2, 2*time.Hour),
		incomplete, // closed after inv-final
	})

	code, body := get(t, srv, "/")
	page := string(body)
	assert.Equal(t, http.StatusOK, code)
	for _, want := range []string{
		`<tr class="invocation" data-invocation-id="inv-job" data-status="pending" data-input-tokens="100" data-output-tokens="10"`,
		"followup of background shell (started 8m0s ago)",
		"2 missing child span(s) of execute_tool shell",
		"remote background shell settling until 05:06:08.500",
		"open timeout at 2026-03-04T09:06:07Z",
		`href="http://jaeger.example:16686/trace/00000000000000000000000000000007"`,
		`href="http://jaeger.example:16686/search?service=agent&amp;tags=%7B%22invocation.id%22%3A%22inv-job%22%7D"`,
		`data-invocation-id="inv-final" data-status="final"`,
		"rev 2",
		`data-invocation-id="inv-inc" data-status="incomplete"`,
		"<li>open_timeout</li>",
		"Open (3, oldest 2 shown)",
		"Recently closed (2)",
		`data-refresh-ms="2000"`,
		"setInterval(reload, every)",
		"&lt;script&gt;alert(1)&lt;/script&gt;",
		"&lt;b&gt;bold&lt;/b&gt;",
	} {
		assert.Contains(t, page, want)
	}
	assert.Contains(t, page, "<th>traces</th>", "a Jaeger UI: the traces column")
	assert.NotContains(t, page, "<th>tenant</th>", "no tenants: no tenant column")
	assert.NotContains(t, page, "<script>alert(1)</script>", "ids are escaped")
	assert.NotContains(t, page, "inv-young", "only page_rows rows per table, oldest first")
	assert.Less(t, strings.Index(page, `data-invocation-id="inv-inc"`), strings.Index(page, `data-invocation-id="inv-final"`),
		"the most recently closed first")

	code, body = get(t, srv, "/?fragment=1")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(body), `data-invocation-id="inv-job"`)
	assert.NotContains(t, string(body), "<html", "the refresh fetches the tables only")
	assert.NotContains(t, string(body), "<script")

	code, _ = get(t, srv, "/index.html")
	assert.Equal(t, http.StatusNotFound, code)
}

func TestPageWithoutJaegerHasNoLinks(t *testing.T) {
	e := newTestExtension(t, nil)
	srv := serve(t, e)
	e.PublishInvocations([]statusapi.Invocation{closedView("inv-final", "s1", statusapi.StatusFinal, 1, time.Hour)})
	_, body := get(t, srv, "/")
	assert.Contains(t, string(body), `data-invocation-id="inv-final"`)
	assert.NotContains(t, string(body), "/trace/")
	assert.Contains(t, string(body), "No open invocation.")
	// A collector without tenants and without a Jaeger UI shows neither
	// column (the page fits 1400 px).
	assert.NotContains(t, string(body), "<th>tenant</th>")
	assert.NotContains(t, string(body), "<th>traces</th>")
}
