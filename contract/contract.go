// Package contract holds the names of the span attributes, values and span
// names that make up the agentledger wire contract (docs/CONTRACT.md): the
// only public package the instrumentation (instrument/) and the collector
// processor (processor/) share. Besides it they share only the rule that
// reads these names, internal/ledgerrule, and the test cases in
// internal/contract/fixtures. It has no dependencies, so importing it
// compiles neither half.
//
// Where to start reading: the invocation attribute keys, then the values
// of roles, link kinds and followup reasons, the span names, the summary
// marker, the gen_ai keys and values, and the statuses, reasons and
// anomalies of summaries; docs/CONTRACT.md gives the rules they take part
// in.
//
// The gen_ai.* names and values are those of the OpenTelemetry GenAI
// semantic conventions in go.opentelemetry.io/otel/semconv/v1.41.0, the
// newest semconv package of the OpenTelemetry Go module that has the GenAI
// registry (v1.42.0 left it out); a test in instrument/internal/genaireg
// checks each against it, so that contract's own tests import nothing
// either. Names of our own are never in the gen_ai namespace.
package contract

// Attribute keys in the invocation namespace.
const (
	// AttrInvocationID names the invocation a span belongs to. Set on every
	// span at start from the W3C baggage member of the same name.
	AttrInvocationID = "invocation.id"
	// AttrRole marks lifecycle spans: RoleRoot, RoleBackground,
	// RoleContinuation, RoleFollowupClosed, RoleWake, RoleUnrecorded.
	AttrRole = "invocation.role"
	// AttrChildren is the number of direct child spans started in the same
	// process before the span ended (int).
	AttrChildren = "invocation.children"
	// AttrFollowups is, on background spans, the number of follow-up spans
	// that will link to the span (int).
	AttrFollowups = "invocation.followups"
	// AttrRemote marks a span whose context was handed to another process
	// (bool): children may arrive from elsewhere, uncounted.
	AttrRemote = "invocation.remote"
	// AttrLink is the link attribute that says why a span links to a
	// background span: LinkFollowup or LinkConsumed.
	AttrLink = "invocation.link"
	// AttrFollowupReason is the reason a followup was closed without a
	// continuation, on followup_closed spans.
	AttrFollowupReason = "invocation.followup.reason"
	// AttrFollowupConsumer names the invocation whose turn consumed the
	// notification, when the reason is ReasonConsumedBy.
	AttrFollowupConsumer = "invocation.followup.consumer"
	// AttrLateChild (bool) marks a span started after its parent had ended:
	// the parent's AttrChildren does not count it, so it never discharges
	// the parent's count.
	AttrLateChild = "invocation.late_child"
	// AttrUnattributed (string) marks the root span of a turn the runtime
	// started by itself that no invocation can own (a notification of a job
	// nobody saw, a turn started while detached); its value is the reason.
	// Such an invocation is never final: ReasonUnattributedWakeup.
	AttrUnattributed = "invocation.unattributed"
	// AttrUnrecorded (int, agentledger v0.6) is, on a span, the number of
	// direct children of the same invocation it started that were not
	// recorded (the sampler dropped them): the collector never sees them,
	// so the invocation is never final (ReasonNotSampled).
	AttrUnrecorded = "invocation.unrecorded"
	// AttrDetached (int, agentledger v0.6) is, on a span, the number of
	// spans of the same invocation started from its context as roots of
	// new traces; each links to it with LinkDetachedFrom.
	AttrDetached = "invocation.detached"
	// AttrUsageMismatch (bool, agentledger v0.8) is set true by an adapter
	// on an invoke_agent span (a root, a continuation or an unattributed
	// root) when the runtime's own usage report for that turn differs from
	// the usage the model wire counted: AnomalyUsageMismatch. The counted
	// usage stays the invocation's; finality is unchanged.
	AttrUsageMismatch = "invocation.usage.mismatch"
	// AttrSDKLimit (string, agentledger v0.14 SDK settings) is set by the
	// instrumentation on a span whose invocation or session id the SDK's
	// AttributeValueLengthLimit cut: the span is exported with the full
	// id restored and this attribute naming the limit
	// ("attribute_value_length"). Such an invocation is never final:
	// ReasonSDKLimit.
	AttrSDKLimit = "invocation.sdk_limit"
	// AttrDoubleInstrumented (bool, agentledger v0.14 SDK settings) is set
	// true by the instrumentation on a model call that started inside
	// another model call of the same process (two instrumentations of one
	// call): its usage would be counted twice. Such an invocation is
	// never final: ReasonDoubleInstrumented.
	AttrDoubleInstrumented = "invocation.double_instrumented"

	// AttrTenant (string) names the tenant an invocation belongs to. The
	// processor sets it on the summaries it emits when its tenant setting
	// is on; the tenant comes from the authenticated client or a trusted
	// resource attribute, never from the spans' own attributes.
	AttrTenant = "invocation.tenant"

	// BaggageInvocationID is the W3C baggage member that carries the
	// invocation id across process boundaries.
	BaggageInvocationID = "invocation.id"
)

// Values of AttrRole.
const (
	RoleRoot           = "root"
	RoleBackground     = "background"
	RoleContinuation   = "continuation"
	RoleFollowupClosed = "followup_closed"
	// RoleWake (agentledger v0.12) marks a wake span: a zero-length child
	// of a turn the runtime started by itself (a continuation, an
	// unattributed root, a turn that read a job's notification), exported
	// when that turn starts, so the collector learns of the turn before it
	// ends. Its parent is the turn's span, which the invocation owes until
	// it arrives (ReasonRunningTurn).
	RoleWake = "wake"
	// RoleUnrecorded (agentledger v0.14, SDK settings) marks an
	// unrecorded-span declaration: a zero-length root span of its own
	// trace, named as the span it declares, with invocation.unrecorded =
	// 1, that the instrumentation exports (past the sampler) for a span
	// of the invocation the sampler dropped when no open span of the
	// invocation in its process can count it. The rule reads any span
	// with this role as not_sampled:<span name>, whatever its count.
	RoleUnrecorded = "unrecorded"
)

// Values of AttrLink.
const (
	LinkFollowup = "followup"
	LinkConsumed = "consumed"
	// LinkLaunchedBy is the link from a background span to the span that
	// launched it, when that span had already ended and the job is
	// parented on the invocation's nearest open span instead.
	LinkLaunchedBy = "launched_by"
	// LinkDetachedFrom is the link from a span that started a new trace
	// inside an invocation to the span in whose context it started; it
	// discharges one of that span's AttrDetached (agentledger v0.6).
	LinkDetachedFrom = "detached_from"
)

// Values of AttrFollowupReason.
const (
	ReasonInterrupted   = "interrupted"
	ReasonSessionClosed = "session_closed"
	ReasonCancelled     = "cancelled"
	ReasonConsumedBy    = "consumed_by"
	// ReasonAbandoned: the instrumentation stops waiting for a
	// notification it cannot tell the fate of (it may still start a
	// continuation, or never). The followup is discharged, but the
	// invocation is never final: ReasonAbandonedFollowup.
	ReasonAbandoned = "abandoned"
)

// Span names (prefixes: the agent name or job kind follows after a space).
const (
	SpanNameRootPrefix         = "invoke_agent"
	SpanNameBackgroundPrefix   = "background"
	SpanNameContinuationPrefix = "continue_agent"
	SpanNameFollowupClosed     = "followup_closed"
	// SpanNameWakePrefix names wake spans: "wake_agent {agent}".
	SpanNameWakePrefix = "wake_agent"
	SpanNameSummary    = "invocation.summary"
)

// The summary marker: a summary span is one only when its instrumentation
// scope is SummaryScopeName and its resource carries
// AttrSummaryCollector. The processor drops every incoming span named
// SpanNameSummary (unless it trusts the collector that sent it), so no
// client can make a span that passes both tests reach an exporter behind
// it; metrics and dashboards select summaries on the marker, not on the
// span name alone.
const (
	// SummaryScopeName is the instrumentation scope of the summary spans the
	// processor emits: its import path.
	SummaryScopeName = "github.com/agentledger/agentledger/processor/invocationprocessor"
	// AttrSummaryCollector (string, a resource attribute of summary spans)
	// names the collector whose processor emitted the summary.
	AttrSummaryCollector = "invocation.collector"
)

// GenAI semantic-convention attribute keys used by the contract and the
// adapters. They are untyped constants, usable as a string and as an
// attribute.Key, so they are written out here and checked against the
// semconv package's keys (see the package doc).
const (
	AttrOperationName          = "gen_ai.operation.name"
	AttrUsageInputTokens       = "gen_ai.usage.input_tokens"
	AttrUsageOutputTokens      = "gen_ai.usage.output_tokens"
	AttrUsageCacheReadTokens   = "gen_ai.usage.cache_read.input_tokens"
	AttrUsageCacheCreateTokens = "gen_ai.usage.cache_creation.input_tokens"
	AttrUsageReasoningTokens   = "gen_ai.usage.reasoning.output_tokens"
	AttrConversationID         = "gen_ai.conversation.id"
	AttrAgentName              = "gen_ai.agent.name"
	AttrRequestModel           = "gen_ai.request.model"
	AttrResponseModel          = "gen_ai.response.model"
	// AttrProviderName is set on model calls and, when the adapter knows
	// it, on invoke_agent spans (roots and continuations): a Provider*
	// value when the registry has one.
	AttrProviderName = "gen_ai.provider.name"
	AttrToolName     = "gen_ai.tool.name"
	AttrToolCallID   = "gen_ai.tool.call.id"
	// AttrRequestStream (bool) is true on a model call whose request was
	// streamed; absent when the adapter does not know.
	AttrRequestStream = "gen_ai.request.stream"
)

// Values of AttrOperationName. The semconv package has them only as
// attribute.KeyValue variables; they are checked against those.
const (
	OpChat            = "chat"
	OpTextCompletion  = "text_completion"
	OpGenerateContent = "generate_content"
	OpEmbeddings      = "embeddings"
	OpInvokeAgent     = "invoke_agent"
	OpExecuteTool     = "execute_tool"
)

// Values of AttrProviderName the adapters set, from the registry (checked
// against the semconv package).
const (
	ProviderOpenAI    = "openai"
	ProviderAnthropic = "anthropic"
)

// Attributes the instrumentation adds to model-call spans beyond the
// GenAI registry. The processor does not read them. They are ours, so
// they are in the invocation namespace, not in gen_ai.
const (
	// AttrResponseToolCalls (string array, "name:call_id" each) names the
	// tool calls the model asked for in its response. The registry's
	// gen_ai.output.messages carries them too, but only when content is
	// captured.
	AttrResponseToolCalls = "invocation.response.tool_calls"
	// AttrResponseStreamClosedEarly (bool) is true on a model call whose
	// caller closed the response (a stream, most often) before its end: the
	// usage the provider reports at the end may be missing.
	AttrResponseStreamClosedEarly = "invocation.response.stream_closed_early"
	// AttrResponseEnding (string, one of the Ending* values) says how a
	// model call ended (CONTRACT.md, "How a model call ended"). It is a
	// diagnostic: what the ending means for the bill is already in the
	// span (usage when known; status Error and no usage when not billed;
	// neither when unknown, which rule 5 reads as usage_missing).
	AttrResponseEnding = "invocation.response.ending"
)

// Values of AttrResponseEnding: how a model call ended, and so what the
// provider billed for it (known, none, or unknown).
const (
	// EndingComplete: the response's terminal usage event (or its whole
	// body) was read and carried usage. Billed: that usage.
	EndingComplete = "complete"
	// EndingErrorStatus: the provider answered with an error status (and
	// the caller did not retry it). Not billed.
	EndingErrorStatus = "error_status"
	// EndingNotSent: the request never reached the provider (the
	// connection could not be made). Not billed.
	EndingNotSent = "not_sent"
	// EndingNoResponse: the request was sent and the connection failed
	// before a response. Unknown.
	EndingNoResponse = "no_response"
	// EndingTimeout: the caller's deadline passed after the request was
	// sent. Unknown.
	EndingTimeout = "timeout"
	// EndingCut: the response began and broke off (or its stream ended)
	// before its terminal usage event. Unknown.
	EndingCut = "cut"
	// EndingCallerClosed: the caller closed the response, or gave up
	// waiting for it, before its terminal usage event. Unknown.
	EndingCallerClosed = "caller_closed"
	// EndingErrorEvent: a response with a success status carried an error
	// (an error event or object) instead of its end. Unknown.
	EndingErrorEvent = "error_event"
	// EndingNoUsage: the response ended normally without usage. Unknown.
	EndingNoUsage = "no_usage"
)

// DefaultUsageOperations are the operation names whose spans are model calls
// whose usage is summed.
var DefaultUsageOperations = []string{OpChat, OpTextCompletion, OpGenerateContent, OpEmbeddings}

// Summary span attributes (emitted by the processor).
const (
	AttrStatus            = "invocation.status"
	AttrIncompleteReasons = "invocation.incomplete_reasons"
	AttrAnomalies         = "invocation.anomalies"
	AttrRevision          = "invocation.revision"
	AttrAfterResultInput  = "invocation.after_result.input_tokens"
	AttrAfterResultOutput = "invocation.after_result.output_tokens"
	AttrModelCalls        = "invocation.model_calls"
	AttrBackgroundJobs    = "invocation.background_jobs"
	AttrContinuations     = "invocation.continuations"
	AttrSpans             = "invocation.spans"
	AttrTraces            = "invocation.traces"
	AttrDuplicateSpans    = "invocation.duplicate_spans"
	// AttrTimeToFinalMS (int, an extension of CONTRACT.md) is the latest end
	// of any member span minus the root's end, in milliseconds; 0 when
	// nothing ended after the root. Absent when the root never arrived.
	AttrTimeToFinalMS = "invocation.time_to_final_ms"
	AttrCost          = "invocation.cost"
	AttrCostCurrency  = "invocation.cost.currency"
)

// Values of AttrStatus.
const (
	StatusPending    = "pending"
	StatusFinal      = "final"
	StatusIncomplete = "incomplete"
)

// Kinds used in AttrIncompleteReasons and AttrAnomalies entries
// ("kind:detail").
const (
	ReasonOpenFollowup    = "open_followup"
	ReasonMissingChildren = "missing_children"
	ReasonRootMissing     = "root_missing"
	ReasonOpenTimeout     = "open_timeout"
	ReasonEvicted         = "evicted"
	ReasonShutdown        = "shutdown"
	ReasonRemoteSettling  = "remote_settling"
	// ReasonUsageMissing: a model call that did not fail carries neither
	// input nor output token usage ("usage_missing:<span name>").
	ReasonUsageMissing = "usage_missing"
	// ReasonInvalidUsage: a usage attribute of a model call is not a
	// non-negative integer (or would overflow the sum); it is not summed, so
	// the totals cannot be exact ("invalid_usage:<key> on <span name>").
	ReasonInvalidUsage = "invalid_usage"
	// ReasonMalformedParentage: a span is its own parent, its parent lies
	// in another trace, or the parent relation has a cycle.
	ReasonMalformedParentage = "malformed_parentage"
	// ReasonMalformedLink: a followup link to the linking span itself, or a
	// span that both follows up and consumes the same job.
	ReasonMalformedLink = "malformed_link"
	// ReasonSpanIDReused: two spans of one invocation share a span ID but
	// not a trace ID.
	ReasonSpanIDReused = "span_id_reused"
	// ReasonUnattributedWakeup: the invocation is a turn nobody can own
	// ("unattributed_wakeup:<reason>").
	ReasonUnattributedWakeup = "unattributed_wakeup"
	// ReasonAbandonedFollowup: a followup_closed span of the invocation
	// has reason ReasonAbandoned (agentledger v0.5); detail is that span's
	// name.
	ReasonAbandonedFollowup = "abandoned_followup"
	// ReasonNotSampled: the root span was not recorded (in-process
	// ledger: "not_sampled"), or a span of the invocation was not recorded
	// ("not_sampled:<span name>", naming the span that counted it in
	// AttrUnrecorded, or the unrecorded model call in process).
	ReasonNotSampled = "not_sampled"
	// ReasonMalformedAttribute: a rule attribute of a span or of one of its
	// links has the wrong type, or its key is repeated with different
	// values ("malformed_attribute:<key> on <span name>", agentledger v0.6).
	ReasonMalformedAttribute = "malformed_attribute"
	// ReasonMissingDetached: a span's AttrDetached counts more new-trace
	// spans than have arrived linking to it ("missing_detached:<span
	// name>", agentledger v0.6).
	ReasonMissingDetached = "missing_detached"
	// ReasonRunningTurn: a wake span (RoleWake) arrived and the turn it
	// announces has not ended yet: its parent span, the turn's, has not
	// arrived ("running_turn:<wake span name>", agentledger v0.12).
	ReasonRunningTurn = "running_turn"
	// ReasonSDKLimit: the OpenTelemetry SDK's span limits dropped
	// attributes, links or link attributes of a span of the invocation, or
	// cut an id ("sdk_limit:<attributes|links|link_attributes|
	// attribute_value_length> on <span name>", agentledger v0.14).
	ReasonSDKLimit = "sdk_limit"
	// ReasonExportLost: the in-process export pipeline lost spans of the
	// invocation that the in-process ledger counted (a full batch queue, a
	// failed export): the collector can never see them ("export_lost:
	// <queue|failed>", in-process only, agentledger v0.14).
	ReasonExportLost = "export_lost"
	// ReasonDoubleInstrumented: a model call of the invocation ran inside
	// another model call of the invocation (two instrumentations of one
	// call, e.g. an SDK's own gen_ai spans under or over a wrapper's), so
	// its usage would be counted twice ("double_instrumented:<span name>",
	// agentledger v0.14).
	ReasonDoubleInstrumented = "double_instrumented"

	AnomalyExtraChildren   = "extra_children"
	AnomalySpanLimit       = "span_limit"
	AnomalyLateSpan        = "late_span"
	AnomalyForeignFollowup = "foreign_followup"
	// AnomalyDuplicateLink: a span repeats a followup link to the same
	// target; it discharged one followup, not one per link.
	AnomalyDuplicateLink = "duplicate_link"
	// AnomalyOrphanJob: a background job was started when no span of its
	// invocation was open, so no count declares it (in-process ledger).
	AnomalyOrphanJob = "orphan_job"
	// AnomalyFollowupInterrupted: a span of the invocation with
	// AttrFollowupReason ReasonInterrupted (a followup_closed span) closed
	// the followup of a background job of the invocation: the job was
	// killed ("followup_interrupted:<job name>", the background span's
	// name; agentledger v0.7). It does not change finality.
	AnomalyFollowupInterrupted = "followup_interrupted"
	// AnomalyUsageMismatch: a span of the invocation carries
	// AttrUsageMismatch = true: the runtime's own usage report disagrees
	// with the model wire's count ("usage_mismatch:<span name>", the
	// flagged span's name; agentledger v0.8). It changes neither finality
	// nor the totals.
	AnomalyUsageMismatch = "usage_mismatch"
	// AnomalyAnomaliesCut: the invocation had more distinct anomalies than
	// a ledger keeps (64 besides AnomalyFollowupInterrupted and
	// AnomalyUsageMismatch, which are always kept), so some are not
	// listed. It does not change finality.
	AnomalyAnomaliesCut = "anomalies_cut"
	// ReasonReasonsCut: the invocation had more distinct unprovable counts
	// or taints than a ledger keeps (64 of each), so some are not listed;
	// the invocation was not final already.
	ReasonReasonsCut = "reasons_cut"
)
