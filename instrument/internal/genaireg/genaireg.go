// Package genaireg tells the adapters' tests which gen_ai attribute names
// are in the OpenTelemetry GenAI registry, as the semconv package has
// them, so that a test fails on a name of our own in the gen_ai namespace.
// It imports nothing beyond the OpenTelemetry API and trace SDK.
package genaireg

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// registry is every gen_ai attribute key of the GenAI registry, as the
// semconv package has them.
var registry = map[attribute.Key]bool{}

func init() {
	for _, k := range []attribute.Key{
		semconv.GenAIAgentDescriptionKey, semconv.GenAIAgentIDKey, semconv.GenAIAgentNameKey,
		semconv.GenAIAgentVersionKey, semconv.GenAIConversationIDKey, semconv.GenAIDataSourceIDKey,
		semconv.GenAIEmbeddingsDimensionCountKey, semconv.GenAIEvaluationExplanationKey,
		semconv.GenAIEvaluationNameKey, semconv.GenAIEvaluationScoreLabelKey,
		semconv.GenAIEvaluationScoreValueKey, semconv.GenAIInputMessagesKey,
		semconv.GenAIOperationNameKey, semconv.GenAIOutputMessagesKey, semconv.GenAIOutputTypeKey,
		semconv.GenAIPromptNameKey, semconv.GenAIProviderNameKey, semconv.GenAIRequestChoiceCountKey,
		semconv.GenAIRequestEncodingFormatsKey, semconv.GenAIRequestFrequencyPenaltyKey,
		semconv.GenAIRequestMaxTokensKey, semconv.GenAIRequestModelKey,
		semconv.GenAIRequestPresencePenaltyKey, semconv.GenAIRequestSeedKey,
		semconv.GenAIRequestStopSequencesKey, semconv.GenAIRequestStreamKey,
		semconv.GenAIRequestTemperatureKey, semconv.GenAIRequestTopKKey, semconv.GenAIRequestTopPKey,
		semconv.GenAIResponseFinishReasonsKey, semconv.GenAIResponseIDKey,
		semconv.GenAIResponseModelKey, semconv.GenAIResponseTimeToFirstChunkKey,
		semconv.GenAIRetrievalDocumentsKey, semconv.GenAIRetrievalQueryTextKey,
		semconv.GenAISystemInstructionsKey, semconv.GenAITokenTypeKey,
		semconv.GenAIToolCallArgumentsKey, semconv.GenAIToolCallIDKey,
		semconv.GenAIToolCallResultKey, semconv.GenAIToolDefinitionsKey,
		semconv.GenAIToolDescriptionKey, semconv.GenAIToolNameKey, semconv.GenAIToolTypeKey,
		semconv.GenAIUsageCacheCreationInputTokensKey, semconv.GenAIUsageCacheReadInputTokensKey,
		semconv.GenAIUsageInputTokensKey, semconv.GenAIUsageOutputTokensKey,
		semconv.GenAIUsageReasoningOutputTokensKey, semconv.GenAIWorkflowNameKey,
	} {
		registry[k] = true
	}
}

// WantRegistered fails t for each attribute of s in the gen_ai namespace
// that is not in the GenAI registry: names of our own belong elsewhere.
func WantRegistered(t testing.TB, s sdktrace.ReadOnlySpan) {
	t.Helper()
	for _, kv := range s.Attributes() {
		if strings.HasPrefix(string(kv.Key), "gen_ai.") && !registry[kv.Key] {
			t.Errorf("span %q: %s is not in the GenAI registry", s.Name(), kv.Key)
		}
	}
}
