package invocationstatusextension // import "github.com/agentledger/agentledger/extension/invocationstatusextension"

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
)

// defaultPageSize is the page size of GET /v1/invocations without limit.
const defaultPageSize = 100

// handler routes the API and the page.
func (e *statusExtension) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/invocations/{id}", e.getInvocation)
	mux.HandleFunc("GET /v1/invocations", e.listInvocations)
	mux.HandleFunc("GET /v1/sessions/{session}", e.getSession)
	for _, p := range []string{"/v1/invocations/{id}", "/v1/invocations", "/v1/sessions/{session}"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, r.Method+" is not allowed; the API is read-only (GET)")
		})
	}
	mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such API path %s", r.URL.Path))
	})
	mux.HandleFunc("GET /{$}", e.servePage)
	mux.HandleFunc("GET /invocations/{id}", e.serveTimeline)
	return e.guard(e.scope(mux))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(statusapi.Error{Error: msg})
}

// present returns the view as it is answered at now: ages filled in, and
// without its timeline (only ?spans=1 asks for it). The stored view is
// shared and never modified.
func present(v *statusapi.Invocation, now time.Time) statusapi.Invocation {
	out := *v
	out.Timeline = nil
	if v.Waiting != nil && len(v.Waiting.ExpectedFollowups) > 0 {
		w := *v.Waiting
		w.ExpectedFollowups = slices.Clone(w.ExpectedFollowups)
		for i := range w.ExpectedFollowups {
			w.ExpectedFollowups[i].AgeSeconds = age(w.ExpectedFollowups[i].Started, now)
		}
		out.Waiting = &w
	}
	return out
}

func age(since, now time.Time) float64 {
	d := now.Sub(since)
	if d < 0 {
		return 0
	}
	return d.Seconds()
}

// tenantParam reads the only query parameter the single-invocation path
// takes: tenant, the tenant whose invocation or session is
// meant ("" or absent: the ones without a tenant). Invocation IDs and
// session names are the tenant's own.
func tenantParam(q url.Values) (string, error) {
	for k, vs := range q {
		if k != "tenant" {
			return "", fmt.Errorf("unknown query parameter %q (known: tenant)", k)
		}
		if len(vs) != 1 {
			return "", fmt.Errorf("query parameter %q given %d times", k, len(vs))
		}
	}
	return q.Get("tenant"), nil
}

func (e *statusExtension) getInvocation(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	spans, err := spansParam(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	tenant, err := tenantParam(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if tenant, err = ownTenant(r, tenant); err != nil {
		writeError(w, http.StatusForbidden, err.Error())
		return
	}
	id := r.PathValue("id")
	v, ok := e.store.get(tenant, id)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("invocation %q%s is not open and not among the recently closed ones", id, ofTenant(tenant)))
		return
	}
	out := present(v, e.now())
	if spans {
		out.Timeline = timelineOf(v)
	}
	writeJSON(w, out)
}

func (e *statusExtension) getSession(w http.ResponseWriter, r *http.Request) {
	q, err := parseSessionQuery(r.URL.Query(), e.cfg.MaxWatchWait)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if q.tenant, err = ownTenant(r, q.tenant); err != nil {
		writeError(w, http.StatusForbidden, err.Error())
		return
	}
	session := r.PathValue("session")
	if err := e.checkSession(session); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if q.watch {
		e.watchSession(w, r, session, q)
		return
	}
	views, version := e.store.session(q.tenant, session)
	if len(views) == 0 {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no open or recently closed invocation of session %q%s", session, ofTenant(q.tenant)))
		return
	}
	writeJSON(w, sessionOf(session, views, version, e.now()))
}

// sessionQuery is a parsed GET /v1/sessions/{session} query.
type sessionQuery struct {
	tenant string
	// watch is set by wait: answer once the session's version is not
	// after, or when wait has passed.
	watch bool
	wait  time.Duration
	after uint64
}

var sessionParams = []string{"tenant", "wait", "after"}

func parseSessionQuery(q url.Values, maxWait time.Duration) (sessionQuery, error) {
	var out sessionQuery
	for k, vs := range q {
		if !slices.Contains(sessionParams, k) {
			return out, fmt.Errorf("unknown query parameter %q (known: %s)", k, strings.Join(sessionParams, ", "))
		}
		if len(vs) != 1 {
			return out, fmt.Errorf("query parameter %q given %d times", k, len(vs))
		}
	}
	out.tenant = q.Get("tenant")
	if s := q.Get("wait"); q.Has("wait") {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 || d > maxWait {
			return out, fmt.Errorf("wait must be a duration from 0s to %s (max_watch_wait) such as 30s, got %q", maxWait, s)
		}
		out.watch, out.wait = true, d
	}
	if s := q.Get("after"); q.Has("after") {
		if !out.watch {
			return out, errors.New("after needs wait: GET /v1/sessions/{session}?wait=30s&after=<version>")
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return out, fmt.Errorf("after must be a version this API answered (a non-negative integer), got %q", s)
		}
		out.after = v
	}
	return out, nil
}

// watchSession answers a session watch: at once when the session's
// version is not q.after, else at its next change, when q.wait has
// passed, or when the extension shuts down. An unknown session is the
// empty session at version 0, so a watch with after=0 waits for it to
// appear.
func (e *statusExtension) watchSession(w http.ResponseWriter, r *http.Request, session string, q sessionQuery) {
	var expired <-chan time.Time
wait:
	for q.wait > 0 {
		changed, release, _, err := e.store.awaitChange(q.tenant, session, q.after)
		if err != nil {
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, fmt.Sprintf("%v (max_session_watches %d); retry later", err, e.cfg.MaxSessionWatches))
			return
		}
		if changed == nil {
			break
		}
		if expired == nil {
			var stop func() bool
			expired, stop = e.timer(q.wait)
			defer stop()
		}
		select {
		case <-changed:
			release()
		case <-expired:
			release()
			break wait
		case <-e.stopping:
			release()
			break wait
		case <-r.Context().Done():
			release()
			return
		}
	}
	views, version := e.store.session(q.tenant, session)
	writeJSON(w, sessionOf(session, views, version, e.now()))
}

// checkSession refuses a session name longer than the ledger keeps: its
// invocations are listed under the cut name, so no answer about it would
// be true ("owes no work" least of all).
//
// A name that looks cut is refused too: the ledger cuts a long name to at
// most max_name_bytes ending in "...", so a session whose name has that
// shape may share its entry with a longer one, and the answer could be
// another session's state. Names are matched exactly or refused.
func (e *statusExtension) checkSession(session string) error {
	limit := e.nameLimit.Load()
	if limit <= 0 {
		return nil
	}
	if int64(len(session)) > limit {
		return fmt.Errorf("session name of %d bytes: the ledger keeps at most %d bytes of a session name (max_name_bytes), so it cannot say what this session owes", len(session), limit)
	}
	if looksCut(session, limit) {
		return fmt.Errorf("session name %q looks cut: the ledger cuts names longer than %d bytes (max_name_bytes) to this shape, so it cannot tell this session from a longer one; use a name that does not end in %q at that length", session, limit, cutMark)
	}
	return nil
}

// cutMark ends every name the ledger cut (the processor's capName).
const cutMark = "..."

// looksCut reports whether a name of at most limit bytes could be one the
// ledger cut from a longer name: it ends in cutMark and is at least limit
// minus cutMark and one partial UTF-8 rune long (the cut backs up to a
// rune start).
func looksCut(name string, limit int64) bool {
	return strings.HasSuffix(name, cutMark) && int64(len(name)) >= limit-int64(len(cutMark))-3
}

func ofTenant(tenant string) string {
	if tenant == "" {
		return ""
	}
	return fmt.Sprintf(" of tenant %q", tenant)
}

// sessionOf answers for a session from its views, oldest first, at its
// watch version.
func sessionOf(session string, views []*statusapi.Invocation, version uint64, now time.Time) statusapi.Session {
	out := statusapi.Session{
		Session:           session,
		Version:           version,
		OpenInvocations:   []statusapi.Invocation{},
		Jobs:              []statusapi.SessionJob{},
		ClosedInvocations: []string{},
	}
	for _, v := range views {
		p := present(v, now)
		if !v.Open() {
			out.ClosedInvocations = append(out.ClosedInvocations, v.ID)
		} else {
			out.OpenInvocations = append(out.OpenInvocations, p)
		}
		// A closed invocation owes too when a job arrived after its close
		// (a revision re-opened a followup) or a turn woke it.
		if p.Waiting.OwesWork() {
			out.OwesWork = true
		}
		if p.Waiting != nil {
			for _, f := range p.Waiting.ExpectedFollowups {
				out.Jobs = append(out.Jobs, statusapi.SessionJob{InvocationID: p.ID, ExpectedFollowup: f})
			}
		}
	}
	slices.SortStableFunc(out.Jobs, func(a, b statusapi.SessionJob) int { return a.Started.Compare(b.Started) })
	return out
}

// listQuery is a parsed GET /v1/invocations query.
type listQuery struct {
	filter filter
	limit  int
	after  *pageKey
}

// pageKey is the sort key of the last invocation of a page: its start,
// then its tenant and ID (viewKey).
type pageKey struct {
	started time.Time
	key     string
}

func (k pageKey) token() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(k.started.UnixNano(), 10) + "/" + k.key))
}

func parsePageToken(tok string) (*pageKey, error) {
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, errors.New("page_token is not a token this server made")
	}
	ns, key, ok := strings.Cut(string(raw), "/")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || !strings.Contains(key, "\x00") {
		return nil, errors.New("page_token is not a token this server made")
	}
	return &pageKey{started: time.Unix(0, n).UTC(), key: key}, nil
}

var listParams = []string{"status", "older_than", "session", "tenant", "limit", "page_token"}

func parseListQuery(q url.Values, now time.Time) (listQuery, error) {
	out := listQuery{limit: defaultPageSize, filter: filter{now: now}}
	for k, vs := range q {
		if !slices.Contains(listParams, k) {
			return out, fmt.Errorf("unknown query parameter %q (known: %s)", k, strings.Join(listParams, ", "))
		}
		if len(vs) != 1 {
			return out, fmt.Errorf("query parameter %q given %d times", k, len(vs))
		}
	}
	if s := q.Get("status"); q.Has("status") {
		st := statusapi.Status(s)
		if !st.Valid() {
			return out, fmt.Errorf("status must be pending, final or incomplete, got %q", s)
		}
		out.filter.status = st
	}
	if s := q.Get("older_than"); q.Has("older_than") {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return out, fmt.Errorf("older_than must be a non-negative duration such as 10m or 1h30m, got %q", s)
		}
		out.filter.olderThan = d
	}
	if q.Has("session") {
		if out.filter.session = q.Get("session"); out.filter.session == "" {
			return out, errors.New("session must not be empty")
		}
	}
	if q.Has("tenant") {
		out.filter.tenant, out.filter.byTenant = q.Get("tenant"), true
	}
	if s := q.Get("limit"); q.Has("limit") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPageSize {
			return out, fmt.Errorf("limit must be an integer from 1 to %d, got %q", maxPageSize, s)
		}
		out.limit = n
	}
	if q.Has("page_token") {
		k, err := parsePageToken(q.Get("page_token"))
		if err != nil {
			return out, err
		}
		out.after = k
	}
	return out, nil
}

func (e *statusExtension) listInvocations(w http.ResponseWriter, r *http.Request) {
	now := e.now()
	q, err := parseListQuery(r.URL.Query(), now)
	if err == nil {
		err = e.checkSession(q.filter.session)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := scopeFilter(r, &q.filter); err != nil {
		writeError(w, http.StatusForbidden, err.Error())
		return
	}
	views := e.store.list(q.filter)
	out := statusapi.InvocationList{Total: len(views), Invocations: []statusapi.Invocation{}}
	start := 0
	if q.after != nil {
		start, _ = slices.BinarySearchFunc(views, *q.after, func(v *statusapi.Invocation, k pageKey) int {
			if n := v.Started.Compare(k.started); n != 0 {
				return n
			}
			return strings.Compare(viewKey(v.Tenant, v.ID), k.key)
		})
		// Skip the token's own invocation if it is still there.
		if start < len(views) && viewKey(views[start].Tenant, views[start].ID) == q.after.key && views[start].Started.Equal(q.after.started) {
			start++
		}
	}
	end := min(start+q.limit, len(views))
	for _, v := range views[start:end] {
		out.Invocations = append(out.Invocations, present(v, now))
	}
	if end < len(views) {
		last := views[end-1]
		out.NextPageToken = pageKey{started: last.Started, key: viewKey(last.Tenant, last.ID)}.token()
	}
	writeJSON(w, out)
}
