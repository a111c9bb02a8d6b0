package invocationstatusextension

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
)

func TestInvocationByID(t *testing.T) {
	e := newTestExtension(t, nil)
	srv := serve(t, e)
	e.PublishInvocations([]statusapi.Invocation{openView("inv-1", "s1", 5*time.Minute, jobWaiting("background shell", t0.Add(-3*time.Minute)))})

	var got statusapi.Invocation
	getJSON(t, srv, "/v1/invocations/inv-1", &got)
	assert.Equal(t, statusapi.StatusPending, got.Status)
	assert.Equal(t, "s1", got.Session)
	require.NotNil(t, got.Waiting)
	require.Len(t, got.Waiting.ExpectedFollowups, 1)
	f := got.Waiting.ExpectedFollowups[0]
	assert.Equal(t, "background shell", f.Job)
	assert.Equal(t, t0.Add(-3*time.Minute), f.Started)
	assert.InDelta(t, 180.0, f.AgeSeconds, 1e-9, "age at the time of the answer")
	assert.Equal(t, t0.Add(4*time.Hour), got.Waiting.OpenTimeoutAt)

	// The stored view is not touched by answering.
	stored, _ := e.store.get("", "inv-1")
	assert.Zero(t, stored.Waiting.ExpectedFollowups[0].AgeSeconds)

	// Closed: final, nothing waited on.
	e.PublishInvocations([]statusapi.Invocation{closedView("inv-1", "s1", statusapi.StatusFinal, 1, 5*time.Minute)})
	got = statusapi.Invocation{}
	getJSON(t, srv, "/v1/invocations/inv-1", &got)
	assert.Equal(t, statusapi.StatusFinal, got.Status)
	assert.Nil(t, got.Waiting)
	assert.Equal(t, statusapi.AfterResult{InputTokens: 50, OutputTokens: 5}, got.AfterResult)

	code, body := get(t, srv, "/v1/invocations/nope")
	assert.Equal(t, http.StatusNotFound, code)
	assert.Contains(t, string(body), `"error"`)
	assert.Contains(t, string(body), "nope")
	code, _ = get(t, srv, "/v1/invocations/inv-1?verbose=1")
	assert.Equal(t, http.StatusBadRequest, code)
}

func TestSessionOwesWork(t *testing.T) {
	e := newTestExtension(t, nil)
	srv := serve(t, e)
	e.PublishInvocations([]statusapi.Invocation{
		openView("inv-run", "s1", 2*time.Minute, childWaiting("execute_tool shell")),
		openView("inv-job", "s1", 9*time.Minute, jobWaiting("background shell", t0.Add(-8*time.Minute))),
		closedView("inv-done", "s1", statusapi.StatusFinal, 1, 20*time.Minute),
		openView("inv-other", "s2", time.Minute, childWaiting("x")),
	})

	var s statusapi.Session
	getJSON(t, srv, "/v1/sessions/s1", &s)
	assert.True(t, s.OwesWork)
	assert.Equal(t, []string{"inv-job", "inv-run"}, ids(s.OpenInvocations), "oldest first")
	require.Len(t, s.Jobs, 1)
	assert.Equal(t, "inv-job", s.Jobs[0].InvocationID)
	assert.InDelta(t, 480.0, s.Jobs[0].AgeSeconds, 1e-9)
	assert.Equal(t, []string{"inv-done"}, s.ClosedInvocations)

	// The job's followup arrives (the invocation closes); the running one
	// is only settling a remote subtree: nothing owed.
	settling := openView("inv-run", "s1", 2*time.Minute, statusapi.Waiting{
		RemoteSettling: &statusapi.RemoteSettling{Spans: []string{"background shell"}, Until: t0.Add(time.Second)},
		OpenTimeoutAt:  t0.Add(4 * time.Hour),
	})
	e.PublishInvocations([]statusapi.Invocation{closedView("inv-job", "s1", statusapi.StatusFinal, 1, 9*time.Minute), settling})
	getJSON(t, srv, "/v1/sessions/s1", &s)
	assert.False(t, s.OwesWork)
	assert.Empty(t, s.Jobs)
	assert.Equal(t, []string{"inv-run"}, ids(s.OpenInvocations))
	assert.ElementsMatch(t, []string{"inv-done", "inv-job"}, s.ClosedInvocations)

	code, body := get(t, srv, "/v1/sessions/unknown")
	assert.Equal(t, http.StatusNotFound, code, "%s", body)
	code, _ = get(t, srv, "/v1/sessions/s1?x=1")
	assert.Equal(t, http.StatusBadRequest, code)
}

func TestListFilters(t *testing.T) {
	e := newTestExtension(t, nil)
	srv := serve(t, e)
	e.PublishInvocations([]statusapi.Invocation{
		openView("old", "s1", 30*time.Minute, childWaiting("a")),
		openView("edge", "s1", 10*time.Minute, childWaiting("a")),
		openView("young", "s2", 9*time.Minute, childWaiting("a")),
		closedView("closed-old", "s1", statusapi.StatusIncomplete, 1, time.Hour),
		closedView("closed-final", "s2", statusapi.StatusFinal, 1, time.Minute),
	})
	for _, tt := range []struct {
		query string
		want  []string
	}{
		{"", []string{"closed-old", "old", "edge", "young", "closed-final"}},
		{"?status=pending", []string{"old", "edge", "young"}},
		{"?status=pending&older_than=10m", []string{"old", "edge"}},
		{"?older_than=10m", []string{"closed-old", "old", "edge"}},
		{"?status=incomplete", []string{"closed-old"}},
		{"?status=final", []string{"closed-final"}},
		{"?session=s2", []string{"young", "closed-final"}},
		{"?session=s1&status=pending&older_than=20m", []string{"old"}},
		{"?session=nobody", []string{}},
	} {
		t.Run(tt.query, func(t *testing.T) {
			var l statusapi.InvocationList
			getJSON(t, srv, "/v1/invocations"+tt.query, &l)
			assert.Equal(t, tt.want, ids(l.Invocations))
			assert.Equal(t, len(tt.want), l.Total)
			assert.Empty(t, l.NextPageToken)
		})
	}
}

func TestBadInput(t *testing.T) {
	e := newTestExtension(t, nil)
	srv := serve(t, e)
	e.PublishInvocations([]statusapi.Invocation{openView("inv-1", "s1", time.Minute, childWaiting("a"))})
	for _, tt := range []struct {
		path string
		code int
		msg  string
	}{
		{"/v1/invocations?status=open", 400, "status must be pending, final or incomplete"},
		{"/v1/invocations?status=", 400, "status must be"},
		{"/v1/invocations?older_than=ten", 400, "older_than"},
		{"/v1/invocations?older_than=-5m", 400, "older_than"},
		{"/v1/invocations?older_than=10", 400, "older_than"},
		{"/v1/invocations?limit=0", 400, "limit must be an integer from 1 to 1000"},
		{"/v1/invocations?limit=1001", 400, "limit"},
		{"/v1/invocations?limit=ten", 400, "limit"},
		{"/v1/invocations?limit=10&limit=20", 400, "given 2 times"},
		{"/v1/invocations?sort=age", 400, `unknown query parameter \"sort\"`},
		{"/v1/invocations?session=", 400, "session must not be empty"},
		{"/v1/invocations?page_token=%25%25", 400, "page_token"},
		{"/v1/invocations?page_token=" + url.QueryEscape("bm90LWEtdG9rZW4"), 400, "page_token"},
		{"/v1/invocations/unknown-id", 404, "unknown-id"},
		{"/v1/sessions/unknown-session", 404, "unknown-session"},
		{"/v1/nothing/here", 404, "no such API path"},
		{"/v1/invocations/other/extra", 404, "no such API path"},
		{"/?refresh=1", 400, "unknown query parameter"},
	} {
		t.Run(tt.path, func(t *testing.T) {
			code, body := get(t, srv, tt.path)
			assert.Equal(t, tt.code, code, "%s", body)
			assert.Contains(t, string(body), tt.msg)
			assert.NotContains(t, string(body), "inv-1", "an error carries no data")
		})
	}
	resp, err := srv.Client().Post(srv.URL+"/v1/invocations", "application/json", strings.NewReader("{}"))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
}

// TestListPaginatesManyOpen holds 2500 open invocations: a page never
// holds more than the limit, pages chain through next_page_token in order,
// and every invocation appears exactly once.
func TestListPaginatesManyOpen(t *testing.T) {
	e := newTestExtension(t, nil)
	srv := serve(t, e)
	const n = 2500
	views := make([]statusapi.Invocation, n)
	for i := range views {
		// Pairs share a start time, so the ID breaks ties across pages.
		views[i] = openView(fmt.Sprintf("inv-%04d", i), "s1", time.Duration(n-i/2)*time.Second, childWaiting("a"))
	}
	e.PublishInvocations(views)

	var first statusapi.InvocationList
	getJSON(t, srv, "/v1/invocations?status=pending", &first)
	assert.Len(t, first.Invocations, defaultPageSize, "the default page size")
	assert.Equal(t, n, first.Total)
	assert.NotEmpty(t, first.NextPageToken)

	var all []string
	token, pages := "", 0
	for {
		q := "/v1/invocations?status=pending&limit=1000"
		if token != "" {
			q += "&page_token=" + url.QueryEscape(token)
		}
		var l statusapi.InvocationList
		getJSON(t, srv, q, &l)
		pages++
		require.LessOrEqual(t, len(l.Invocations), maxPageSize)
		assert.Equal(t, n, l.Total)
		all = append(all, ids(l.Invocations)...)
		if l.NextPageToken == "" {
			break
		}
		token = l.NextPageToken
		require.Less(t, pages, 10, "pagination does not end")
	}
	assert.Equal(t, 3, pages)
	want := make([]string, n)
	for i := range want {
		want[i] = fmt.Sprintf("inv-%04d", i)
	}
	assert.Equal(t, want, all)

	// A token stays valid when its own invocation has closed meanwhile.
	var p1 statusapi.InvocationList
	getJSON(t, srv, "/v1/invocations?status=pending&limit=3", &p1)
	e.PublishInvocations([]statusapi.Invocation{closedView(p1.Invocations[2].ID, "s1", statusapi.StatusFinal, 1, time.Hour)})
	var p2 statusapi.InvocationList
	getJSON(t, srv, "/v1/invocations?status=pending&limit=3&page_token="+url.QueryEscape(p1.NextPageToken), &p2)
	assert.Equal(t, []string{"inv-0003", "inv-0004", "inv-0005"}, ids(p2.Invocations))
}

func TestClosedWindowIsBounded(t *testing.T) {
	e := newTestExtension(t, func(c *Config) { c.MaxClosed = 10 })
	srv := serve(t, e)
	for i := range 30 {
		e.PublishInvocations([]statusapi.Invocation{closedView(fmt.Sprintf("c%02d", i), fmt.Sprintf("s%02d", i), statusapi.StatusFinal, 1, time.Hour)})
	}
	// A revision of an old one makes it the most recent.
	e.PublishInvocations([]statusapi.Invocation{closedView("c25", "s25", statusapi.StatusFinal, 2, time.Hour)})
	e.PublishInvocations([]statusapi.Invocation{closedView("c30", "s30", statusapi.StatusFinal, 1, time.Hour)})

	open, closed := e.store.counts()
	assert.Zero(t, open)
	assert.Equal(t, 10, closed)
	for _, id := range []string{"c00", "c19", "c20"} {
		code, _ := get(t, srv, "/v1/invocations/"+id)
		assert.Equal(t, http.StatusNotFound, code, id)
	}
	for _, id := range []string{"c21", "c25", "c29", "c30"} {
		code, _ := get(t, srv, "/v1/invocations/"+id)
		assert.Equal(t, http.StatusOK, code, id)
	}
	code, _ := get(t, srv, "/v1/sessions/s00")
	assert.Equal(t, http.StatusNotFound, code, "a forgotten invocation leaves its session")
	recent, _ := e.store.recentlyClosed(3, filter{})
	assert.Equal(t, []string{"c30", "c25", "c29"}, ids(derefs(recent)))
	assert.LessOrEqual(t, len(e.store.closings), 2*10+64, "the closing order is compacted")
}

func TestStoreMovesBetweenOpenAndClosed(t *testing.T) {
	s := newStore(5, 1<<30, 10)
	s.publish([]statusapi.Invocation{openView("a", "s1", time.Minute, childWaiting("p"))})
	s.publish([]statusapi.Invocation{closedView("a", "s1", statusapi.StatusIncomplete, 1, time.Minute)})
	open, closed := s.counts()
	assert.Equal(t, 0, open)
	assert.Equal(t, 1, closed)
	// Forgotten by the processor and seen again: open again, one view.
	s.publish([]statusapi.Invocation{openView("a", "", time.Minute, childWaiting("p"))})
	open, closed = s.counts()
	assert.Equal(t, 1, open)
	assert.Equal(t, 0, closed)
	assert.Empty(t, s.sessions, "the session index follows the latest view")
	assert.Empty(t, s.list(filter{session: "s1"}))
}

func ids(vs []statusapi.Invocation) []string {
	out := []string{}
	for _, v := range vs {
		out = append(out, v.ID)
	}
	return out
}

func derefs(vs []*statusapi.Invocation) []statusapi.Invocation {
	out := make([]statusapi.Invocation, 0, len(vs))
	for _, v := range vs {
		out = append(out, *v)
	}
	return slices.Clip(out)
}

// TestTenantsApart: tenants that reuse an invocation ID and a session name
// get separate views; a tenant's closing view does not replace another's
// open one, and each path answers for the tenant asked (none: the views
// without a tenant).
func TestTenantsApart(t *testing.T) {
	e := newTestExtension(t, nil)
	srv := serve(t, e)
	of := func(v statusapi.Invocation, tenant string) statusapi.Invocation {
		v.Tenant = tenant
		return v
	}
	e.PublishInvocations([]statusapi.Invocation{
		of(openView("inv-1", "s1", time.Minute, childWaiting("a")), "alice"),
		of(openView("inv-1", "s1", time.Minute, childWaiting("a")), ""),
	})
	e.PublishInvocations([]statusapi.Invocation{of(closedView("inv-1", "s1", statusapi.StatusFinal, 1, time.Minute), "bob")})

	for _, tc := range []struct {
		query  string
		status statusapi.Status
		tenant string
	}{
		{"?tenant=alice", statusapi.StatusPending, "alice"},
		{"?tenant=bob", statusapi.StatusFinal, "bob"},
		{"", statusapi.StatusPending, ""},
		{"?tenant=", statusapi.StatusPending, ""},
	} {
		var v statusapi.Invocation
		getJSON(t, srv, "/v1/invocations/inv-1"+tc.query, &v)
		assert.Equal(t, tc.status, v.Status, tc.query)
		assert.Equal(t, tc.tenant, v.Tenant, tc.query)
	}
	code, body := get(t, srv, "/v1/invocations/inv-1?tenant=carol")
	assert.Equal(t, http.StatusNotFound, code, "%s", body)
	code, body = get(t, srv, "/v1/invocations/inv-1?tenant=alice&x=1")
	assert.Equal(t, http.StatusBadRequest, code, "%s", body)
	assert.NotContains(t, string(body), "pending", "an error carries no data")

	var s statusapi.Session
	getJSON(t, srv, "/v1/sessions/s1?tenant=bob", &s)
	assert.False(t, s.OwesWork)
	assert.Equal(t, []string{"inv-1"}, s.ClosedInvocations)
	assert.Empty(t, s.OpenInvocations)
	s = statusapi.Session{}
	getJSON(t, srv, "/v1/sessions/s1?tenant=alice", &s)
	assert.True(t, s.OwesWork, "bob's final invocation says nothing of alice's")
	require.Len(t, s.OpenInvocations, 1)
	assert.Equal(t, "alice", s.OpenInvocations[0].Tenant)
	code, _ = get(t, srv, "/v1/sessions/s1?tenant=carol")
	assert.Equal(t, http.StatusNotFound, code)

	var l statusapi.InvocationList
	getJSON(t, srv, "/v1/invocations?tenant=alice", &l)
	assert.Equal(t, 1, l.Total)
	l = statusapi.InvocationList{}
	getJSON(t, srv, "/v1/invocations?session=s1&tenant=bob", &l)
	require.Equal(t, 1, l.Total)
	assert.Equal(t, statusapi.StatusFinal, l.Invocations[0].Status)
	// All three share an ID and a start: pages of one still name each once.
	var tenants []string
	token := ""
	for range 4 {
		q := "/v1/invocations?limit=1"
		if token != "" {
			q += "&page_token=" + url.QueryEscape(token)
		}
		var page statusapi.InvocationList // fresh: omitted fields must not carry over
		getJSON(t, srv, q, &page)
		assert.Equal(t, 3, page.Total)
		for _, v := range page.Invocations {
			tenants = append(tenants, v.Tenant)
		}
		if token = page.NextPageToken; token == "" {
			break
		}
	}
	assert.Equal(t, []string{"", "alice", "bob"}, tenants)
}
