package contract

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// TestGenAINamesAreSemconv checks every gen_ai name and value of the
// contract against the semconv package: they are written out only so that
// they stay untyped constants.
func TestGenAINamesAreSemconv(t *testing.T) {
	keys := []struct {
		ours string
		reg  attribute.Key
	}{
		{AttrOperationName, semconv.GenAIOperationNameKey},
		{AttrUsageInputTokens, semconv.GenAIUsageInputTokensKey},
		{AttrUsageOutputTokens, semconv.GenAIUsageOutputTokensKey},
		{AttrUsageCacheReadTokens, semconv.GenAIUsageCacheReadInputTokensKey},
		{AttrUsageCacheCreateTokens, semconv.GenAIUsageCacheCreationInputTokensKey},
		{AttrUsageReasoningTokens, semconv.GenAIUsageReasoningOutputTokensKey},
		{AttrConversationID, semconv.GenAIConversationIDKey},
		{AttrAgentName, semconv.GenAIAgentNameKey},
		{AttrRequestModel, semconv.GenAIRequestModelKey},
		{AttrResponseModel, semconv.GenAIResponseModelKey},
		{AttrProviderName, semconv.GenAIProviderNameKey},
		{AttrToolName, semconv.GenAIToolNameKey},
		{AttrToolCallID, semconv.GenAIToolCallIDKey},
		{AttrRequestStream, semconv.GenAIRequestStreamKey},
	}
	for _, k := range keys {
		if k.ours != string(k.reg) {
			t.Errorf("contract has %q, semconv %q", k.ours, k.reg)
		}
	}
	values := []struct {
		ours string
		reg  attribute.KeyValue
	}{
		{OpChat, semconv.GenAIOperationNameChat},
		{OpTextCompletion, semconv.GenAIOperationNameTextCompletion},
		{OpGenerateContent, semconv.GenAIOperationNameGenerateContent},
		{OpEmbeddings, semconv.GenAIOperationNameEmbeddings},
		{OpInvokeAgent, semconv.GenAIOperationNameInvokeAgent},
		{OpExecuteTool, semconv.GenAIOperationNameExecuteTool},
		{ProviderOpenAI, semconv.GenAIProviderNameOpenAI},
		{ProviderAnthropic, semconv.GenAIProviderNameAnthropic},
	}
	for _, v := range values {
		if got := v.reg.Value.AsString(); v.ours != got {
			t.Errorf("contract has %s = %q, semconv %q", v.reg.Key, v.ours, got)
		}
	}
}

// TestOwnNamesOutsideGenAI checks that the names of our own attributes
// are not in the gen_ai namespace, which is the registry's.
func TestOwnNamesOutsideGenAI(t *testing.T) {
	for _, name := range []string{
		AttrInvocationID, AttrRole, AttrChildren, AttrFollowups, AttrRemote,
		AttrLink, AttrFollowupReason, AttrFollowupConsumer, AttrLateChild,
		AttrUnattributed, AttrTenant, AttrSummaryCollector,
		AttrResponseToolCalls, AttrResponseStreamClosedEarly,
		AttrStatus, AttrIncompleteReasons, AttrAnomalies, AttrRevision,
		AttrAfterResultInput, AttrAfterResultOutput, AttrModelCalls,
		AttrBackgroundJobs, AttrContinuations, AttrSpans, AttrTraces,
		AttrDuplicateSpans, AttrTimeToFinalMS, AttrCost, AttrCostCurrency,
	} {
		if !strings.HasPrefix(name, "invocation.") {
			t.Errorf("%q is not in the invocation namespace", name)
		}
	}
}
