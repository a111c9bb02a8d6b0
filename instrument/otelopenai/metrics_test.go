package otelopenai_test

import (
	"context"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/agentledger/agentledger/instrument/otelopenai"
	"github.com/agentledger/agentledger/scriptedmodel"
)

func TestMetrics(t *testing.T) {
	srv := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{
		{Text: "a", Usage: scriptedmodel.Usage{InputTokens: 10, OutputTokens: 2}},
		{Text: "b", Usage: scriptedmodel.Usage{InputTokens: 5, OutputTokens: 1}},
	}}).Start()
	defer srv.Close()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	client := openai.NewClient(option.WithBaseURL(srv.OpenAIBaseURL()), option.WithAPIKey("k"),
		option.WithMiddleware(otelopenai.Middleware(otelopenai.WithMeterProvider(mp))))
	for range 2 {
		if _, err := client.Chat.Completions.New(context.Background(), params("hi")); err != nil {
			t.Fatal(err)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	sums := map[string]int64{}
	var calls uint64
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelopenai.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					typ, _ := p.Attributes.Value("gen_ai.token.type")
					sums[typ.AsString()] += p.Sum
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					calls += p.Count
				}
			}
		}
	}
	if sums["input"] != 15 || sums["output"] != 3 || calls != 2 {
		t.Errorf("token sums %v, durations %d", sums, calls)
	}
}
