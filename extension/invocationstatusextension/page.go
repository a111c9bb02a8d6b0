package invocationstatusextension // import "github.com/agentledger/agentledger/extension/invocationstatusextension"

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
)

//go:embed page.html.tmpl
var pageTemplate string

// pageRenderer renders the page at / from the store: open invocations
// (oldest first) and recently closed ones (latest first).
type pageRenderer struct {
	tmpl      *template.Template
	csp       string
	jaegerURL string
	refresh   time.Duration
	rows      int
}

func newPageRenderer(cfg *Config) (*pageRenderer, error) {
	tmpl, err := template.New("page").Funcs(template.FuncMap{
		"tokens": func(n int64) string { return groupDigits(n) },
		"join":   strings.Join,
	}).Parse(pageTemplate)
	if err != nil {
		return nil, fmt.Errorf("invocation_status: page template: %w", err)
	}
	csp, err := pageCSP(pageTemplate)
	if err != nil {
		return nil, err
	}
	return &pageRenderer{
		tmpl:      tmpl,
		csp:       csp,
		jaegerURL: strings.TrimRight(cfg.JaegerURL, "/"),
		refresh:   cfg.PageRefresh,
		rows:      cfg.PageRows,
	}, nil
}

type pageData struct {
	Now         string
	RefreshMS   int64
	Open        []pageRow
	OpenTotal   int
	Closed      []pageRow
	ClosedTotal int
	Rows        int
	Jaeger      bool
	// OpenTable and ClosedTable are Open and Closed with what their
	// tables show.
	OpenTable, ClosedTable pageTable
	// Filter is set when the page shows one session's or tenant's rows.
	Filter *pageFilter
}

// pageFilter is what a filtered page shows.
type pageFilter struct {
	Session, Tenant string
}

// pageTable is one table's rows and its optional columns: tenant when a
// row has one (a collector without tenants has none), traces when a row
// links to Jaeger (a jaeger_url is configured).
type pageTable struct {
	Rows    []pageRow
	Tenants bool
	Links   bool
}

func tableOf(rows []pageRow) pageTable {
	t := pageTable{Rows: rows}
	for _, r := range rows {
		t.Tenants = t.Tenants || r.Tenant != ""
		t.Links = t.Links || len(r.Links) > 0
	}
	return t
}

type pageRow struct {
	statusapi.Invocation
	// Age is how long ago it started, rounded.
	Age string
	// Waits are one line each of what it waits on (open) or why it is
	// incomplete (closed).
	Waits []string
	// Links point at its traces in Jaeger.
	Links []pageLink
	// Self is the API path of the invocation, relative to the page, with
	// its tenant: ids are each tenant's own.
	Self string
	// Page is its timeline page (/invocations/{id}), relative to the page.
	Page string
	// SessionFilter shows only its session's rows.
	SessionFilter string
	// Spark is its mini-timeline.
	Spark sparkline
}

type pageLink struct {
	Label string
	// Short is the label in the page's table ("root", "2", "all"), which
	// must fit 1400 px; Label is the title and the timeline's text.
	Short string
	URL   string
}

func (e *statusExtension) servePage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := pageParams(q, "session", "tenant"); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	now := e.now()
	var only filter // the rows shown: a session's, a tenant's, the caller's tenant's when scoped
	if q.Has("tenant") {
		only.tenant, only.byTenant = q.Get("tenant"), true
	}
	if q.Has("session") {
		if only.session = q.Get("session"); only.session == "" {
			writeError(w, http.StatusBadRequest, "session must not be empty")
			return
		}
	}
	if err := scopeFilter(r, &only); err != nil {
		writeError(w, http.StatusForbidden, err.Error())
		return
	}
	data := e.page.data(e.store, now, only)
	name := "page"
	if q.Get("fragment") == "1" {
		name = "content"
	}
	var buf bytes.Buffer
	if err := e.page.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
		writeError(w, http.StatusInternalServerError, "rendering the page: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", e.page.csp)
	_, _ = w.Write(buf.Bytes())
}

// data renders the store's views, only those of one tenant when only says
// so (byTenant).
func (p *pageRenderer) data(s *store, now time.Time, only filter) pageData {
	d := pageData{
		Now:       now.UTC().Format(time.RFC3339),
		RefreshMS: p.refresh.Milliseconds(),
		Rows:      p.rows,
		Jaeger:    p.jaegerURL != "",
	}
	if only.session != "" || only.byTenant {
		d.Filter = &pageFilter{Session: only.session, Tenant: only.tenant}
	}
	open := s.list(filter{status: statusapi.StatusPending, now: now, tenant: only.tenant, byTenant: only.byTenant, session: only.session})
	d.OpenTotal = len(open)
	for _, v := range open[:min(len(open), p.rows)] {
		pv := present(v, now)
		pv.Timeline = v.Timeline // for the row's mini-timeline
		d.Open = append(d.Open, p.row(pv, now))
	}
	closed, total := s.recentlyClosed(p.rows, only)
	d.ClosedTotal = total
	for _, v := range closed {
		d.Closed = append(d.Closed, p.row(*v, now))
	}
	d.OpenTable, d.ClosedTable = tableOf(d.Open), tableOf(d.Closed)
	// Both tables show the tenant column when either has a tenant, so
	// that their columns line up.
	tenants := d.OpenTable.Tenants || d.ClosedTable.Tenants
	d.OpenTable.Tenants, d.ClosedTable.Tenants = tenants, tenants
	return d
}

func (p *pageRenderer) row(v statusapi.Invocation, now time.Time) pageRow {
	r := pageRow{Invocation: v, Age: roundAge(now.Sub(v.Started)), Self: invocationPath(v.Tenant, v.ID),
		Page: timelinePath(v.Tenant, v.ID), SessionFilter: sessionFilterPath(v.Tenant, v.Session), Spark: sparkOf(&v, now)}
	if w := v.Waiting; w != nil {
		if w.RootMissing {
			r.Waits = append(r.Waits, "root span not arrived yet")
		}
		for _, m := range w.MissingChildren {
			r.Waits = append(r.Waits, fmt.Sprintf("%d missing child span(s) of %s", m.Missing, m.Parent))
		}
		for _, f := range w.ExpectedFollowups {
			r.Waits = append(r.Waits, fmt.Sprintf("followup of %s (started %s ago)", f.Job, roundAge(now.Sub(f.Started))))
		}
		if w.Truncated > 0 {
			r.Waits = append(r.Waits, fmt.Sprintf("and %d more", w.Truncated))
		}
		if rs := w.RemoteSettling; rs != nil {
			r.Waits = append(r.Waits, fmt.Sprintf("remote %s settling until %s", strings.Join(rs.Spans, ", "), rs.Until.Format("15:04:05.000")))
		}
		for _, u := range w.Unprovable {
			r.Waits = append(r.Waits, "never final: "+u)
		}
		r.Waits = append(r.Waits, "open timeout at "+w.OpenTimeoutAt.Format(time.RFC3339))
	} else if v.Status == statusapi.StatusIncomplete {
		r.Waits = append(r.Waits, v.Reasons...)
	}
	if p.jaegerURL != "" {
		for i, t := range v.TraceIDs {
			label, short := "root trace", "root"
			if i > 0 {
				label, short = fmt.Sprintf("trace %d", i+1), fmt.Sprint(i+1)
			}
			r.Links = append(r.Links, pageLink{Label: label, Short: short, URL: p.jaegerURL + "/trace/" + url.PathEscape(t)})
		}
		if v.Service != "" {
			q := url.Values{"service": {v.Service}, "tags": {fmt.Sprintf(`{"invocation.id":%q}`, v.ID)}}
			r.Links = append(r.Links, pageLink{Label: "all traces", Short: "all", URL: p.jaegerURL + "/search?" + q.Encode()})
		}
	}
	return r
}

// invocationPath is the API path of a tenant's invocation, relative to
// the page.
func invocationPath(tenant, id string) string {
	p := "v1/invocations/" + url.PathEscape(id)
	if tenant != "" {
		p += "?" + url.Values{"tenant": {tenant}}.Encode()
	}
	return p
}

// pageParams checks a page's query: fragment=1 and the known keys, each
// given once.
func pageParams(q url.Values, known ...string) error {
	for k, vs := range q {
		if k != "fragment" && !slices.Contains(known, k) {
			return fmt.Errorf("unknown query parameter %q (the page takes %s and fragment=1)", k, strings.Join(known, ", "))
		}
		if len(vs) != 1 {
			return fmt.Errorf("query parameter %q given %d times", k, len(vs))
		}
	}
	return nil
}

// sessionFilterPath is the page showing one session's rows (sessions are
// each tenant's own); empty for an invocation whose session is unknown.
func sessionFilterPath(tenant, session string) string {
	if session == "" {
		return ""
	}
	q := url.Values{"session": {session}}
	if tenant != "" {
		q.Set("tenant", tenant)
	}
	return "?" + q.Encode()
}

// roundAge prints a duration to the second (to the millisecond below one
// second).
func roundAge(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// groupDigits prints n with thin spaces between groups of three digits.
func groupDigits(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteString("\u202f")
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
