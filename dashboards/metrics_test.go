package dashboards_test

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/agentledger/agentledger/dashboards"
)

// promMetrics maps each Prometheus series name to the labels it may carry.
type promMetrics map[string]map[string]bool

func (m promMetrics) add(name string, labels ...string) {
	if m[name] == nil {
		m[name] = map[string]bool{}
	}
	for _, l := range labels {
		m[name][l] = true
	}
}

// promName translates an OTel metric name and unit the way the prometheus
// exporter does with UnderscoreEscapingWithSuffixes (and the collector's
// own telemetry does): dots become underscores, a unit becomes a suffix
// unless it is an {annotation}, monotonic sums get _total.
func promName(t *testing.T, name, unit string, monotonic bool) string {
	t.Helper()
	n := strings.ReplaceAll(name, ".", "_")
	suffix := map[string]string{"ms": "milliseconds", "s": "seconds", "By": "bytes", "1": "ratio"}
	switch {
	case unit == "" || strings.HasPrefix(unit, "{"):
	case suffix[unit] != "":
		n += "_" + suffix[unit]
	default:
		t.Fatalf("no Prometheus suffix known for unit %q of %s; extend promName", unit, name)
	}
	if monotonic {
		n += "_total"
	}
	return n
}

func promLabel(attr string) string { return strings.ReplaceAll(attr, ".", "_") }

// exportedMetrics reads what collector-config/jaeger.yaml's signal_to_metrics
// connectors produce, as Prometheus names and labels.
func exportedMetrics(t *testing.T, into promMetrics) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "collector-config", "jaeger.yaml"))
	require.NoError(t, err)
	var cfg struct {
		Connectors map[string]struct {
			Spans []struct {
				Name       string `yaml:"name"`
				Unit       string `yaml:"unit"`
				Attributes []struct {
					Key string `yaml:"key"`
				} `yaml:"attributes"`
				IncludeResourceAttributes []struct {
					Key string `yaml:"key"`
				} `yaml:"include_resource_attributes"`
				Sum *struct {
					Monotonic bool `yaml:"monotonic"`
				} `yaml:"sum"`
				Histogram *struct{} `yaml:"histogram"`
				Gauge     *struct{} `yaml:"gauge"`
			} `yaml:"spans"`
		} `yaml:"connectors"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &cfg))
	n := 0
	for id, c := range cfg.Connectors {
		if !strings.HasPrefix(id, "signal_to_metrics") {
			continue
		}
		for _, m := range c.Spans {
			labels := []string{"job", "instance", "service_name"}
			for _, a := range m.Attributes {
				labels = append(labels, promLabel(a.Key))
			}
			for _, a := range m.IncludeResourceAttributes {
				labels = append(labels, promLabel(a.Key))
			}
			switch {
			case m.Sum != nil:
				into.add(promName(t, m.Name, m.Unit, m.Sum.Monotonic), labels...)
			case m.Gauge != nil:
				into.add(promName(t, m.Name, m.Unit, false), labels...)
			case m.Histogram != nil:
				base := promName(t, m.Name, m.Unit, false)
				into.add(base+"_bucket", append(labels, "le")...)
				into.add(base+"_sum", labels...)
				into.add(base+"_count", labels...)
			}
			n++
		}
	}
	require.Positive(t, n, "no signal_to_metrics span metrics in collector-config/jaeger.yaml")
}

// internalMetrics reads the invocation processor's internal telemetry from
// its metadata.yaml, as the collector's Prometheus endpoint names it.
func internalMetrics(t *testing.T, into promMetrics) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "processor", "invocationprocessor", "metadata.yaml"))
	require.NoError(t, err)
	var md struct {
		Telemetry struct {
			Metrics map[string]struct {
				Unit string `yaml:"unit"`
				Sum  *struct {
					Monotonic bool `yaml:"monotonic"`
				} `yaml:"sum"`
				Gauge      *struct{} `yaml:"gauge"`
				Histogram  *struct{} `yaml:"histogram"`
				Attributes []string  `yaml:"attributes"`
			} `yaml:"metrics"`
		} `yaml:"telemetry"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &md))
	require.NotEmpty(t, md.Telemetry.Metrics)
	for name, m := range md.Telemetry.Metrics {
		labels := append([]string{"job", "instance", "otelcol_component_id", "otelcol_component_kind", "otelcol_pipeline_id", "otelcol_signal"}, m.Attributes...)
		full := "otelcol." + name
		switch {
		case m.Sum != nil:
			into.add(promName(t, full, m.Unit, m.Sum.Monotonic), labels...)
		case m.Gauge != nil:
			into.add(promName(t, full, m.Unit, false), labels...)
		case m.Histogram != nil:
			base := promName(t, full, m.Unit, false)
			into.add(base+"_bucket", append(labels, "le")...)
			into.add(base+"_sum", labels...)
			into.add(base+"_count", labels...)
		}
	}
}

// TestQueriesUseCollectorMetrics checks every metric and label a Prometheus
// query names against what the collector configuration actually exports,
// so a renamed metric or label there fails here rather than in Grafana.
func TestQueriesUseCollectorMetrics(t *testing.T) {
	known := promMetrics{}
	exportedMetrics(t, known)
	internalMetrics(t, known)

	qs, err := dashboards.Panels()
	require.NoError(t, err)
	p := parser.NewParser(parser.Options{})
	used := map[string]bool{}
	for _, q := range qs {
		if q.Kind != dashboards.KindPrometheus {
			continue
		}
		text, err := q.Query(dashboards.DefaultVars())
		require.NoError(t, err)
		expr, err := p.ParseExpr(text)
		require.NoError(t, err, text)

		var names []string
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			if vs, ok := n.(*parser.VectorSelector); ok {
				names = append(names, vs.Name)
				labels, exported := known[vs.Name]
				if !assert.True(t, exported, "%s (%s): metric %s is not exported by collector-config/jaeger.yaml or the processor's telemetry", q.Panel, q.RefID, vs.Name) {
					return nil
				}
				used[vs.Name] = true
				for _, m := range vs.LabelMatchers {
					if m.Name == "__name__" {
						continue
					}
					assert.True(t, labels[m.Name], "%s (%s): %s has no label %s", q.Panel, q.RefID, vs.Name, m.Name)
				}
			}
			return nil
		})
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			agg, ok := n.(*parser.AggregateExpr)
			if !ok {
				return nil
			}
			for _, g := range agg.Grouping {
				var found bool
				for _, name := range names {
					found = found || known[name][g]
				}
				assert.True(t, found, "%s (%s): grouping label %s is on none of %v", q.Panel, q.RefID, g, names)
			}
			return nil
		})
	}

	// Every metric docs/metrics.md promises a panel for is on a dashboard.
	var missing []string
	for _, want := range []string{
		"agentledger_model_tokens_total",
		"agentledger_invocation_tokens_total",
		"agentledger_invocation_after_result_tokens_total",
		"agentledger_invocations_total",
		"agentledger_invocation_incomplete_total",
		"agentledger_invocation_time_to_final_milliseconds_bucket",
		"otelcol_processor_invocation_open_invocations",
	} {
		if !used[want] {
			missing = append(missing, want)
		}
	}
	sort.Strings(missing)
	assert.Empty(t, missing, "metrics no panel queries")
}
