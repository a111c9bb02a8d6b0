package dashboards

import (
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/bargauge"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// agentSel is the label matcher every query of the summaries' metrics
// carries: the agents and tenants chosen, and the summary marker (the
// collector that made the summary; CONTRACT.md v0.3).
var agentSel = fmt.Sprintf(`%s=~"$%s", %s=~"$%s", %s!=""`, labelAgent, varAgent, labelTenant, varTenant, labelCollector)

// Overview queries, named so that the invocation dashboard reuses them.
var (
	exprModelTokensByModelKind = fmt.Sprintf(`sum by (%s, %s) (rate(%s[$__rate_interval]))`,
		labelModel, labelKind, metricModelTokens)
	exprTokensByAgent = fmt.Sprintf(`sum by (%s) (rate(%s{%s, %s=~"%s"}[$__rate_interval]))`,
		labelAgent, metricInvocationTokens, agentSel, labelKind, kindsAll)
	exprTokensByKind = fmt.Sprintf(`sum by (%s) (rate(%s{%s}[$__rate_interval]))`,
		labelKind, metricInvocationTokens, agentSel)
	exprAfterResultShareRange = fmt.Sprintf(`sum(increase(%s{%s}[$__range])) / sum(increase(%s{%s, %s=~"%s"}[$__range]))`,
		metricAfterResultTokens, agentSel, metricInvocationTokens, agentSel, labelKind, kindsAll)
	exprAfterResultShareOverTime = fmt.Sprintf(`sum(rate(%s{%s}[$__rate_interval])) / sum(rate(%s{%s, %s=~"%s"}[$__rate_interval]))`,
		metricAfterResultTokens, agentSel, metricInvocationTokens, agentSel, labelKind, kindsAll)
	exprInvocationsByStatusRate = fmt.Sprintf(`sum by (%s) (rate(%s{%s}[$__rate_interval]))`,
		labelStatus, metricInvocations, agentSel)
	exprInvocationsByStatusRange = fmt.Sprintf(`sum by (%s) (increase(%s{%s}[$__range]))`,
		labelStatus, metricInvocations, agentSel)
	exprOpenInvocations   = fmt.Sprintf(`sum(%s)`, metricOpenInvocations)
	exprIncompleteReasons = fmt.Sprintf(`sum by (%s) (increase(%s{%s}[$__range]))`,
		labelReasons, metricIncomplete, agentSel)
)

// exprTimeToFinal is the q-quantile of the time from the root's end to the
// invocation being final, in seconds.
func exprTimeToFinal(q string) string {
	return fmt.Sprintf(`histogram_quantile(%s, sum by (le) (rate(%s{%s}[$__rate_interval]))) / %s`,
		q, metricTimeToFinalBucket, agentSel, timeToFinalScale)
}

// Overview builds the overview dashboard: token usage by model, kind and
// agent, the share of tokens spent after the caller got its result, and how
// invocations close (final or incomplete, how fast, and why not).
func Overview() (dashboard.Dashboard, error) {
	b := dashboard.NewDashboardBuilder("AgentLedger: overview").
		Uid(OverviewUID).
		Description("Exact, final token accounting for AI coding agents: usage by model, kind and agent, usage after the result, and invocation finality.").
		Tags([]string{"agentledger", "gen_ai"}).
		Timezone(common.TimeZoneUtc).
		Time("now-6h", "now").
		Refresh("30s").
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Readonly().
		WithVariable(agentVariable(true)).
		WithVariable(tenantVariable()).
		Link(link("Invocations", "/d/"+InvocationUID).
			Icon("dashboard").
			IncludeVars(false).
			KeepTime(true)).
		WithRow(dashboard.NewRowBuilder("Tokens").Id(100)).
		WithPanel(timeseries.NewPanelBuilder().
			Id(1).
			Title("Tokens by model and kind").
			Description("Tokens per second reported by model-call spans of all agents as they arrive, by requested model and token type. Cache reads and creations are part of input, reasoning part of output. A span delivered twice counts twice here; the per-agent panels count each invocation's exact totals once.").
			Datasource(promDatasource()).
			Unit("short").
			Min(0).
			Height(9).Span(12).
			WithTarget(promRange("A", exprModelTokensByModelKind, fmt.Sprintf("{{%s}} {{%s}}", labelModel, labelKind)))).
		WithPanel(timeseries.NewPanelBuilder().
			Id(2).
			Title("Tokens by agent").
			Description("Input plus output tokens per second by agent, from each invocation's exact totals, counted when the invocation closes (first final or incomplete summary).").
			Datasource(promDatasource()).
			Unit("short").
			Min(0).
			Height(9).Span(12).
			WithTarget(promRange("A", exprTokensByAgent, fmt.Sprintf("{{%s}}", labelAgent)))).
		WithPanel(stat.NewPanelBuilder().
			Id(3).
			Title("After-result share").
			Description("Share of all tokens (input + output) spent by model calls that started after the caller received its result, over the selected range.").
			Datasource(promDatasource()).
			Unit("percentunit").
			Decimals(1).
			Height(6).Span(6).
			Thresholds(thresholds(step(nil, "green"), step(f64(0.25), "orange"), step(f64(0.5), "red"))).
			ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
			WithTarget(promInstant("A", exprAfterResultShareRange, "after-result share"))).
		WithPanel(timeseries.NewPanelBuilder().
			Id(4).
			Title("After-result share over time").
			Description("After-result tokens / all tokens, per rate window.").
			Datasource(promDatasource()).
			Unit("percentunit").
			Min(0).
			Max(1).
			Height(6).Span(18).
			WithTarget(promRange("A", exprAfterResultShareOverTime, "after-result share"))).
		WithRow(dashboard.NewRowBuilder("Invocations").Id(101)).
		WithPanel(timeseries.NewPanelBuilder().
			Id(5).
			Title("Final vs incomplete invocations").
			Description("Invocations closed per second by status. incomplete means open_timeout, eviction or shutdown closed the invocation before its obligations were met. Each invocation counts once, at its first final or incomplete summary.").
			Datasource(promDatasource()).
			Unit("ops").
			Min(0).
			Height(8).Span(9).
			WithTarget(promRange("A", exprInvocationsByStatusRate, fmt.Sprintf("{{%s}}", labelStatus)))).
		WithPanel(stat.NewPanelBuilder().
			Id(6).
			Title("Invocations in range").
			Description("Final and incomplete invocations over the selected range.").
			Datasource(promDatasource()).
			Unit("short").
			Decimals(0).
			Height(8).Span(5).
			ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
			WithTarget(promInstant("A", exprInvocationsByStatusRange, fmt.Sprintf("{{%s}}", labelStatus)))).
		WithPanel(timeseries.NewPanelBuilder().
			Id(7).
			Title("Time to final").
			Description("Percentiles of the time from the root span's end (the caller got its result) to the invocation's last member span, for invocations that became final.").
			Datasource(promDatasource()).
			Unit("s").
			Min(0).
			Height(8).Span(10).
			WithTarget(promRange("A", exprTimeToFinal("0.5"), "p50")).
			WithTarget(promRange("B", exprTimeToFinal("0.9"), "p90")).
			WithTarget(promRange("C", exprTimeToFinal("0.99"), "p99"))).
		WithPanel(timeseries.NewPanelBuilder().
			Id(8).
			Title("Open invocations").
			Description("Invocations the processor holds open (root or obligations outstanding), from the collector's internal telemetry.").
			Datasource(promDatasource()).
			Unit("short").
			Min(0).
			Height(8).Span(12).
			WithTarget(promRange("A", exprOpenInvocations, "open"))).
		WithPanel(bargauge.NewPanelBuilder().
			Id(9).
			Title("Incomplete reasons").
			Description("Incomplete invocations over the selected range by their invocation.incomplete_reasons list (JSON of kind:detail entries, e.g. [\"open_followup:background shell\"]).").
			Datasource(promDatasource()).
			Unit("short").
			Decimals(0).
			Min(0).
			Height(8).Span(12).
			DisplayMode(common.BarGaugeDisplayModeBasic).
			Orientation(common.VizOrientationHorizontal).
			ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
			WithTarget(promInstant("A", exprIncompleteReasons, fmt.Sprintf("{{%s}}", labelReasons))))
	d, err := b.Build()
	if err != nil {
		return dashboard.Dashboard{}, fmt.Errorf("build overview dashboard: %w", err)
	}
	return d, nil
}
