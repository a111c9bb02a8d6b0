package genaireg

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"github.com/agentledger/agentledger/contract"
)

// TestContractNamesAreSemconv checks every gen_ai name and value of the
// contract package against the semconv package: they are written out only
// so that they stay untyped constants, and checked here so that contract's
// own tests import nothing either.
func TestContractNamesAreSemconv(t *testing.T) {
	keys := []struct {
		ours string
		reg  attribute.Key
	}{
		{contract.AttrOperationName, semconv.GenAIOperationNameKey},
		{contract.AttrUsageInputTokens, semconv.GenAIUsageInputTokensKey},
		{contract.AttrUsageOutputTokens, semconv.GenAIUsageOutputTokensKey},
		{contract.AttrUsageCacheReadTokens, semconv.GenAIUsageCacheReadInputTokensKey},
		{contract.AttrUsageCacheCreateTokens, semconv.GenAIUsageCacheCreationInputTokensKey},
		{contract.AttrUsageReasoningTokens, semconv.GenAIUsageReasoningOutputTokensKey},
		{contract.AttrConversationID, semconv.GenAIConversationIDKey},
		{contract.AttrAgentName, semconv.GenAIAgentNameKey},
		{contract.AttrRequestModel, semconv.GenAIRequestModelKey},
		{contract.AttrResponseModel, semconv.GenAIResponseModelKey},
		{contract.AttrProviderName, semconv.GenAIProviderNameKey},
		{contract.AttrToolName, semconv.GenAIToolNameKey},
		{contract.AttrToolCallID, semconv.GenAIToolCallIDKey},
		{contract.AttrRequestStream, semconv.GenAIRequestStreamKey},
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
		{contract.OpChat, semconv.GenAIOperationNameChat},
		{contract.OpTextCompletion, semconv.GenAIOperationNameTextCompletion},
		{contract.OpGenerateContent, semconv.GenAIOperationNameGenerateContent},
		{contract.OpEmbeddings, semconv.GenAIOperationNameEmbeddings},
		{contract.OpInvokeAgent, semconv.GenAIOperationNameInvokeAgent},
		{contract.OpExecuteTool, semconv.GenAIOperationNameExecuteTool},
		{contract.ProviderOpenAI, semconv.GenAIProviderNameOpenAI},
		{contract.ProviderAnthropic, semconv.GenAIProviderNameAnthropic},
	}
	for _, v := range values {
		if got := v.reg.Value.AsString(); v.ours != got {
			t.Errorf("contract has %s = %q, semconv %q", v.reg.Key, v.ours, got)
		}
	}
}
