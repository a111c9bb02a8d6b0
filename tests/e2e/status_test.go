package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
	"github.com/agentledger/agentledger/internal/testbin"
)

// statusClient returns a client for the collector's invocation_status
// extension whose idle connections close when the test ends.
func statusClient(t *testing.T, addr string, opts ...statusapi.Option) *statusapi.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := statusapi.NewClient([]string{"http://" + addr},
		append(opts, statusapi.WithHTTPClient(&http.Client{Transport: tr, Timeout: 10 * time.Second}))...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitInvocation polls the API until the invocation's view satisfies ok.
func waitInvocation(t *testing.T, c *statusapi.Client, id string, what string, ok func(statusapi.Invocation) bool) statusapi.Invocation {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	var last statusapi.Invocation
	err := testbin.Poll(ctx, 50*time.Millisecond, func() (bool, string, error) {
		inv, err := c.Invocation(ctx, id)
		if errors.Is(err, statusapi.ErrNotFound) {
			return false, "not known yet", nil
		}
		if err != nil {
			return false, "", err
		}
		last = inv
		return ok(inv), fmt.Sprintf("status %s, waiting %+v", inv.Status, inv.Waiting), nil
	})
	if err != nil {
		t.Fatalf("invocation %s never %s: %v", id, what, err)
	}
	return last
}

func owesWork(t *testing.T, c *statusapi.Client, session string) bool {
	t.Helper()
	owes, err := c.OwesWork(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	return owes
}

// TestStatusAPIFollowsBackgroundInvocation runs the distribution with
// local.yaml and asks its invocation_status API about an invocation as its
// spans arrive: while the job runs it waits on the tool's missing child and
// the session owes work; once the job ended it waits on the job's followup;
// after the continuation it is final with exact totals and the session owes
// nothing.
func TestStatusAPIFollowsBackgroundInvocation(t *testing.T) {
	bin := collectorBin(t)
	addrs, err := testbin.NewCollectorAddrs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	startCollector(t, bin, "local.yaml", addrs)
	c := statusClient(t, addrs.Status)
	ctx := context.Background()

	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	root, chat1, tool, job, cont, chat2 := backgroundInvocation(0x20)
	const id = "e2e-status"
	// A session the collector never saw is unknown: the client fails
	// closed (owes work, with ErrNotFound).
	if owes, err := c.OwesWork(ctx, "session-1"); !owes || !errors.Is(err, statusapi.ErrNotFound) {
		t.Fatalf("a session the collector never saw: owes %v, err %v; want true, ErrNotFound", owes, err)
	}

	// The caller has its result; the job runs (its span is not exported).
	exportOTLP(t, addrs.OTLPGRPC, batch(t0, id, root, chat1, tool))
	inv := waitInvocation(t, c, id, "pending with a missing child", func(i statusapi.Invocation) bool {
		return i.Status == statusapi.StatusPending && i.Waiting != nil && len(i.Waiting.MissingChildren) == 1
	})
	if got := inv.Waiting.MissingChildren[0]; got.Parent != "execute_tool shell" || got.Missing != 1 {
		t.Errorf("missing children = %+v, want 1 of execute_tool shell", inv.Waiting.MissingChildren)
	}
	if inv.Session != "session-1" || inv.Usage.InputTokens != 100 || inv.Usage.OutputTokens != 20 {
		t.Errorf("pending view: session %q usage %+v, want session-1 100/20", inv.Session, inv.Usage)
	}
	if !owesWork(t, c, "session-1") {
		t.Error("session-1 does not owe work while its job runs")
	}

	// The job ends: its notification is owed.
	exportOTLP(t, addrs.OTLPGRPC, batch(t0, id, job))
	inv = waitInvocation(t, c, id, "waiting on the job's followup", func(i statusapi.Invocation) bool {
		return i.Waiting != nil && len(i.Waiting.MissingChildren) == 0 && len(i.Waiting.ExpectedFollowups) == 1
	})
	f := inv.Waiting.ExpectedFollowups[0]
	if f.Job != "background shell" || f.SpanID != job.id.String() || !f.Started.Equal(t0.Add(job.start)) || f.Missing != 1 {
		t.Errorf("expected followup = %+v, want background shell %s started %v", f, job.id, t0.Add(job.start))
	}
	if f.AgeSeconds < 59 {
		t.Errorf("job age %v s, want about 60 (started a minute ago)", f.AgeSeconds)
	}
	s, err := c.Session(ctx, "session-1")
	if err != nil {
		t.Fatal(err)
	}
	if !s.OwesWork || len(s.Jobs) != 1 || s.Jobs[0].InvocationID != id || s.Jobs[0].Job != "background shell" {
		t.Errorf("session while the followup is owed = %+v", s)
	}
	pending, err := c.List(ctx, statusapi.ListOptions{Status: statusapi.StatusPending, OlderThan: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(pending.Invocations) != 1 || pending.Invocations[0].ID != id {
		t.Errorf("pending older than 30s = %+v, want only %s", pending.Invocations, id)
	}
	young, err := c.List(ctx, statusapi.ListOptions{Status: statusapi.StatusPending, OlderThan: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if young.Total != 0 {
		t.Errorf("pending older than 10m = %+v, want none (it started a minute ago)", young.Invocations)
	}

	// The continuation: final, with the late turn's usage.
	exportOTLP(t, addrs.OTLPGRPC, batch(t0, id, cont, chat2))
	inv = waitInvocation(t, c, id, "final", func(i statusapi.Invocation) bool { return i.Status == statusapi.StatusFinal })
	want := statusapi.Usage{InputTokens: 400, OutputTokens: 70, CacheReadInputTokens: 240, CacheCreationInputTokens: 10, ReasoningOutputTokens: 5}
	if inv.Usage != want || inv.AfterResult != (statusapi.AfterResult{InputTokens: 300, OutputTokens: 50}) ||
		inv.Revision != 1 || inv.Waiting != nil || len(inv.Reasons) != 0 || inv.Continuations != 1 {
		t.Errorf("final view = %+v", inv)
	}
	if len(inv.TraceIDs) != 2 || inv.TraceIDs[0] != root.trace.String() || inv.TraceIDs[1] != cont.trace.String() {
		t.Errorf("trace ids = %v, want root's then continuation's", inv.TraceIDs)
	}
	if owesWork(t, c, "session-1") {
		t.Error("session-1 still owes work after its only invocation is final")
	}
	w, err := c.Waiting(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if w.OwesWork() || len(w.ExpectedFollowups) != 0 {
		t.Errorf("a final invocation waits on %+v", w)
	}
}

// TestStatusAPIBadInputAndManyOpen checks the real server's answers to bad
// input and bounds a list of 1500 open invocations to pages of at most
// 1000.
func TestStatusAPIBadInputAndManyOpen(t *testing.T) {
	bin := collectorBin(t)
	addrs, err := testbin.NewCollectorAddrs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	startCollector(t, bin, "local.yaml", addrs, "AGENTLEDGER_DEBUG_VERBOSITY=basic")
	base := "http://" + addrs.Status

	const n = 1500
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var batches []ptrace.Traces
	for i := 0; i < n; i += 500 {
		td := ptrace.NewTraces()
		for j := i; j < i+500; j++ {
			// A root still waiting for its one child: open.
			root := handSpan{trace: traceID(byte(j)), id: spanID(byte(j)), name: "invoke_agent e2e",
				start: time.Duration(j) * time.Millisecond, end: time.Second, attrs: map[string]any{
					contract.AttrRole: contract.RoleRoot, contract.AttrChildren: 1,
					contract.AttrConversationID: "many",
				}}
			root.id[7] = byte(j >> 8)
			batch(t0, fmt.Sprintf("open-%04d", j), root).ResourceSpans().MoveAndAppendTo(td.ResourceSpans())
		}
		batches = append(batches, td)
	}
	exportOTLP(t, addrs.OTLPGRPC, batches...)
	c := statusClient(t, addrs.Status)
	ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	if err := testbin.Poll(ctx, 100*time.Millisecond, func() (bool, string, error) {
		l, err := c.List(ctx, statusapi.ListOptions{Status: statusapi.StatusPending, Limit: 1})
		if err != nil {
			return false, "", err
		}
		return l.Total == n, fmt.Sprintf("%d open", l.Total), nil
	}); err != nil {
		t.Fatal(err)
	}

	var seen []string
	token := ""
	for pages := 1; ; pages++ {
		l, err := c.List(ctx, statusapi.ListOptions{Status: statusapi.StatusPending, Limit: 1000, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Invocations) > 1000 {
			t.Fatalf("page of %d invocations, limit 1000", len(l.Invocations))
		}
		for _, inv := range l.Invocations {
			seen = append(seen, inv.ID)
		}
		if token = l.NextPageToken; token == "" {
			break
		}
		if pages == 5 {
			t.Fatal("pagination does not end")
		}
	}
	if len(seen) != n || seen[0] != "open-0000" || seen[n-1] != fmt.Sprintf("open-%04d", n-1) {
		t.Errorf("paged through %d invocations (first %v), want %d oldest first", len(seen), seen[:min(3, len(seen))], n)
	}
	l, err := c.List(ctx, statusapi.ListOptions{Status: statusapi.StatusPending})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Invocations) != 100 || l.Total != n || l.NextPageToken == "" {
		t.Errorf("default page: %d invocations, total %d, next %q; want 100 of %d", len(l.Invocations), l.Total, l.NextPageToken, n)
	}

	for _, tt := range []struct {
		path string
		code int
	}{
		{"/v1/invocations/no-such-invocation", http.StatusNotFound},
		{"/v1/sessions/no-such-session", http.StatusNotFound},
		{"/v1/invocations?status=open", http.StatusBadRequest},
		{"/v1/invocations?older_than=yesterday", http.StatusBadRequest},
		{"/v1/invocations?limit=1001", http.StatusBadRequest},
		{"/v1/invocations?limit=-1", http.StatusBadRequest},
		{"/v1/invocations?page_token=" + url.QueryEscape("!!"), http.StatusBadRequest},
		{"/v1/invocations?colour=red", http.StatusBadRequest},
		{"/v1/invocations/open-0001", http.StatusOK},
		{"/v1/sessions/many", http.StatusOK},
	} {
		code, body := httpGet(t, base+tt.path, "")
		if code != tt.code {
			t.Errorf("GET %s = %d, want %d: %s", tt.path, code, tt.code, body)
		}
		if tt.code != http.StatusOK && strings.Contains(body, "open-0") {
			t.Errorf("GET %s answered %d with data: %s", tt.path, code, body)
		}
	}
}

// TestStatusAPIBearerToken runs local.yaml with bearertokenauth in front of
// the invocation_status server (a second config merged over it): without
// the token a request gets 401 and no data, with it 200.
func TestStatusAPIBearerToken(t *testing.T) {
	bin := collectorBin(t)
	dir := t.TempDir()
	addrs, err := testbin.NewCollectorAddrs(dir)
	if err != nil {
		t.Fatal(err)
	}
	auth := filepath.Join(dir, "auth.yaml")
	if err := os.WriteFile(auth, []byte(`extensions:
  bearertokenauth:
    token: ${env:STATUS_TOKEN}
  invocation_status:
    auth:
      authenticator: bearertokenauth
service:
  extensions: [health_check, bearertokenauth, invocation_status, file_storage/ledger]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	const token = "e2e-secret-token"
	p, err := testbin.StartCollectorConfigs(ctx, bin, []string{repoPath(t, "collector-config", "local.yaml"), auth}, addrs,
		filepath.Join(dir, "collector.log"), "STATUS_TOKEN="+token)
	if p != nil {
		t.Cleanup(func() { stopAndReport(t, p) })
	}
	if err != nil {
		t.Fatal(err)
	}

	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	root, chat1, tool, _, _, _ := backgroundInvocation(0x30)
	const id = "e2e-secret-invocation"
	exportOTLP(t, addrs.OTLPGRPC, batch(t0, id, root, chat1, tool))

	base := "http://" + addrs.Status
	for _, path := range []string{"/v1/invocations/" + id, "/v1/sessions/session-1", "/v1/invocations", "/"} {
		for _, header := range []string{"", "Bearer wrong-token", token} {
			code, body := httpGet(t, base+path, header)
			if code != http.StatusUnauthorized {
				t.Errorf("GET %s with Authorization %q = %d, want 401", path, header, code)
			}
			if strings.Contains(body, id) {
				t.Errorf("GET %s with Authorization %q leaked data: %s", path, header, body)
			}
		}
		code, body := httpGet(t, base+path, "Bearer "+token)
		if code != http.StatusOK || !strings.Contains(body, id) {
			t.Errorf("GET %s with the token = %d, want 200 with %s: %s", path, code, id, body)
		}
	}
	c := statusClient(t, addrs.Status, statusapi.WithBearerToken(token))
	if !owesWork(t, c, "session-1") {
		t.Error("with the token: session-1 should owe work (its job runs)")
	}
	if _, err := statusClient(t, addrs.Status).OwesWork(context.Background(), "session-1"); err == nil {
		t.Error("without the token OwesWork answered; want an error")
	}
}

// httpGet GETs rawURL with an Authorization header (none when empty).
func httpGet(t *testing.T, rawURL, authorization string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}
