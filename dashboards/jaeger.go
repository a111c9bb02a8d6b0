package dashboards

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
)

// JaegerPluginID is the Grafana plugin id of the Jaeger data source, used as
// the data source type in panel and target references.
const JaegerPluginID = "jaeger"

// Values of JaegerQuery.QueryType understood by Grafana's Jaeger data source.
const (
	// JaegerQueryTypeSearch searches traces by service, operation and tags.
	JaegerQueryTypeSearch = "search"
)

// JaegerQuery is one target of Grafana's Jaeger data source. The foundation
// SDK ships no type for that plugin, so this one implements its Dataquery
// variant: the fields are the plugin's query model (service, operation,
// logfmt tags, limit), and unmarshalling it strictly rejects anything else.
type JaegerQuery struct {
	// RefID names the target within its panel.
	RefID string `json:"refId"`
	// Hide excludes the target from the panel when true.
	Hide *bool `json:"hide,omitempty"`
	// Datasource references the Jaeger data source instance.
	Datasource *common.DataSourceRef `json:"datasource,omitempty"`
	// QueryType is JaegerQueryTypeSearch for a trace search; empty means a
	// trace ID lookup in Query.
	QueryType string `json:"queryType,omitempty"`
	// Service is the service.name to search; Jaeger requires it for search.
	Service string `json:"service,omitempty"`
	// Operation is the span name to search for.
	Operation string `json:"operation,omitempty"`
	// Tags are span tags to match, in logfmt (key="value" pairs).
	Tags string `json:"tags,omitempty"`
	// MinDuration is the shortest trace duration to return (a Go-style
	// duration such as "1.2s"); empty means no lower bound.
	MinDuration string `json:"minDuration,omitempty"`
	// MaxDuration is the longest trace duration to return; empty means no
	// upper bound.
	MaxDuration string `json:"maxDuration,omitempty"`
	// Limit is the maximum number of traces returned; zero leaves the data
	// source's default.
	Limit int64 `json:"limit,omitempty"`
	// Query is a trace ID when QueryType is empty.
	Query string `json:"query,omitempty"`
}

var _ variants.Dataquery = JaegerQuery{}

// ImplementsDataqueryVariant marks JaegerQuery as a Dataquery variant.
func (JaegerQuery) ImplementsDataqueryVariant() {}

// DataqueryType returns the plugin id the variant is registered under.
func (JaegerQuery) DataqueryType() string { return JaegerPluginID }

// Equals reports whether other is a JaegerQuery with the same fields.
func (q JaegerQuery) Equals(other variants.Dataquery) bool {
	o, ok := other.(JaegerQuery)
	if !ok {
		p, isPtr := other.(*JaegerQuery)
		if !isPtr || p == nil {
			return false
		}
		o = *p
	}
	a, errA := json.Marshal(q)
	b, errB := json.Marshal(o)
	return errA == nil && errB == nil && bytes.Equal(a, b)
}

// Validate checks what Grafana needs to run the query: a search names a
// service, a trace lookup names a trace ID.
func (q JaegerQuery) Validate() error {
	var errs cog.BuildErrors
	if q.RefID == "" {
		errs = append(errs, &cog.BuildError{Path: "refId", Message: "must not be empty"})
	}
	switch q.QueryType {
	case JaegerQueryTypeSearch:
		if q.Service == "" {
			errs = append(errs, &cog.BuildError{Path: "service", Message: "a search needs a service"})
		}
	case "":
		if q.Query == "" {
			errs = append(errs, &cog.BuildError{Path: "query", Message: "a trace lookup needs a trace ID"})
		}
	default:
		errs = append(errs, &cog.BuildError{Path: "queryType", Message: fmt.Sprintf("unsupported query type %q", q.QueryType)})
	}
	if q.Limit < 0 {
		errs = append(errs, &cog.BuildError{Path: "limit", Message: "must not be negative"})
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}

// UnmarshalJSONStrict decodes raw into q, failing on unknown fields, on
// trailing data and on a query that does not validate.
func (q *JaegerQuery) UnmarshalJSONStrict(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	var out JaegerQuery
	if err := dec.Decode(&out); err != nil {
		return fmt.Errorf("jaeger query: %w", err)
	}
	if dec.More() {
		return errors.New("jaeger query: trailing data after the object")
	}
	if err := out.Validate(); err != nil {
		return fmt.Errorf("jaeger query: %w", err)
	}
	*q = out
	return nil
}

// JaegerVariantConfig describes JaegerQuery to the SDK's runtime. Register it
// with cog.NewRuntime().RegisterDataqueryVariant before unmarshalling a
// dashboard that holds Jaeger targets, or they decode as untyped maps.
func JaegerVariantConfig() variants.DataqueryConfig {
	return variants.DataqueryConfig{
		Identifier: JaegerPluginID,
		DataqueryUnmarshaler: func(raw []byte) (variants.Dataquery, error) {
			var q JaegerQuery
			if err := json.Unmarshal(raw, &q); err != nil {
				return nil, fmt.Errorf("jaeger query: %w", err)
			}
			return q, nil
		},
		StrictDataqueryUnmarshaler: func(raw []byte) (variants.Dataquery, error) {
			var q JaegerQuery
			if err := q.UnmarshalJSONStrict(raw); err != nil {
				return nil, err
			}
			return q, nil
		},
	}
}

// JaegerQueryBuilder builds a JaegerQuery for a panel's WithTarget.
type JaegerQueryBuilder struct {
	q JaegerQuery
}

var _ cog.Builder[variants.Dataquery] = (*JaegerQueryBuilder)(nil)

// NewJaegerSearch starts a trace search for operation in service.
func NewJaegerSearch(service, operation string) *JaegerQueryBuilder {
	return &JaegerQueryBuilder{q: JaegerQuery{
		QueryType: JaegerQueryTypeSearch,
		Service:   service,
		Operation: operation,
	}}
}

// RefID sets the target's reference id.
func (b *JaegerQueryBuilder) RefID(id string) *JaegerQueryBuilder {
	b.q.RefID = id
	return b
}

// Datasource sets the data source reference.
func (b *JaegerQueryBuilder) Datasource(ref common.DataSourceRef) *JaegerQueryBuilder {
	b.q.Datasource = &ref
	return b
}

// Tags sets the logfmt tag filter.
func (b *JaegerQueryBuilder) Tags(logfmt string) *JaegerQueryBuilder {
	b.q.Tags = logfmt
	return b
}

// Limit sets the maximum number of traces.
func (b *JaegerQueryBuilder) Limit(n int64) *JaegerQueryBuilder {
	b.q.Limit = n
	return b
}

// Build validates and returns the query.
func (b *JaegerQueryBuilder) Build() (variants.Dataquery, error) {
	if err := b.q.Validate(); err != nil {
		return nil, err
	}
	return b.q, nil
}
