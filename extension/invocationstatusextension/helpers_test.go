package invocationstatusextension

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
)

// t0 is the fixed "now" of the tests' clock.
var t0 = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)

// newTestExtension returns an extension (not started) whose clock is t0,
// with mod applied to the default config.
func newTestExtension(t *testing.T, mod func(*Config)) *statusExtension {
	t.Helper()
	cfg := createDefaultConfig().(*Config)
	cfg.ServerConfig.NetAddr.Endpoint = "127.0.0.1:0"
	if mod != nil {
		mod(cfg)
	}
	e, err := newExtension(cfg, componenttest.NewNopTelemetrySettings(), func() time.Time { return t0 })
	require.NoError(t, err)
	return e
}

// serve runs the extension's handler on an httptest server.
func serve(t *testing.T, e *statusExtension) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(e.handler())
	t.Cleanup(srv.Close)
	return srv
}

// get fetches path and returns the status code and body.
func get(t *testing.T, srv *httptest.Server, path string) (int, []byte) {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, body
}

// getJSON fetches path, requires 200 and decodes the body into v.
func getJSON(t *testing.T, srv *httptest.Server, path string, v any) {
	t.Helper()
	code, body := get(t, srv, path)
	require.Equal(t, http.StatusOK, code, "GET %s: %s", path, body)
	require.NoError(t, json.Unmarshal(body, v), "GET %s: %s", path, body)
}

// openView is an open invocation of session that started ago before t0
// and waits on the given things.
func openView(id, session string, ago time.Duration, w statusapi.Waiting) statusapi.Invocation {
	resultAt := t0.Add(-ago + time.Second)
	return statusapi.Invocation{
		ID: id, Session: session, Agent: "coder", Service: "agent", Status: statusapi.StatusPending,
		Started: t0.Add(-ago), ResultAt: &resultAt,
		Usage:    statusapi.Usage{InputTokens: 100, OutputTokens: 10},
		TraceIDs: []string{fmt.Sprintf("%032x", len(id))},
		Waiting:  &w,
	}
}

// closedView is a closed invocation.
func closedView(id, session string, status statusapi.Status, revision int64, ago time.Duration) statusapi.Invocation {
	closedAt := t0
	return statusapi.Invocation{
		ID: id, Session: session, Agent: "coder", Service: "agent", Status: status, Revision: revision,
		Started: t0.Add(-ago), ClosedAt: &closedAt,
		Usage:       statusapi.Usage{InputTokens: 150, OutputTokens: 15},
		AfterResult: statusapi.AfterResult{InputTokens: 50, OutputTokens: 5},
		TraceIDs:    []string{"0000000000000000000000000000000a", "0000000000000000000000000000000b"},
	}
}

func jobWaiting(job string, started time.Time) statusapi.Waiting {
	return statusapi.Waiting{
		ExpectedFollowups: []statusapi.ExpectedFollowup{{Job: job, SpanID: "0000000000000004", Started: started, Ended: started.Add(time.Second), Missing: 1}},
		OpenTimeoutAt:     t0.Add(4 * time.Hour),
	}
}

func childWaiting(parent string) statusapi.Waiting {
	return statusapi.Waiting{
		MissingChildren: []statusapi.MissingChildren{{Parent: parent, Missing: 1, Parents: 1}},
		OpenTimeoutAt:   t0.Add(4 * time.Hour),
	}
}

func urlPathEscape(s string) string  { return url.PathEscape(s) }
func urlQueryEscape(s string) string { return url.QueryEscape(s) }
