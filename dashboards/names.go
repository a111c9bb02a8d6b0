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

// Prometheus-side metric and label names, as docs/metrics.md lists them:
// what the prometheus exporter in collector-config/jaeger.yaml publishes
// (translation UnderscoreEscapingWithSuffixes: dots become underscores,
// counters get _total, units become suffixes, {annotations} are dropped) for
// the signal_to_metrics connectors, and the invocation processor's internal
// telemetry (processor/invocationprocessor/metadata.yaml, otelcol_ prefix)
// from the collector's own metrics endpoint.
const (
	// metricModelTokens counts tokens of model-call spans as they arrive
	// (labelModel, labelKind; no agent). A span delivered twice counts twice.
	metricModelTokens = "agentledger_model_tokens_total"
	// metricInvocationTokens counts each closed invocation's exact totals
	// once, at its first final or incomplete summary (labelAgent, labelKind).
	metricInvocationTokens = "agentledger_invocation_tokens_total"
	// metricAfterResultTokens is the part of metricInvocationTokens from
	// model calls that started after the root ended (kinds input, output).
	metricAfterResultTokens = "agentledger_invocation_after_result_tokens_total"
	// metricInvocations counts closed invocations (labelAgent, labelStatus).
	metricInvocations = "agentledger_invocations_total"
	// metricIncomplete counts incomplete invocations (labelAgent,
	// labelReasons: the reasons list as JSON).
	metricIncomplete = "agentledger_invocation_incomplete_total"
	// metricTimeToFinalBucket is the histogram of invocation.time_to_final_ms
	// of final invocations (labelAgent).
	metricTimeToFinalBucket = "agentledger_invocation_time_to_final_milliseconds_bucket"
	// metricOpenInvocations is the processor's gauge of open invocations.
	metricOpenInvocations = "otelcol_processor_invocation_open_invocations"

	labelModel   = "gen_ai_request_model"
	labelKind    = "gen_ai_token_type"
	labelAgent   = "gen_ai_agent_name"
	labelStatus  = "invocation_status"
	labelReasons = "invocation_incomplete_reasons"
	// labelTenant is the summary's invocation.tenant (absent without
	// tenants); labelCollector is the marker's invocation.collector, the
	// collector that made the summary.
	labelTenant    = "invocation_tenant"
	labelCollector = "invocation_collector"
	// labelService is the agent's service.name: the exporter derives job from
	// it and Prometheus keeps it (honor_labels). For the invocation metrics it
	// is the service of the summary span, the one Jaeger searches.
	labelService = "job"

	// kindsAll selects the token kinds that add up to all tokens (cache and
	// reasoning counts are already part of input and output).
	kindsAll = "input|output"

	// timeToFinalScale turns the histogram's unit (milliseconds) into seconds.
	timeToFinalScale = "1000"
)
