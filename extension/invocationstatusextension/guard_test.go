package invocationstatusextension

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
)

// getHost fetches path from srv with the Host header set to host.
func getHost(t *testing.T, url, host, path string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+path, nil)
	require.NoError(t, err)
	req.Host = host
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func TestHostCheck(t *testing.T) {
	e := newTestExtension(t, func(c *Config) { c.AllowedHosts = []string{"Status.Internal"} })
	srv := serve(t, e)
	e.PublishInvocations([]statusapi.Invocation{closedView("inv-1", "s1", statusapi.StatusFinal, 1, time.Hour)})
	for _, host := range []string{"127.0.0.1:55690", "localhost:55690", "LOCALHOST", "localhost.", "[::1]:55690", "10.1.2.3", "status.internal:80"} {
		resp := getHost(t, srv.URL, host, "/v1/invocations/inv-1")
		assert.Equal(t, http.StatusOK, resp.StatusCode, host)
	}
	for _, host := range []string{"evil.example", "evil.example:55690", "localhost.evil.example", "127.0.0.1.nip.io"} {
		resp := getHost(t, srv.URL, host, "/v1/invocations/inv-1")
		assert.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode, host)
		body, _ := io.ReadAll(resp.Body)
		assert.NotContains(t, string(body), "inv-1\"", "no data for a rebound name")
		assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	}

	open := newTestExtension(t, func(c *Config) { c.AllowedHosts = []string{anyHost} })
	assert.Equal(t, http.StatusOK, getHost(t, serve(t, open).URL, "evil.example", "/v1/invocations").StatusCode, `"*" turns the check off`)
}

func TestSecurityHeadersOnEveryAnswer(t *testing.T) {
	e := newTestExtension(t, nil)
	srv := serve(t, e)
	for _, path := range []string{"/", "/?fragment=1", "/v1/invocations", "/v1/invocations/nope", "/v1/nothing", "/nothing", "/?bad=1"} {
		resp, err := srv.Client().Get(srv.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		h := resp.Header
		assert.Equal(t, "nosniff", h.Get("X-Content-Type-Options"), path)
		assert.Equal(t, "DENY", h.Get("X-Frame-Options"), path)
		assert.Equal(t, "no-referrer", h.Get("Referrer-Policy"), path)
		assert.Contains(t, h.Get("Content-Security-Policy"), "frame-ancestors 'none'", path)
		assert.Contains(t, h.Get("Content-Security-Policy"), "default-src 'none'", path)
	}
	resp, err := srv.Client().Post(srv.URL+"/v1/invocations", "text/plain", nil)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
}

// The page's policy admits exactly its own inline script and style, as
// rendered, and its refresh from the same origin.
func TestPageCSPAdmitsItsOwnScript(t *testing.T) {
	e := newTestExtension(t, nil)
	srv := serve(t, e)
	resp, err := srv.Client().Get(srv.URL + "/")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	csp := resp.Header.Get("Content-Security-Policy")
	page := string(body)
	for _, el := range []struct{ open, close, directive string }{
		{"<script>", "</script>", "script-src"},
		{"<style>", "</style>", "style-src"},
	} {
		_, rest, ok := strings.Cut(page, el.open)
		require.True(t, ok)
		inline, _, ok := strings.Cut(rest, el.close)
		require.True(t, ok)
		sum := sha256.Sum256([]byte(inline))
		assert.Contains(t, csp, el.directive+" 'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
	}
	assert.Contains(t, csp, "connect-src 'self'")
	assert.NotContains(t, csp, "unsafe-inline")
}

// Every link of the page names the invocation's tenant, and the page
// shows it: two tenants' rows with the same id are told apart.
func TestPageTenantColumnAndLinks(t *testing.T) {
	e := newTestExtension(t, nil)
	srv := serve(t, e)
	a := closedView("inv-1", "s1", statusapi.StatusFinal, 1, time.Hour)
	a.Tenant = "team a&b"
	b := closedView("inv-1", "s1", statusapi.StatusIncomplete, 1, time.Hour)
	b.Tenant = "team-b"
	none := openView("inv/2", "s1", time.Minute, childWaiting("x"))
	e.PublishInvocations([]statusapi.Invocation{a, b, none})
	_, body := get(t, srv, "/")
	page := string(body)
	for _, want := range []string{
		`href="v1/invocations/inv-1?tenant=team&#43;a%26b"`,
		`href="v1/invocations/inv-1?tenant=team-b"`,
		`href="v1/invocations/inv%2F2"`,
		`data-tenant="team-b"`,
		`<td class="cut" title="team a&amp;b">team a&amp;b</td>`,
		"<th>tenant</th>",
	} {
		assert.Contains(t, page, want)
	}
	var got statusapi.Invocation
	getJSON(t, srv, "/v1/invocations/inv-1?tenant=team+a%26b", &got)
	assert.Equal(t, "team a&b", got.Tenant)
	getJSON(t, srv, "/v1/invocations/inv-1?tenant=team-b", &got)
	assert.Equal(t, statusapi.StatusIncomplete, got.Status)
}

// Closed views are bounded in bytes too: issue 23's evicted invocations
// with 1 MiB ids no longer stay as 1000 views.
func TestClosedViewsBoundedInBytes(t *testing.T) {
	s := newStore(1000, 4<<20, 10)
	big := strings.Repeat("i", 1<<20)
	for i := range 40 {
		v := closedView(big+string(rune('a'+i%26))+string(rune('a'+i/26)), "s", statusapi.StatusIncomplete, 1, time.Hour)
		s.publish([]statusapi.Invocation{v})
		assert.LessOrEqual(t, s.closedBytes, int64(4<<20))
	}
	_, closed := s.counts()
	assert.Equal(t, 1, closed, "one 2 MiB view fits in 4 MiB; the latest stays")
	small := closedView("small", "s", statusapi.StatusFinal, 1, time.Hour)
	s.publish([]statusapi.Invocation{small})
	_, closed = s.counts()
	assert.Equal(t, 2, closed)
	_, ok := s.get("", "small")
	assert.True(t, ok)
}

// A session longer than the ledger keeps cannot be answered; the client
// gets an error, not "owes no work".
func TestSessionLongerThanTheLedgerKeeps(t *testing.T) {
	e := newTestExtension(t, nil)
	e.LimitNames(256)
	e.LimitNames(1024) // a larger limit of another processor does not widen it
	srv := serve(t, e)
	long := strings.Repeat("s", 257)
	code, body := get(t, srv, "/v1/sessions/"+long)
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, string(body), "at most 256 bytes")
	code, _ = get(t, srv, "/v1/invocations?session="+long)
	assert.Equal(t, http.StatusBadRequest, code)

	c, err := statusapi.NewClient([]string{srv.URL})
	require.NoError(t, err)
	owes, err := c.OwesWork(context.Background(), long)
	require.Error(t, err)
	assert.NotErrorIs(t, err, statusapi.ErrNotFound)
	assert.True(t, owes, "an error fails closed")
	owes, err = c.OwesWork(context.Background(), strings.Repeat("s", 256))
	require.ErrorIs(t, err, statusapi.ErrNotFound)
	assert.True(t, owes, "unknown fails closed")
}

// TestSessionNamesAreExact: a session named like another session's cut
// name (issue 33, observation 6) is refused, never answered with the
// longer session's state; a name of that length that does not end in the
// cut mark, or a shorter one that does, is answered as itself.
func TestSessionNamesAreExact(t *testing.T) {
	e := newTestExtension(t, nil)
	e.LimitNames(32)
	srv := serve(t, e)
	// What the processor keeps of a 40-byte session: 29 bytes and "...".
	cut := strings.Repeat("a", 29) + "..."
	e.PublishInvocations([]statusapi.Invocation{openView("inv-long", cut, time.Minute, jobWaiting("background shell", t0))})
	for _, name := range []string{cut, strings.Repeat("a", 28) + "...", strings.Repeat("a", 26) + "é..."} {
		code, body := get(t, srv, "/v1/sessions/"+url.PathEscape(name))
		assert.Equal(t, http.StatusBadRequest, code, "%s: %s", name, body)
		assert.Contains(t, string(body), "looks cut")
		code, _ = get(t, srv, "/v1/invocations?session="+url.QueryEscape(name))
		assert.Equal(t, http.StatusBadRequest, code)
	}
	c, err := statusapi.NewClient([]string{srv.URL})
	require.NoError(t, err)
	owes, err := c.OwesWork(context.Background(), cut)
	require.Error(t, err)
	assert.True(t, owes)
	// Exact names are answered.
	e.PublishInvocations([]statusapi.Invocation{openView("inv-short", "b...", time.Minute, statusapi.Waiting{})})
	code, body := get(t, srv, "/v1/sessions/b...")
	assert.Equal(t, http.StatusOK, code, string(body))
	code, _ = get(t, srv, "/v1/sessions/"+strings.Repeat("a", 32))
	assert.Equal(t, http.StatusNotFound, code)
}
