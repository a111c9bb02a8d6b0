package otelopencode

import (
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
)

// registryProviders maps OpenCode provider ids (models.dev ids, as in
// opencode 1.18.33) to the GenAI registry's gen_ai.provider.name values,
// for the providers the registry lists.
var registryProviders = map[string]string{
	"openai":                   semconv.GenAIProviderNameOpenAI.Value.AsString(),
	"anthropic":                semconv.GenAIProviderNameAnthropic.Value.AsString(),
	"google":                   semconv.GenAIProviderNameGCPGemini.Value.AsString(),
	"google-vertex":            semconv.GenAIProviderNameGCPVertexAI.Value.AsString(),
	"google-vertex-anthropic":  semconv.GenAIProviderNameGCPVertexAI.Value.AsString(),
	"amazon-bedrock":           semconv.GenAIProviderNameAWSBedrock.Value.AsString(),
	"azure":                    semconv.GenAIProviderNameAzureAIOpenAI.Value.AsString(),
	"azure-cognitive-services": semconv.GenAIProviderNameAzureAIOpenAI.Value.AsString(),
	"mistral":                  semconv.GenAIProviderNameMistralAI.Value.AsString(),
	"xai":                      semconv.GenAIProviderNameXAI.Value.AsString(),
	"deepseek":                 semconv.GenAIProviderNameDeepseek.Value.AsString(),
	"groq":                     semconv.GenAIProviderNameGroq.Value.AsString(),
	"perplexity":               semconv.GenAIProviderNamePerplexity.Value.AsString(),
	"cohere":                   semconv.GenAIProviderNameCohere.Value.AsString(),
	"watsonx":                  semconv.GenAIProviderNameIBMWatsonxAI.Value.AsString(),
}

// providerName returns the gen_ai.provider.name of the OpenCode provider
// id: the registry's value for a provider the registry lists (google is
// gcp.gemini, google-vertex gcp.vertex_ai, amazon-bedrock aws.bedrock,
// azure azure.ai.openai, ...), and the id itself for the others
// (openrouter, github-copilot, opencode, a custom provider), as the
// registry asks for providers it does not list. The id itself is kept on
// model-call spans as AttrProviderID.
func providerName(id string) string {
	if v, ok := registryProviders[id]; ok {
		return v
	}
	return id
}
