package invocationstatusextension

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/extension/bearertokenauthextension"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configauth"
	"go.opentelemetry.io/collector/config/confighttp"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/extension/extensiontest"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
)

type testHost struct {
	component.Host
	exts map[component.ID]component.Component
}

func (h testHost) GetExtensions() map[component.ID]component.Component { return h.exts }

// startExtension starts an extension on a free loopback port with host's
// extensions and returns its base URL; it is shut down when the test ends.
func startExtension(t *testing.T, e *statusExtension, exts map[component.ID]component.Component) string {
	t.Helper()
	require.NoError(t, e.Start(context.Background(), testHost{Host: componenttest.NewNopHost(), exts: exts}))
	t.Cleanup(func() { require.NoError(t, e.Shutdown(context.Background())) })
	return "http://" + e.Addr().String()
}

// testClient returns a statusapi client whose idle connections are closed
// when the test ends (goleak).
func testClient(t *testing.T, urls []string, opts ...statusapi.Option) *statusapi.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := statusapi.NewClient(urls, append(opts, statusapi.WithHTTPClient(&http.Client{Transport: tr, Timeout: 10 * time.Second}))...)
	require.NoError(t, err)
	return c
}

// TestClientFansOutOverBackends runs two extensions as the backends of a
// load-balanced tier: each knows the invocations routed to it, and the
// client combines them.
func TestClientFansOutOverBackends(t *testing.T) {
	ctx := context.Background()
	b1, b2 := newTestExtension(t, nil), newTestExtension(t, nil)
	u1, u2 := startExtension(t, b1, nil), startExtension(t, b2, nil)
	b1.PublishInvocations([]statusapi.Invocation{
		openView("inv-job", "s1", 9*time.Minute, jobWaiting("background shell", t0.Add(-8*time.Minute))),
		closedView("inv-old", "s1", statusapi.StatusFinal, 1, time.Hour),
	})
	b2.PublishInvocations([]statusapi.Invocation{
		openView("inv-run", "s1", 2*time.Minute, childWaiting("execute_tool shell")),
		closedView("inv-done", "s2", statusapi.StatusFinal, 1, time.Hour),
	})
	c := testClient(t, []string{u1, u2 + "/"})

	w, err := c.Waiting(ctx, "inv-run")
	require.NoError(t, err)
	assert.Equal(t, []statusapi.MissingChildren{{Parent: "execute_tool shell", Missing: 1, Parents: 1}}, w.MissingChildren)
	w, err = c.Waiting(ctx, "inv-done")
	require.NoError(t, err)
	assert.Zero(t, w, "a closed invocation waits on nothing")
	_, err = c.Waiting(ctx, "inv-nope")
	assert.ErrorIs(t, err, statusapi.ErrNotFound)

	s, err := c.Session(ctx, "s1")
	require.NoError(t, err)
	assert.True(t, s.OwesWork)
	assert.Equal(t, []string{"inv-job", "inv-run"}, ids(s.OpenInvocations), "merged, oldest first")
	require.Len(t, s.Jobs, 1)
	assert.InDelta(t, 480.0, s.Jobs[0].AgeSeconds, 1e-9)
	assert.ElementsMatch(t, []string{"inv-old"}, s.ClosedInvocations)

	owes, err := c.OwesWork(ctx, "s1")
	require.NoError(t, err)
	assert.True(t, owes)
	owes, err = c.OwesWork(ctx, "s2")
	require.NoError(t, err)
	assert.False(t, owes, "only closed invocations")
	owes, err = c.OwesWork(ctx, "never-seen")
	require.ErrorIs(t, err, statusapi.ErrNotFound)
	assert.True(t, owes, "a session no backend knows is unknown: it fails closed")

	// Backend 1's job reply arrives; backend 2's turn finishes exporting.
	b1.PublishInvocations([]statusapi.Invocation{closedView("inv-job", "s1", statusapi.StatusFinal, 1, 9*time.Minute)})
	b2.PublishInvocations([]statusapi.Invocation{closedView("inv-run", "s1", statusapi.StatusFinal, 1, 2*time.Minute)})
	owes, err = c.OwesWork(ctx, "s1")
	require.NoError(t, err)
	assert.False(t, owes)

	l, err := c.List(ctx, statusapi.ListOptions{Status: statusapi.StatusFinal})
	require.NoError(t, err)
	assert.Equal(t, 4, l.Total)
	assert.Equal(t, []string{"inv-done", "inv-old", "inv-job", "inv-run"}, ids(l.Invocations), "merged, oldest first")
	_, err = c.List(ctx, statusapi.ListOptions{PageToken: "x"})
	assert.ErrorContains(t, err, "single collector")
	_, err = c.List(ctx, statusapi.ListOptions{OlderThan: time.Minute, Status: "open"})
	assert.ErrorContains(t, err, "400")

	// A backend that cannot be asked is an error, never "owes nothing".
	require.NoError(t, b2.Shutdown(ctx))
	_, err = c.OwesWork(ctx, "s1")
	assert.Error(t, err)
}

func TestClientRejectsBadURLs(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:55690", "ftp://x", "http://"} {
		_, err := statusapi.NewClient([]string{u})
		assert.Error(t, err, u)
	}
	_, err := statusapi.NewClient(nil)
	assert.Error(t, err)
}

// TestBearerTokenAuth serves the API behind contrib's bearertokenauth
// extension: without the token a request gets 401 and no data.
func TestBearerTokenAuth(t *testing.T) {
	ctx := context.Background()
	authID := component.MustNewID("bearertokenauth")
	authFactory := bearertokenauthextension.NewFactory()
	authCfg := authFactory.CreateDefaultConfig().(*bearertokenauthextension.Config)
	authCfg.BearerToken = configopaque.String("s3cret")
	auth, err := authFactory.Create(ctx, extensiontest.NewNopSettings(authFactory.Type()), authCfg)
	require.NoError(t, err)
	exts := map[component.ID]component.Component{authID: auth}
	host := testHost{Host: componenttest.NewNopHost(), exts: exts}
	require.NoError(t, auth.Start(ctx, host))
	t.Cleanup(func() { require.NoError(t, auth.Shutdown(ctx)) })

	e := newTestExtension(t, func(c *Config) {
		c.ServerConfig.Auth = configoptional.Some(confighttp.AuthConfig{Config: configauth.Config{AuthenticatorID: authID}})
	})
	base := startExtension(t, e, exts)
	e.PublishInvocations([]statusapi.Invocation{openView("inv-secret", "s1", time.Minute, childWaiting("execute_tool shell"))})

	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	fetch := func(path, authz string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		require.NoError(t, err)
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		resp, err := hc.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	for _, path := range []string{"/v1/invocations/inv-secret", "/v1/sessions/s1", "/v1/invocations", "/"} {
		for _, authz := range []string{"", "Bearer wrong", "s3cret"} {
			code, body := fetch(path, authz)
			assert.Equal(t, http.StatusUnauthorized, code, "%s with %q", path, authz)
			assert.NotContains(t, body, "inv-secret", "%s with %q", path, authz)
		}
		code, body := fetch(path, "Bearer s3cret")
		assert.Equal(t, http.StatusOK, code, path)
		assert.Contains(t, body, "inv-secret", path)
	}

	_, err = testClient(t, []string{base}).OwesWork(ctx, "s1")
	assert.ErrorContains(t, err, "401")
	assert.False(t, errors.Is(err, statusapi.ErrNotFound))
	owes, err := testClient(t, []string{base}, statusapi.WithBearerToken("s3cret")).OwesWork(ctx, "s1")
	require.NoError(t, err)
	assert.True(t, owes)
}

// TestClientWithTenant: a client for one tenant sees that tenant's
// invocations and sessions only, over every backend.
func TestClientWithTenant(t *testing.T) {
	ctx := context.Background()
	b1, b2 := newTestExtension(t, nil), newTestExtension(t, nil)
	u1, u2 := startExtension(t, b1, nil), startExtension(t, b2, nil)
	alice := openView("inv-1", "s1", time.Minute, jobWaiting("background shell", t0.Add(-time.Minute)))
	alice.Tenant = "alice"
	bob := closedView("inv-1", "s1", statusapi.StatusFinal, 1, time.Minute)
	bob.Tenant = "bob"
	b1.PublishInvocations([]statusapi.Invocation{alice})
	b2.PublishInvocations([]statusapi.Invocation{bob})

	for _, tc := range []struct {
		tenant string
		status statusapi.Status
		owes   bool
	}{{"alice", statusapi.StatusPending, true}, {"bob", statusapi.StatusFinal, false}} {
		c := testClient(t, []string{u1, u2}, statusapi.WithTenant(tc.tenant))
		inv, err := c.Invocation(ctx, "inv-1")
		require.NoError(t, err, tc.tenant)
		assert.Equal(t, tc.status, inv.Status, tc.tenant)
		assert.Equal(t, tc.tenant, inv.Tenant)
		owes, err := c.OwesWork(ctx, "s1")
		require.NoError(t, err)
		assert.Equal(t, tc.owes, owes, tc.tenant)
		l, err := c.List(ctx, statusapi.ListOptions{})
		require.NoError(t, err)
		assert.Equal(t, 1, l.Total, tc.tenant)
	}
	_, err := testClient(t, []string{u1, u2}).Invocation(ctx, "inv-1")
	require.ErrorIs(t, err, statusapi.ErrNotFound, "no tenant: neither")
}

// TestClientWatch watches a session over two backends: the first call
// answers at once with a token, the next waits until either backend
// changes, and a wait that passes returns the same token.
func TestClientWatch(t *testing.T) {
	ctx := context.Background()
	timers := newFakeTimers()
	backend := func() (*statusExtension, string) {
		e := newTestExtension(t, nil)
		e.timer = timers.start
		return e, startExtension(t, e, nil)
	}
	b1, u1 := backend()
	b2, u2 := backend()
	b1.PublishInvocations([]statusapi.Invocation{settlingView("inv-1", "s1")})
	b2.PublishInvocations([]statusapi.Invocation{settlingView("inv-0", "s1")})
	c := testClient(t, []string{u1, u2})

	s, token, err := c.Watch(ctx, "s1", "", 30*time.Second)
	require.NoError(t, err)
	assert.False(t, s.OwesWork)
	assert.ElementsMatch(t, []string{"inv-0", "inv-1"}, ids(s.OpenInvocations))
	assert.Regexp(t, `^[1-9][0-9]*,[1-9][0-9]*$`, token, "a version per backend")
	assert.Zero(t, timers.started(), "answered at once")

	type result struct {
		s     statusapi.Session
		token string
		err   error
	}
	watch := func(after string) <-chan result {
		out := make(chan result, 1)
		go func() {
			s, tok, err := c.Watch(ctx, "s1", after, 30*time.Second)
			out <- result{s, tok, err}
		}()
		for range 2 {
			select {
			case <-timers.waiting:
			case <-time.After(10 * time.Second):
				t.Fatal("the watch did not wait on both backends")
			}
		}
		return out
	}
	ch := watch(token)
	b2.PublishInvocations([]statusapi.Invocation{openView("inv-2", "s1", time.Second, jobWaiting("background shell", t0))})
	var r result
	select {
	case r = <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no answer")
	}
	require.NoError(t, r.err)
	assert.True(t, r.s.OwesWork)
	assert.ElementsMatch(t, []string{"inv-0", "inv-1", "inv-2"}, ids(r.s.OpenInvocations))
	assert.NotEqual(t, token, r.token)

	// Nothing changes: both waits pass, the token stays.
	n := timers.started()
	ch = watch(r.token)
	timers.fire(t, n)
	timers.fire(t, n+1)
	r2 := <-ch
	require.NoError(t, r2.err)
	assert.Equal(t, r.token, r2.token)
	assert.True(t, r2.s.OwesWork)

	_, _, err = c.Watch(ctx, "s1", "3", time.Second)
	assert.ErrorContains(t, err, "has 1 versions for 2 collectors")
	_, _, err = c.Watch(ctx, "s1", "a,b", time.Second)
	assert.ErrorContains(t, err, "is not a version")
}
