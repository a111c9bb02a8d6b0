package dashboards

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// DatasourceKind names the kind of data source a panel query runs against.
type DatasourceKind string

// Data source kinds of PanelQuery.
const (
	// KindPrometheus queries run as PromQL against Prometheus' /api/v1/query
	// or /api/v1/query_range.
	KindPrometheus DatasourceKind = "prometheus"
	// KindJaeger queries run as trace searches against Jaeger's /api/traces.
	KindJaeger DatasourceKind = "jaeger"
)

// PanelQuery is one query (target) of one panel of a generated dashboard.
type PanelQuery struct {
	// Dashboard is the UID of the dashboard holding the panel.
	Dashboard string
	// PanelID is the panel's id within its dashboard.
	PanelID uint32
	// Panel is the panel's title.
	Panel string
	// RefID names the query within its panel.
	RefID string
	// Kind is the data source kind.
	Kind DatasourceKind
	// DatasourceUID is the UID of the data source the query references.
	DatasourceUID string
	// Expr is the query as written in the dashboard, with Grafana variables
	// ($agent, $__rate_interval, ...) unexpanded: PromQL for Prometheus; for
	// Jaeger, the search in logfmt (service, operation, tags, limit).
	Expr string
	// Instant is true for a Prometheus instant query, false for a range query.
	Instant bool
	// Jaeger is the search, for KindJaeger only.
	Jaeger *JaegerQuery
}

// Panels lists every query of every generated dashboard, in dashboard and
// panel order, read back from the built dashboards so it cannot drift from
// them.
func Panels() ([]PanelQuery, error) {
	var out []PanelQuery
	for _, b := range builders {
		d, err := b.build()
		if err != nil {
			return nil, err
		}
		qs, err := panelQueries(d)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.file, err)
		}
		out = append(out, qs...)
	}
	return out, nil
}

// panelQueries extracts the queries of every panel of d, including panels
// nested in collapsed rows.
func panelQueries(d dashboard.Dashboard) ([]PanelQuery, error) {
	var panels []dashboard.Panel
	for _, p := range d.Panels {
		switch {
		case p.Panel != nil:
			panels = append(panels, *p.Panel)
		case p.RowPanel != nil:
			for _, inner := range p.RowPanel.Panels {
				panels = append(panels, inner)
			}
		}
	}
	var out []PanelQuery
	for _, p := range panels {
		title := deref(p.Title)
		var id uint32
		if p.Id != nil {
			id = *p.Id
		}
		if len(p.Targets) == 0 {
			return nil, fmt.Errorf("panel %q has no query", title)
		}
		for _, t := range p.Targets {
			q, err := toPanelQuery(t)
			if err != nil {
				return nil, fmt.Errorf("panel %q: %w", title, err)
			}
			q.Dashboard, q.PanelID, q.Panel = deref(d.Uid), id, title
			out = append(out, q)
		}
	}
	return out, nil
}

func toPanelQuery(t variants.Dataquery) (PanelQuery, error) {
	switch q := t.(type) {
	case prometheus.Dataquery:
		return promPanelQuery(q), nil
	case *prometheus.Dataquery:
		return promPanelQuery(*q), nil
	case JaegerQuery:
		return jaegerPanelQuery(q), nil
	case *JaegerQuery:
		return jaegerPanelQuery(*q), nil
	default:
		return PanelQuery{}, fmt.Errorf("unsupported query type %T (%s)", t, t.DataqueryType())
	}
}

func promPanelQuery(q prometheus.Dataquery) PanelQuery {
	pq := PanelQuery{
		RefID:   deref(q.RefId),
		Kind:    KindPrometheus,
		Expr:    q.Expr,
		Instant: q.Instant != nil && *q.Instant,
	}
	if q.Datasource != nil {
		pq.DatasourceUID = deref(q.Datasource.Uid)
	}
	return pq
}

func jaegerPanelQuery(q JaegerQuery) PanelQuery {
	fields := []string{
		"service=" + logfmtValue(q.Service),
		"operation=" + logfmtValue(q.Operation),
	}
	if q.Tags != "" {
		fields = append(fields, "tags="+logfmtValue(q.Tags))
	}
	if q.Limit > 0 {
		fields = append(fields, "limit="+strconv.FormatInt(q.Limit, 10))
	}
	pq := PanelQuery{
		RefID:  q.RefID,
		Kind:   KindJaeger,
		Expr:   strings.Join(fields, " "),
		Jaeger: &q,
	}
	if q.Datasource != nil {
		pq.DatasourceUID = deref(q.Datasource.Uid)
	}
	return pq
}

// logfmtValue quotes v when logfmt needs it.
func logfmtValue(v string) string {
	if v == "" || strings.ContainsAny(v, " =\"\\") {
		return strconv.Quote(v)
	}
	return v
}

// Vars are values for dashboard variables, keyed by name without the "$":
// the dashboards' own (agent, service) and Grafana's built-ins
// (__rate_interval, __interval, __range).
type Vars map[string]string

// DefaultVars returns values that make every Prometheus query runnable
// outside Grafana: all agents and tenants, and fixed windows for the built-ins. Jaeger
// searches still need a concrete agent, service and collector.
func DefaultVars() Vars {
	return Vars{
		"__rate_interval": "1m",
		"__interval":      "15s",
		"__range":         "1h",
		varAgent:          ".*",
		varTenant:         ".*",
	}
}

var varRef = regexp.MustCompile(`\$(?:\{(\w+)\}|(\w+))`)

// Expand substitutes vars for the Grafana variables ($name and ${name}) in
// s, and fails naming every variable it has no value for.
func (v Vars) Expand(s string) (string, error) {
	missing := map[string]bool{}
	out := varRef.ReplaceAllStringFunc(s, func(m string) string {
		sub := varRef.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		val, ok := v[name]
		if !ok {
			missing[name] = true
			return m
		}
		return val
	})
	if len(missing) > 0 {
		names := make([]string, 0, len(missing))
		for n := range missing {
			names = append(names, "$"+n)
		}
		sort.Strings(names)
		return "", fmt.Errorf("no value for %s in %q", strings.Join(names, ", "), s)
	}
	return out, nil
}

// Query returns the query with vars expanded: PromQL for Prometheus, the
// logfmt search for Jaeger.
func (q PanelQuery) Query(vars Vars) (string, error) {
	return vars.Expand(q.Expr)
}

// JaegerSearch returns the query parameters of Jaeger's /api/traces for a
// Jaeger query, with vars expanded: service, operation, tags (a JSON object,
// as the Jaeger API takes it) and limit.
func (q PanelQuery) JaegerSearch(vars Vars) (map[string]string, error) {
	if q.Kind != KindJaeger || q.Jaeger == nil {
		return nil, fmt.Errorf("panel %q query %s is not a Jaeger query", q.Panel, q.RefID)
	}
	params := map[string]string{}
	for key, raw := range map[string]string{"service": q.Jaeger.Service, "operation": q.Jaeger.Operation} {
		if raw == "" {
			continue
		}
		val, err := vars.Expand(raw)
		if err != nil {
			return nil, err
		}
		params[key] = val
	}
	if q.Jaeger.Tags != "" {
		expanded, err := vars.Expand(q.Jaeger.Tags)
		if err != nil {
			return nil, err
		}
		tags, err := parseLogfmt(expanded)
		if err != nil {
			return nil, fmt.Errorf("tags of panel %q: %w", q.Panel, err)
		}
		raw, err := json.Marshal(tags)
		if err != nil {
			return nil, fmt.Errorf("tags of panel %q: %w", q.Panel, err)
		}
		params["tags"] = string(raw)
	}
	if q.Jaeger.Limit > 0 {
		params["limit"] = strconv.FormatInt(q.Jaeger.Limit, 10)
	}
	return params, nil
}

// parseLogfmt reads key=value pairs separated by spaces; a value may be a
// double-quoted Go string. This is the form Grafana's Jaeger data source
// takes its tags in.
func parseLogfmt(s string) (map[string]string, error) {
	out := map[string]string{}
	rest := strings.TrimSpace(s)
	for rest != "" {
		eq := strings.IndexByte(rest, '=')
		if eq <= 0 {
			return nil, fmt.Errorf("logfmt %q: expected key=value at %q", s, rest)
		}
		key := rest[:eq]
		if strings.ContainsAny(key, " \"") {
			return nil, fmt.Errorf("logfmt %q: bad key %q", s, key)
		}
		rest = rest[eq+1:]
		var val string
		if strings.HasPrefix(rest, `"`) {
			quoted, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return nil, fmt.Errorf("logfmt %q: %w", s, err)
			}
			val, err = strconv.Unquote(quoted)
			if err != nil {
				return nil, fmt.Errorf("logfmt %q: %w", s, err)
			}
			rest = rest[len(quoted):]
		} else {
			end := strings.IndexByte(rest, ' ')
			if end < 0 {
				end = len(rest)
			}
			val, rest = rest[:end], rest[end:]
		}
		if rest != "" && rest[0] != ' ' {
			return nil, fmt.Errorf("logfmt %q: expected a space after %s", s, key)
		}
		out[key] = val
		rest = strings.TrimSpace(rest)
	}
	return out, nil
}
