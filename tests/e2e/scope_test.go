package e2e

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
	"github.com/agentledger/agentledger/internal/testbin"
)

// basicAuthTransport adds a basic auth header to every request.
type basicAuthTransport struct {
	header string
	next   http.RoundTripper
}

func (b basicAuthTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", b.header)
	return b.next.RoundTrip(r)
}

// scopedStatusClient asks the status API as an authenticated user.
func scopedStatusClient(t *testing.T, addr, authorization string, opts ...statusapi.Option) *statusapi.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := statusapi.NewClient([]string{"http://" + addr},
		append(opts, statusapi.WithHTTPClient(&http.Client{Transport: basicAuthTransport{authorization, tr}, Timeout: 10 * time.Second}))...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestStatusScopedByTenant runs shared.yaml with the status API behind the
// same basicauth as the receivers and scoped by tenant: alice and bob each
// have an invocation of session "session-1" waiting on a job; alice sees
// hers and owes_work of her session, and cannot read bob's invocation or
// session by id, by ?tenant= or by listing; the operator sees both; a
// request without credentials is refused.
func TestStatusScopedByTenant(t *testing.T) {
	bin := collectorBin(t)
	dir := t.TempDir()
	addrs, err := testbin.NewCollectorAddrs(dir)
	if err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(dir, "scoped.yaml")
	if err := os.WriteFile(overlay, []byte(`extensions:
  invocation_status:
    auth:
      authenticator: basicauth/tenants
    tenant:
      attribute: username
      operators: [ops]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	passwords := map[string]string{"alice": "alice-secret", "bob": "bob-secret", "ops": "ops-secret"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitBudget)
	defer cancel()
	p, err := testbin.StartCollectorConfigs(ctx, bin,
		[]string{repoPath(t, "collector-config", "local.yaml"), repoPath(t, "collector-config", sharedConfig), overlay},
		addrs, filepath.Join(dir, "collector.log"),
		"AGENTLEDGER_HTPASSWD_FILE="+htpasswdFile(t, passwords), "AGENTLEDGER_COLLECTOR_NAME="+e2eCollector,
		"AGENTLEDGER_DEBUG_VERBOSITY=basic")
	if p != nil {
		t.Cleanup(func() { stopAndReport(t, p) })
	}
	if err != nil {
		t.Fatal(err)
	}
	alice, bob := basicAuth("alice", passwords["alice"]), basicAuth("bob", passwords["bob"])
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	root, chat1, tool, job, _, _ := backgroundInvocation(0x20)
	if err := exportGRPC(t, addrs.OTLPGRPC, alice, batch(t0, "alice-inv", root, chat1, tool, job)); err != nil {
		t.Fatal(err)
	}
	root, chat1, tool, job, _, _ = backgroundInvocation(0x30)
	if err := exportGRPC(t, addrs.OTLPGRPC, bob, batch(t0, "bob-inv", root, chat1, tool, job)); err != nil {
		t.Fatal(err)
	}

	asAlice := scopedStatusClient(t, addrs.Status, alice)
	waitInvocation(t, asAlice, "alice-inv", "waiting on her job", func(i statusapi.Invocation) bool {
		return i.Waiting != nil && len(i.Waiting.ExpectedFollowups) == 1
	})
	// The operator is unscoped: it names the tenant, as without scoping.
	opsAuth := basicAuth("ops", passwords["ops"])
	waitInvocation(t, scopedStatusClient(t, addrs.Status, opsAuth, statusapi.WithTenant("bob")), "bob-inv", "known to the operator", func(i statusapi.Invocation) bool { return i.Tenant == "bob" })

	if owes, err := asAlice.OwesWork(ctx, "session-1"); err != nil || !owes {
		t.Errorf("alice's session-1 owes work = %v, %v; want true", owes, err)
	}
	if _, err := asAlice.Invocation(ctx, "bob-inv"); !errors.Is(err, statusapi.ErrNotFound) {
		t.Errorf("alice reading bob's invocation by id: %v, want not found", err)
	}
	list, err := asAlice.List(ctx, statusapi.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if list.Total != 1 || list.Invocations[0].ID != "alice-inv" {
		t.Errorf("alice's list = %+v, want her invocation only", list)
	}
	for _, path := range []string{"/v1/invocations/bob-inv?tenant=bob", "/v1/sessions/session-1?tenant=bob", "/v1/invocations?tenant=bob"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addrs.Status+path, nil)
		req.Header.Set("Authorization", alice)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("alice GET %s: %d, want 403", path, resp.StatusCode)
		}
	}
	resp, err := http.Get("http://" + addrs.Status + "/v1/invocations")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("without credentials: %d, want 401", resp.StatusCode)
	}
	all, err := scopedStatusClient(t, addrs.Status, opsAuth).List(ctx, statusapi.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var tenants []string
	for _, inv := range all.Invocations {
		tenants = append(tenants, inv.Tenant)
	}
	if all.Total != 2 || !strings.Contains(strings.Join(tenants, ","), "alice") || !strings.Contains(strings.Join(tenants, ","), "bob") {
		t.Errorf("the operator's list = %v, want both tenants' invocations", tenants)
	}
}
