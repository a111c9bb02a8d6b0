package dashboards

// Data source UIDs. provisioning/datasources/agentledger.yaml creates the data
// sources under exactly these UIDs; every panel and target references them.
const (
	// PrometheusUID is the UID of the provisioned Prometheus data source.
	PrometheusUID = "agentledger-prometheus"
	// JaegerUID is the UID of the provisioned Jaeger data source.
	JaegerUID = "agentledger-jaeger"
)

// Dashboard UIDs, stable so that links between the dashboards survive
// re-provisioning.
const (
	// OverviewUID is the UID of the overview dashboard.
	OverviewUID = "agentledger-overview"
	// InvocationUID is the UID of the invocation drill-down dashboard.
	InvocationUID = "agentledger-invocation"
)

// Prometheus-side metric and label names. These are what the prometheus
// exporter in collector-config/jaeger.yaml publishes for the
// signal_to_metrics connector's metrics (dots become underscores, counters
// get _total, units become suffixes) and for the invocation processor's
// internal telemetry (otelcol_ prefix). PLACEHOLDERS until collector-config
// and docs/metrics.md land; this is the only block to change then.
const (
	metricTokens            = "agentledger_tokens_total"
	metricAfterResultTokens = "agentledger_after_result_tokens_total"
	metricInvocations       = "agentledger_invocations_total"
	metricTimeToFinalBucket = "agentledger_invocation_time_to_final_milliseconds_bucket"
	metricOpenInvocations   = "otelcol_processor_invocation_open_invocations"
	metricIncomplete        = "agentledger_invocations_incomplete_total"

	labelModel  = "gen_ai_response_model"
	labelKind   = "token_kind"
	labelAgent  = "gen_ai_agent_name"
	labelStatus = "invocation_status"
	labelReason = "invocation_incomplete_reason"

	// kindsAll selects the token kinds that add up to all tokens (cache and
	// reasoning counts are already part of input and output).
	kindsAll = "input|output"

	// timeToFinalScale turns the histogram's unit into seconds.
	timeToFinalScale = "1000"

	// summaryService is the service.name the Jaeger search looks in for
	// invocation.summary spans.
	summaryService = "$service"
)
