package otelanthropic_test

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/instrument/otelanthropic"
	"github.com/agentledger/agentledger/scriptedmodel"
)

var (
	fuzzMessages       = genaitest.FuzzEndpoint{Path: "/v1/messages", Req: `{"model":"claude-f","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}`}
	fuzzMessagesStream = genaitest.FuzzEndpoint{Path: "/v1/messages", Req: `{"model":"claude-f","max_tokens":64,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, Stream: true}
)

// fuzzWrapper is the Anthropic middleware as the fuzz helpers drive it.
// Its usage sources name, for each usage attribute, the JSON fields of the
// Messages API it may come from.
var fuzzWrapper = genaitest.FuzzWrapper{
	New: func(tp trace.TracerProvider, mp metric.MeterProvider) genaitest.Middleware {
		return otelanthropic.Middleware(otelanthropic.WithTracerProvider(tp), otelanthropic.WithMeterProvider(mp), otelanthropic.WithCaptureContent(true))
	},
	Usage: scriptedmodel.Usage{InputTokens: 1200, OutputTokens: 80, CacheReadTokens: 900, CacheCreationTokens: 100, ReasoningTokens: 30},
	UsageSources: map[string][]string{
		contract.AttrUsageInputTokens:       {"input_tokens"},
		contract.AttrUsageOutputTokens:      {"output_tokens"},
		contract.AttrUsageCacheReadTokens:   {"cache_read_input_tokens"},
		contract.AttrUsageCacheCreateTokens: {"cache_creation_input_tokens"},
		contract.AttrUsageReasoningTokens:   {"thinking_tokens"},
	},
}

// callThrough drives one call through the middleware with the checks of
// genaitest.FuzzWrapper.CallThrough, and fails t unless the cache tokens
// fit in the input tokens. It returns the span's attributes.
func callThrough(t *testing.T, ep genaitest.FuzzEndpoint, body []byte, cut uint16) map[string]attribute.Value {
	t.Helper()
	attrs := fuzzWrapper.CallThrough(t, ep, body, cut)
	// Cache tokens are counted in the input.
	if in, ok := attrs[contract.AttrUsageInputTokens]; ok {
		read, created := attrs[contract.AttrUsageCacheReadTokens].AsInt64(), attrs[contract.AttrUsageCacheCreateTokens].AsInt64()
		if n := in.AsInt64(); read > n || created > n-read {
			t.Errorf("input tokens %d < cache read %d + cache creation %d", n, read, created)
		}
	}
	return attrs
}

func FuzzMessage(f *testing.F) {
	fuzzWrapper.AddSeeds(f, fuzzMessages,
		`{"id":"m","model":"c","stop_reason":"end_turn","content":[{"type":"text","text":"x"}],"usage":{"input_tokens":-3,"output_tokens":2,"cache_read_input_tokens":-1}}`,
		`{"id":"m","model":"c","usage":{"input_tokens":9223372036854775807,"cache_read_input_tokens":1,"cache_creation_input_tokens":1}}`,
		`{"usage":{"input_tokens":9223372036854775802,"cache_read_input_tokens":10,"cache_creation_input_tokens":9223372036854775807}}`,
		`{"usage":{"input_tokens":10,"cache_read_input_tokens":-3}}`,
		`{"id":"m","content":[{"type":"tool_use","id":"t","name":"bash"}],"usage":null}`,
		`{"type":"error","error":{"type":"overloaded_error","message":"m"}}`,
	)
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) { _ = callThrough(t, fuzzMessages, body, cut) })
}

func FuzzMessageEvents(f *testing.F) {
	fuzzWrapper.AddSeeds(f, fuzzMessagesStream,
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":5,\"cache_read_input_tokens\":9223372036854775807,\"output_tokens\":1}}}\n\n"+
			"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":-4,\"cache_creation_input_tokens\":-2}}\n\n"+
			"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":null}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":7}}\n\n",
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"m\"}}\n\n",
	)
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) { _ = callThrough(t, fuzzMessagesStream, body, cut) })
}

// Regression (found with FuzzMessage's seeds): a negative cache count was
// subtracted from the input, and an input plus cache counts beyond int64
// wrapped around to a small positive input.
func TestMergeIgnoresNegativeAndOverflow(t *testing.T) {
	a := callThrough(t, fuzzMessages, []byte(`{"usage":{"input_tokens":10,"cache_read_input_tokens":-3,"output_tokens":2}}`), 0)
	genaitest.WantInt(t, a, contract.AttrUsageInputTokens, 10)
	genaitest.WantInt(t, a, contract.AttrUsageOutputTokens, 2)
	genaitest.WantAbsent(t, a, contract.AttrUsageCacheReadTokens)

	a = callThrough(t, fuzzMessages, []byte(`{"usage":{"input_tokens":9223372036854775802,"cache_read_input_tokens":10,"cache_creation_input_tokens":9223372036854775807}}`), 0)
	// No input that is a count and no output: the bill is unknown, and
	// the span carries no usage at all (contract.EndingNoUsage).
	genaitest.WantAbsent(t, a, genaitest.UsageKeys...)
	genaitest.WantStr(t, a, contract.AttrResponseEnding, contract.EndingNoUsage)

	a = callThrough(t, fuzzMessagesStream, []byte("data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":4,\"output_tokens\":1}}}\n\n"+
		"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":-1,\"cache_read_input_tokens\":6}}\n\n"+
		"data: {\"type\":\"message_stop\"}\n\n"), 0)
	genaitest.WantInt(t, a, contract.AttrUsageInputTokens, 10)
	genaitest.WantInt(t, a, contract.AttrUsageOutputTokens, 1)
}
