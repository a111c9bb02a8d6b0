package otelopenai_test

import (
	"context"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/scriptedmodel"
)

func TestResponses(t *testing.T) {
	step := scriptedmodel.Step{Text: "answer", Usage: fullUsage, ID: "resp_1",
		ToolCalls: []scriptedmodel.ToolCall{{ID: "call_r", Name: "shell"}}}
	for _, stream := range []bool{false, true} {
		name := "plain"
		if stream {
			name = "stream"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, 0, step)
			p := responses.ResponseNewParams{Model: "gpt-test", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
			if stream {
				st := f.client.Responses.NewStreaming(context.Background(), p)
				n := 0
				for st.Next() {
					n++
				}
				if err := st.Err(); err != nil {
					t.Fatal(err)
				}
				_ = st.Close()
				if n < 5 {
					t.Errorf("caller saw %d events", n)
				}
			} else if _, err := f.client.Responses.New(context.Background(), p); err != nil {
				t.Fatal(err)
			}
			s := genaitest.Only(t, f.rec)
			if s.Name() != "chat gpt-test" {
				t.Errorf("name = %q", s.Name())
			}
			a := genaitest.Attrs(s)
			genaitest.WantStr(t, a, "gen_ai.operation.name", "chat")
			genaitest.WantStr(t, a, "gen_ai.response.id", "resp_1")
			genaitest.WantStr(t, a, "gen_ai.response.model", "gpt-test")
			genaitest.WantStr(t, a, "gen_ai.response.finish_reasons", `["completed"]`)
			genaitest.WantStr(t, a, "invocation.response.tool_calls", `["shell:call_r"]`)
			genaitest.WantInt(t, a, "gen_ai.usage.input_tokens", 100)
			genaitest.WantInt(t, a, "gen_ai.usage.output_tokens", 40)
			genaitest.WantInt(t, a, "gen_ai.usage.cache_read.input_tokens", 60)
			genaitest.WantInt(t, a, "gen_ai.usage.reasoning.output_tokens", 25)
			genaitest.WantAbsent(t, a, "error.type", "invocation.response.stream_closed_early")
			if stream {
				genaitest.WantStr(t, a, "gen_ai.request.stream", "true")
			} else {
				genaitest.WantAbsent(t, a, "gen_ai.request.stream")
			}
		})
	}
}

func TestResponsesStreamClosedEarly(t *testing.T) {
	f := newFixture(t, 0, scriptedmodel.Step{Text: "a long answer in many deltas", Usage: fullUsage})
	st := f.client.Responses.NewStreaming(context.Background(), responses.ResponseNewParams{
		Model: "gpt-test", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	for range 3 {
		st.Next()
	}
	_ = st.Close()
	a := genaitest.Attrs(genaitest.Only(t, f.rec))
	genaitest.WantStr(t, a, "invocation.response.stream_closed_early", "true")
	genaitest.WantStr(t, a, "gen_ai.response.id", "resp_scripted_1")
	genaitest.WantAbsent(t, a, genaitest.UsageKeys...)
}

func TestEmbeddings(t *testing.T) {
	f := newFixture(t, 0, scriptedmodel.Step{Usage: scriptedmodel.Usage{InputTokens: 8}})
	_, err := f.client.Embeddings.New(context.Background(), openai.EmbeddingNewParams{
		Model: "text-embedding-test", Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	s := genaitest.Only(t, f.rec)
	if s.Name() != "embeddings text-embedding-test" {
		t.Errorf("name = %q", s.Name())
	}
	a := genaitest.Attrs(s)
	genaitest.WantStr(t, a, "gen_ai.operation.name", "embeddings")
	genaitest.WantStr(t, a, "gen_ai.response.model", "text-embedding-test")
	genaitest.WantInt(t, a, "gen_ai.usage.input_tokens", 8)
	genaitest.WantAbsent(t, a, "gen_ai.usage.output_tokens", "error.type", "gen_ai.request.stream")
}
