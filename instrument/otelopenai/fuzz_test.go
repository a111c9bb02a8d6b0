package otelopenai_test

import (
	"testing"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/instrument/otelopenai"
	"github.com/agentledger/agentledger/scriptedmodel"
)

var (
	fuzzChat         = genaitest.FuzzEndpoint{Path: "/v1/chat/completions", Req: `{"model":"gpt-f","messages":[{"role":"user","content":"hi"}]}`}
	fuzzChatStream   = genaitest.FuzzEndpoint{Path: "/v1/chat/completions", Req: `{"model":"gpt-f","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`, Stream: true}
	fuzzChatInjected = genaitest.FuzzEndpoint{Path: "/v1/chat/completions", Req: `{"model":"gpt-f","stream":true,"messages":[{"role":"user","content":"hi"}]}`, Stream: true}
	// fuzzChatSpliced are streamed requests that do not ask for usage in
	// the shapes the middleware splices include_usage into.
	fuzzChatSpliced = []genaitest.FuzzEndpoint{
		{Path: "/v1/chat/completions", Req: "{ \"model\" : \"gpt-f\" ,\n \"stream\" : true , \"stream_options\" : { \"include_usage\" : false , \"x\" : {\"include_usage\":false} } }\n", Stream: true},
		{Path: "/v1/chat/completions", Req: `{"model":"gpt-f","stream":true,"stream_options":{"include_obfuscation":false},"messages":[]}`, Stream: true},
		{Path: "/v1/chat/completions", Req: `{"model":"gpt-f","stream":true,"stream_options":null}`, Stream: true},
	}
	fuzzResponses     = genaitest.FuzzEndpoint{Path: "/v1/responses", Req: `{"model":"gpt-f","input":"hi"}`}
	fuzzResponsesSSE  = genaitest.FuzzEndpoint{Path: "/v1/responses", Req: `{"model":"gpt-f","stream":true,"input":"hi"}`, Stream: true}
	fuzzEmbeddingsReq = genaitest.FuzzEndpoint{Path: "/v1/embeddings", Req: `{"model":"emb-f","input":["a","b"]}`}
)

// fuzzWrapper is the OpenAI middleware as the fuzz helpers drive it. Its
// usage sources name, for each usage attribute, the JSON fields of the
// OpenAI APIs it may come from.
var fuzzWrapper = genaitest.FuzzWrapper{
	New: func(tp trace.TracerProvider, mp metric.MeterProvider) genaitest.Middleware {
		return otelopenai.Middleware(otelopenai.WithTracerProvider(tp), otelopenai.WithMeterProvider(mp), otelopenai.WithCaptureContent(true))
	},
	Usage: scriptedmodel.Usage{InputTokens: 1200, OutputTokens: 80, CacheReadTokens: 1000, ReasoningTokens: 30},
	UsageSources: map[string][]string{
		contract.AttrUsageInputTokens:       {"prompt_tokens", "input_tokens"},
		contract.AttrUsageOutputTokens:      {"completion_tokens", "output_tokens"},
		contract.AttrUsageCacheReadTokens:   {"cached_tokens"},
		contract.AttrUsageCacheCreateTokens: {},
		contract.AttrUsageReasoningTokens:   {"reasoning_tokens"},
	},
}

func FuzzChatCompletion(f *testing.F) {
	fuzzWrapper.AddSeeds(f, fuzzChat,
		`{"id":"c","model":"m","choices":[{"finish_reason":"stop","message":{"content":"x"}}],"usage":{"prompt_tokens":-3,"completion_tokens":9223372036854775807}}`,
		`{"id":"c","model":"m","choices":[],"usage":null}`,
		`{"ID":"c","USAGE":{"PROMPT_TOKENS":5}}`,
		`{"error":{"message":"m","type":"t"}}`,
	)
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) { fuzzWrapper.CallThrough(t, fuzzChat, body, cut) })
}

func FuzzChatStream(f *testing.F) {
	fuzzWrapper.AddSeeds(f, fuzzChatStream,
		"data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":-1,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":-5}}}\n\ndata: [DONE]\n\n",
		"data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"t\",\"function\":{\"name\":\"n\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: {\"error\":{\"message\":\"boom\",\"code\":\"server_error\"}}\n\n",
		"data: {\"usage\":\ndata: {\"prompt_tokens\":4}}\n\n",
	)
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) {
		fuzzWrapper.CallThrough(t, fuzzChatStream, body, cut)
		fuzzWrapper.CallThrough(t, fuzzChatInjected, body, cut)
	})
}

// FuzzChatStreamSpliced is FuzzChatStream for the requests the
// middleware splices include_usage into.
func FuzzChatStreamSpliced(f *testing.F) {
	fuzzWrapper.AddSeeds(f, fuzzChatStream,
		"data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n",
		"data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}],\"usage\":{\"prompt_tokens\":3}}\n\n",
	)
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) {
		for _, ep := range fuzzChatSpliced {
			fuzzWrapper.CallThrough(t, ep, body, cut)
		}
	})
}

func FuzzResponses(f *testing.F) {
	fuzzWrapper.AddSeeds(f, fuzzResponses,
		`{"id":"r","model":"m","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":-7,"output_tokens":1}}`,
		`{"id":"r","status":"failed","error":{"message":"m","code":"server_error"},"usage":null}`,
	)
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) { fuzzWrapper.CallThrough(t, fuzzResponses, body, cut) })
}

func FuzzResponsesEvents(f *testing.F) {
	fuzzWrapper.AddSeeds(f, fuzzResponsesSSE,
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"status\":\"completed\",\"usage\":{\"input_tokens\":3,\"output_tokens\":-2,\"output_tokens_details\":{\"reasoning_tokens\":-9}}}}\n\n",
		"event: error\ndata: {\"type\":\"error\",\"message\":\"m\",\"code\":42}\n\n",
		"data: {\"type\":\"response.created\",\"response\":null}\n\ndata: {\"type\":\"response.incomplete\",\"response\":{\"incomplete_details\":{\"reason\":\"\"}}}\n\n",
	)
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) { fuzzWrapper.CallThrough(t, fuzzResponsesSSE, body, cut) })
}

func FuzzEmbeddings(f *testing.F) {
	fuzzWrapper.AddSeeds(f, fuzzEmbeddingsReq,
		`{"model":"e","usage":{"prompt_tokens":-1,"total_tokens":-1}}`,
		`{"model":"e","usage":{"total_tokens":4}}`,
	)
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) { fuzzWrapper.CallThrough(t, fuzzEmbeddingsReq, body, cut) })
}
