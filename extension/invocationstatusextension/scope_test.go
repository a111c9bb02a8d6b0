package invocationstatusextension

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/config/configoptional"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
)

// userAuth is what basicauth puts in client.Info: the user name.
type userAuth string

func (u userAuth) GetAttribute(name string) any {
	if name == "username" {
		return string(u)
	}
	return nil
}

func (userAuth) GetAttributeNames() []string { return []string{"username"} }

// serveAs runs the handler behind a stand-in for confighttp's auth
// interceptor: the X-Test-User header names the authenticated caller.
func serveAs(t *testing.T, e *statusExtension) *httptest.Server {
	t.Helper()
	h := e.handler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u := r.Header.Get("X-Test-User"); u != "" {
			r = r.WithContext(client.NewContext(r.Context(), client.Info{Auth: userAuth(u)}))
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func getAs(t *testing.T, srv *httptest.Server, user, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	require.NoError(t, err)
	if user != "" {
		req.Header.Set("X-Test-User", user)
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

func scoped(c *Config) {
	c.ServerConfig.Auth = configoptional.Some(confighttp.AuthConfig{})
	c.Tenant = &TenantScopeConfig{Attribute: "username", Operators: []string{"ops"}}
}

// With tenant scoping, tenant A reads its own invocations and sessions and
// none of B's, by id, by session or by listing; an operator sees both.
func TestTenantScoping(t *testing.T) {
	e := newTestExtension(t, scoped)
	srv := serveAs(t, e)
	a := openView("inv-1", "s1", time.Minute, jobWaiting("background shell", t0.Add(-time.Minute)))
	a.Tenant = "alice"
	b := openView("inv-b", "s-bob", time.Minute, jobWaiting("background shell", t0.Add(-time.Minute)))
	b.Tenant = "bob"
	bSame := openView("inv-1", "s1", time.Minute, childWaiting("x"))
	bSame.Tenant = "bob"
	closedB := closedView("inv-closed-b", "s-bob", statusapi.StatusFinal, 1, time.Hour)
	closedB.Tenant = "bob"
	e.PublishInvocations([]statusapi.Invocation{a, b, bSame, closedB})

	code, body := getAs(t, srv, "alice", "/v1/invocations/inv-1")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `"tenant": "alice"`)
	for _, path := range []string{
		"/v1/invocations/inv-b?tenant=bob", "/v1/invocations/inv-1?tenant=bob",
		"/v1/sessions/s-bob?tenant=bob", "/v1/invocations?tenant=bob", "/v1/invocations?tenant=",
	} {
		code, body := getAs(t, srv, "alice", path)
		assert.Equal(t, http.StatusForbidden, code, path)
		assert.NotContains(t, body, "inv-b", path)
	}
	code, _ = getAs(t, srv, "alice", "/v1/invocations/inv-b")
	assert.Equal(t, http.StatusNotFound, code, "an id of another tenant is not alice's")
	code, _ = getAs(t, srv, "alice", "/v1/sessions/s-bob")
	assert.Equal(t, http.StatusNotFound, code)
	code, body = getAs(t, srv, "alice", "/v1/sessions/s1")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `"owes_work": true`)
	assert.NotContains(t, body, `"tenant": "bob"`)
	for _, path := range []string{"/v1/invocations", "/v1/invocations?status=pending", "/", "/?fragment=1"} {
		code, body := getAs(t, srv, "alice", path)
		assert.Equal(t, http.StatusOK, code, path)
		assert.NotContains(t, body, "bob", path)
		assert.NotContains(t, body, "inv-b", path)
		assert.Contains(t, body, "inv-1", path)
	}

	code, body = getAs(t, srv, "ops", "/v1/invocations")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `"total": 4`)
	code, _ = getAs(t, srv, "ops", "/v1/invocations/inv-b?tenant=bob")
	assert.Equal(t, http.StatusOK, code)
	code, body = getAs(t, srv, "ops", "/")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, "inv-closed-b")

	code, _ = getAs(t, srv, "", "/v1/invocations")
	assert.Equal(t, http.StatusForbidden, code, "a caller without a tenant")
}

func TestTenantScopingNeedsAuth(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.Tenant = &TenantScopeConfig{}
	err := cfg.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "tenant::attribute must not be empty")
	assert.Contains(t, err.Error(), "tenant needs auth")
}
