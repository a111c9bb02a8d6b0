package invocationstatusextension // import "github.com/agentledger/agentledger/extension/invocationstatusextension"

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unsafe"

	"github.com/agentledger/agentledger/extension/invocationstatusextension/statusapi"
)

//go:embed timeline.html.tmpl
var timelineTemplate string

// timelineRenderer renders /invocations/{id}: one invocation's spans from
// all its traces on one time axis (chart.go lays them out).
type timelineRenderer struct {
	tmpl *template.Template
	csp  string
}

func newTimelineRenderer() (*timelineRenderer, error) {
	tmpl, err := template.New("timeline").Funcs(template.FuncMap{
		"tokens": groupDigits,
		"px":     func(f float64) string { return fmt.Sprintf("%.1f", f) },
		"add":    func(a, b float64) float64 { return a + b },
		"sub":    func(a, b float64) float64 { return a - b },
	}).Parse(timelineTemplate)
	if err != nil {
		return nil, fmt.Errorf("invocation_status: timeline template: %w", err)
	}
	csp, err := pageCSP(timelineTemplate)
	if err != nil {
		return nil, err
	}
	return &timelineRenderer{tmpl: tmpl, csp: csp}, nil
}

// spansParam reads and removes the spans query parameter of GET
// /v1/invocations/{id}: spans=1 answers with the invocation's Timeline,
// absent or spans=0 without.
func spansParam(q url.Values) (bool, error) {
	if !q.Has("spans") {
		return false, nil
	}
	vs := q["spans"]
	q.Del("spans")
	if len(vs) != 1 || vs[0] != "1" && vs[0] != "0" {
		return false, fmt.Errorf("query parameter spans must be given once, as 1 or 0, got %q", vs)
	}
	return vs[0] == "1", nil
}

// timelineData is what the timeline template renders.
type timelineData struct {
	pageRow
	Now string
	// RefreshMS is the refresh interval while the invocation is open, 0
	// once closed (a closed invocation's page changes only on a late
	// revision).
	RefreshMS int64
	// Home is the main page, JSON the invocation's spans as JSON, both
	// relative to this page.
	Home, JSON string
	Chart      chart
	// Cut says how many spans the timeline does not draw, empty when it
	// draws them all.
	Cut string
	// NoSpans is set when the processor records none (status_spans 0, or
	// a processor that does not record them).
	NoSpans bool
}

func (e *statusExtension) serveTimeline(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := pageParams(q, "tenant"); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	tenant, err := ownTenant(r, q.Get("tenant"))
	if err != nil {
		writeError(w, http.StatusForbidden, err.Error())
		return
	}
	id := r.PathValue("id")
	v, ok := e.store.get(tenant, id)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Sprintf("invocation %q%s is not open and not among the recently closed ones", id, ofTenant(tenant)))
		return
	}
	now := e.now()
	data := e.timelineData(v, now)
	name := "timeline"
	if q.Get("fragment") == "1" {
		name = "content"
	}
	var buf bytes.Buffer
	if err := e.timeline.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
		writeError(w, http.StatusInternalServerError, "rendering the page: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", e.timeline.csp)
	_, _ = w.Write(buf.Bytes())
}

func (e *statusExtension) timelineData(v *statusapi.Invocation, now time.Time) timelineData {
	p := present(v, now)
	p.Timeline = v.Timeline
	d := timelineData{
		pageRow: e.page.row(p, now),
		Now:     now.UTC().Format(time.RFC3339),
		Home:    "../" + homeQuery(v.Tenant),
		JSON:    "../" + invocationPath(v.Tenant, v.ID),
	}
	if v.Open() {
		d.RefreshMS = e.page.refresh.Milliseconds()
	}
	if strings.Contains(d.JSON, "?") {
		d.JSON += "&spans=1"
	} else {
		d.JSON += "?spans=1"
	}
	d.Chart = layoutChart(&p, now)
	if tl := v.Timeline; tl == nil {
		d.NoSpans = true
	} else if tl.Omitted > 0 {
		d.Cut = fmt.Sprintf("showing the first %d of %d spans: %d not drawn (the processor records at most status_spans = %d of an invocation, and its root); the totals above count every span",
			len(tl.Spans), int64(len(tl.Spans))+tl.Omitted, tl.Omitted, tl.Limit)
	}
	return d
}

// homeQuery is the main page's query that keeps a tenant's view: none
// without a tenant.
func homeQuery(tenant string) string {
	if tenant == "" {
		return ""
	}
	return "?" + url.Values{"tenant": {tenant}}.Encode()
}

// timelinePath is the page of a tenant's invocation, relative to the main
// page.
func timelinePath(tenant, id string) string {
	p := "invocations/" + url.PathEscape(id)
	if tenant != "" {
		p += "?" + url.Values{"tenant": {tenant}}.Encode()
	}
	return p
}

// timelineOf is the view's timeline as ?spans=1 answers it: an empty one
// (limit 0) when the processor records none, so the answer says so.
func timelineOf(v *statusapi.Invocation) *statusapi.Timeline {
	if v.Timeline == nil {
		return &statusapi.Timeline{Spans: []statusapi.Span{}}
	}
	if v.Timeline.Spans == nil {
		tl := *v.Timeline
		tl.Spans = []statusapi.Span{}
		return &tl
	}
	return v.Timeline
}

// sizeSpan is one recorded span of a view besides its name.
const sizeSpan = int64(unsafe.Sizeof(statusapi.Span{}))

// timelineBytes estimates a view's recorded spans: each span and its
// name, whether or not the processor still shares them.
func timelineBytes(tl *statusapi.Timeline) int64 {
	if tl == nil {
		return 0
	}
	n := int64(len(tl.Spans)) * sizeSpan
	for i := range tl.Spans {
		n += int64(len(tl.Spans[i].Name))
	}
	return n
}
