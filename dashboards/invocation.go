package dashboards

import (
	"fmt"
	"net/url"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"

	"github.com/agentledger/agentledger/contract"
)

// summaryLimit bounds the number of summaries the drill-down lists.
const summaryLimit = 100

// jaegerTraceIDField is the field that holds the trace ID in the frame
// Grafana's Jaeger data source returns for a search.
const jaegerTraceIDField = "traceID"

// summaryService is the Jaeger service searched: the service variable.
var summaryService = "$" + varService

// summaryTags filters invocation.summary spans by the agent variable and by
// the summary marker's invocation.collector (a resource attribute, which
// Jaeger's search matches; the scope name, the marker's other part, it
// does not). Jaeger matches exact values, so the collector is one at a
// time, like the service.
var summaryTags = fmt.Sprintf(`%s="$%s" %s="$%s"`, contract.AttrAgentName, varAgent, contract.AttrSummaryCollector, varCollector)

// collectorVariable picks the collector whose summaries the Jaeger panel
// lists: the marker's invocation.collector, from the agent's metrics.
func collectorVariable() *dashboard.QueryVariableBuilder {
	q := fmt.Sprintf(`label_values(%s{%s}, %s)`, metricInvocations, agentSel, labelCollector)
	return dashboard.NewQueryVariableBuilder(varCollector).
		Label("Collector").
		Description("invocation.collector of the summaries: the collector whose invocation processor made them (Jaeger searches one at a time)").
		Datasource(promDatasource()).
		Query(dashboard.StringOrMap{String: strPtr(q)}).
		Definition(q).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc)
}

// serviceVariable picks the service.name whose traces hold the summaries.
func serviceVariable() *dashboard.QueryVariableBuilder {
	q := fmt.Sprintf(`label_values(%s{%s}, %s)`, metricInvocations, agentSel, labelService)
	return dashboard.NewQueryVariableBuilder(varService).
		Label("Service").
		Description("service.name of the spans that carry invocation.summary (Jaeger searches one service at a time)").
		Datasource(promDatasource()).
		Query(dashboard.StringOrMap{String: strPtr(q)}).
		Definition(q).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc)
}

// exploreTraceURL opens a trace ID in Grafana Explore with the Jaeger data
// source. Grafana substitutes ${__value.raw} before following the link, so
// it stays outside the escaped JSON.
func exploreTraceURL() string {
	head := fmt.Sprintf(`{"trace":{"datasource":%q,"queries":[{"refId":"A","datasource":{"type":%q,"uid":%q},"query":"`,
		JaegerUID, JaegerPluginID, JaegerUID)
	tail := `"}],"range":{"from":"now-24h","to":"now"}}}`
	return "/explore?schemaVersion=1&panes=" + url.QueryEscape(head) + "${__value.raw}" + url.QueryEscape(tail)
}

// Invocation builds the invocation drill-down: the invocation.summary spans of
// one agent from Jaeger, each row linking into its trace, next to that
// agent's token and finality figures from Prometheus.
func Invocation() (dashboard.Dashboard, error) {
	b := dashboard.NewDashboardBuilder("AgentLedger: invocations").
		Uid(InvocationUID).
		Description("Invocation summaries of one agent, with a link from each into its trace in Jaeger.").
		Tags([]string{"agentledger", "gen_ai"}).
		Timezone(common.TimeZoneUtc).
		Time("now-6h", "now").
		Refresh("30s").
		Readonly().
		WithVariable(agentVariable(false)).
		WithVariable(tenantVariable()).
		WithVariable(serviceVariable()).
		WithVariable(collectorVariable()).
		Link(link("Overview", "/d/"+OverviewUID).
			Icon("dashboard").
			KeepTime(true)).
		WithPanel(table.NewPanelBuilder().
			Id(1).
			Title("Invocation summaries").
			Description(fmt.Sprintf("%s spans of agent $%s from Jaeger. Each trace ID opens the trace; the summary span holds the exact usage sums, status, reasons and anomalies.", contract.SpanNameSummary, varAgent)).
			Datasource(jaegerDatasource()).
			Height(12).Span(24).
			Filterable(true).
			Footer(common.NewTableFooterOptionsBuilder().
				Show(false).
				Reducer([]string{"count"}).
				EnablePagination(true)).
			SortBy([]cog.Builder[common.TableSortByFieldState]{
				common.NewTableSortByFieldStateBuilder().DisplayName("Start time").Desc(true),
			}).
			OverrideByName(jaegerTraceIDField, []dashboard.DynamicConfigValue{{
				Id: "links",
				Value: []map[string]any{{
					"title":       "Open trace in Explore",
					"url":         exploreTraceURL(),
					"targetBlank": false,
				}},
			}}).
			WithTarget(NewJaegerSearch(summaryService, contract.SpanNameSummary).
				RefID("A").
				Datasource(jaegerDatasource()).
				Tags(summaryTags).
				Limit(summaryLimit))).
		WithPanel(stat.NewPanelBuilder().
			Id(2).
			Title("Invocations in range").
			Description("Closed invocations of the agent by status over the selected range.").
			Datasource(promDatasource()).
			Unit("short").
			Decimals(0).
			Height(7).Span(6).
			ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
			WithTarget(promInstant("A", exprInvocationsByStatusRange, fmt.Sprintf("{{%s}}", labelStatus)))).
		WithPanel(stat.NewPanelBuilder().
			Id(3).
			Title("After-result share").
			Description("Share of the agent's tokens (input + output) spent by model calls that started after the caller received its result.").
			Datasource(promDatasource()).
			Unit("percentunit").
			Decimals(1).
			Height(7).Span(4).
			ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
			WithTarget(promInstant("A", exprAfterResultShareRange, "after-result share"))).
		WithPanel(timeseries.NewPanelBuilder().
			Id(4).
			Title("Tokens by kind").
			Description("The agent's tokens per second by token type, from each invocation's exact totals, counted when it closes.").
			Datasource(promDatasource()).
			Unit("short").
			Min(0).
			Height(7).Span(8).
			WithTarget(promRange("A", exprTokensByKind, fmt.Sprintf("{{%s}}", labelKind)))).
		WithPanel(timeseries.NewPanelBuilder().
			Id(5).
			Title("Time to final").
			Description("Percentiles of the time from the root span's end to the invocation's last member span, for the agent's final invocations.").
			Datasource(promDatasource()).
			Unit("s").
			Min(0).
			Height(7).Span(6).
			WithTarget(promRange("A", exprTimeToFinal("0.5"), "p50")).
			WithTarget(promRange("B", exprTimeToFinal("0.9"), "p90")))
	d, err := b.Build()
	if err != nil {
		return dashboard.Dashboard{}, fmt.Errorf("build invocation dashboard: %w", err)
	}
	return d, nil
}
