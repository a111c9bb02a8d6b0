package dashboards

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// Plugin ids used as data source types.
const prometheusPluginID = "prometheus"

// Variable names shared by the dashboards and by Panels' expansion.
const (
	varAgent     = "agent"
	varTenant    = "tenant"
	varService   = "service"
	varCollector = "collector"
)

func promDatasource() common.DataSourceRef {
	return common.DataSourceRef{Type: strPtr(prometheusPluginID), Uid: strPtr(PrometheusUID)}
}

func jaegerDatasource() common.DataSourceRef {
	return common.DataSourceRef{Type: strPtr(JaegerPluginID), Uid: strPtr(JaegerUID)}
}

func strPtr(s string) *string { return &s }

// promRange is a range query for a time series panel.
func promRange(refID, expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().
		Datasource(promDatasource()).
		RefId(refID).
		Expr(expr).
		Range().
		LegendFormat(legend)
}

// promInstant is an instant query for stat, bar gauge and table panels.
func promInstant(refID, expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().
		Datasource(promDatasource()).
		RefId(refID).
		Expr(expr).
		Instant().
		LegendFormat(legend)
}

// agentVariable is the agent picker, filled from the agent label of the
// invocation counter. multi allows several agents and "All".
func agentVariable(multi bool) *dashboard.QueryVariableBuilder {
	q := fmt.Sprintf("label_values(%s, %s)", metricInvocations, labelAgent)
	v := dashboard.NewQueryVariableBuilder(varAgent).
		Label("Agent").
		Description("gen_ai.agent.name of the invocation's root span").
		Datasource(promDatasource()).
		Query(dashboard.StringOrMap{String: strPtr(q)}).
		Definition(q).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc)
	if multi {
		v = v.Multi(true).IncludeAll(true).AllValue(".*")
	}
	return v
}

// tenantVariable is the tenant picker, filled from the tenant label of the
// invocation counter; "All" (the default) also matches a collector without
// tenants, whose metrics have no tenant label.
func tenantVariable() *dashboard.QueryVariableBuilder {
	q := fmt.Sprintf("label_values(%s, %s)", metricInvocations, labelTenant)
	return dashboard.NewQueryVariableBuilder(varTenant).
		Label("Tenant").
		Description("invocation.tenant of the summaries (a collector with the processor's tenant setting)").
		Datasource(promDatasource()).
		Query(dashboard.StringOrMap{String: strPtr(q)}).
		Definition(q).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).IncludeAll(true).AllValue(".*")
}

func thresholds(steps ...dashboard.Threshold) *dashboard.ThresholdsConfigBuilder {
	return dashboard.NewThresholdsConfigBuilder().
		Mode(dashboard.ThresholdsModeAbsolute).
		Steps(steps)
}

func step(value *float64, color string) dashboard.Threshold {
	return dashboard.Threshold{Value: value, Color: color}
}

func f64(v float64) *float64 { return &v }

func link(title, url string) *dashboard.DashboardLinkBuilder {
	return dashboard.NewDashboardLinkBuilder(title).
		Type(dashboard.DashboardLinkTypeLink).
		Url(url)
}
