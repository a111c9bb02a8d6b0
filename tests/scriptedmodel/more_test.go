package scriptedmodel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/anthropics/anthropic-sdk-go/v2"
	aoption "github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/agentledger/agentledger/scriptedmodel"
)

var usage = scriptedmodel.Usage{InputTokens: 100, OutputTokens: 40, CacheReadTokens: 30, CacheCreationTokens: 20, ReasoningTokens: 10}

func TestResponses(t *testing.T) {
	step := scriptedmodel.Step{Text: "answer", Usage: usage,
		ToolCalls: []scriptedmodel.ToolCall{{ID: "call_r", Name: "shell", Arguments: `{"cmd":"ls"}`}}}
	s := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{step, step}}).Start()
	defer s.Close()
	c := openAIClient(s)
	p := responses.ResponseNewParams{Model: "gpt-test", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
	res, err := c.Responses.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if res.OutputText() != "answer" || res.Usage.InputTokens != 100 || res.Usage.InputTokensDetails.CachedTokens != 30 ||
		res.Usage.OutputTokensDetails.ReasoningTokens != 10 || res.Status != "completed" {
		t.Errorf("response = %+v", res)
	}
	if len(res.Output) != 2 || res.Output[1].CallID != "call_r" || res.Output[1].Name != "shell" {
		t.Errorf("output = %+v", res.Output)
	}
	st := c.Responses.NewStreaming(context.Background(), p)
	var types []string
	var completed responses.Response
	text := ""
	for st.Next() {
		ev := st.Current()
		types = append(types, ev.Type)
		if ev.Type == "response.output_text.delta" {
			text += ev.Delta
		}
		if ev.Type == "response.completed" {
			completed = ev.Response
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if text != "answer" || completed.Usage.OutputTokens != 40 || types[0] != "response.created" || types[len(types)-1] != "response.completed" {
		t.Errorf("text %q usage %+v types %v", text, completed.Usage, types)
	}
	if s.Requests()[0].LastUserText() != "hi" {
		t.Errorf("last user text = %q", s.Requests()[0].LastUserText())
	}
}

func TestEmbeddings(t *testing.T) {
	s := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{{Usage: scriptedmodel.Usage{InputTokens: 8}}}}).Start()
	defer s.Close()
	c := openAIClient(s)
	res, err := c.Embeddings.New(context.Background(), openai.EmbeddingNewParams{
		Model: "text-embedding-test", Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"a", "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Data) != 2 || res.Usage.PromptTokens != 8 || res.Model != "text-embedding-test" || len(res.Data[1].Embedding) == 0 {
		t.Errorf("embeddings = %+v", res)
	}
}

func anthropicClient(s *scriptedmodel.Server) anthropic.Client {
	return anthropic.NewClient(aoption.WithBaseURL(s.URL()), aoption.WithAPIKey("test"),
		aoption.WithMaxRetries(0), aoption.WithoutOpenTelemetry())
}

func messageParams(text string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 100,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))}}
}

func TestMessages(t *testing.T) {
	step := scriptedmodel.Step{Text: "hello", Usage: usage,
		ToolCalls: []scriptedmodel.ToolCall{{ID: "toolu_1", Name: "bash", Arguments: `{"command":"ls"}`}}}
	s := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{step, step, {Status: 529}}}).Start()
	defer s.Close()
	c := anthropicClient(s)
	msg, err := c.Messages.New(context.Background(), messageParams("hi"))
	if err != nil {
		t.Fatal(err)
	}
	u := msg.Usage
	if u.InputTokens != 50 || u.CacheReadInputTokens != 30 || u.CacheCreationInputTokens != 20 || u.OutputTokens != 40 ||
		u.OutputTokensDetails.ThinkingTokens != 10 || msg.StopReason != "tool_use" {
		t.Errorf("message = %+v", msg)
	}
	if len(msg.Content) != 2 || msg.Content[0].Text != "hello" || msg.Content[1].ID != "toolu_1" || msg.Content[1].Name != "bash" {
		t.Errorf("content = %+v", msg.Content)
	}
	st := c.Messages.NewStreaming(context.Background(), messageParams("again"))
	var acc anthropic.Message
	for st.Next() {
		if err := acc.Accumulate(st.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Content[0].Text != "hello" || acc.Content[1].Name != "bash" || string(acc.Content[1].Input) != `{"command":"ls"}` ||
		acc.Usage.OutputTokens != 40 || acc.Usage.InputTokens != 50 || acc.Usage.CacheReadInputTokens != 30 || acc.StopReason != "tool_use" {
		t.Errorf("streamed = %+v", acc)
	}
	if s.Requests()[1].LastUserText() != "again" {
		t.Errorf("last user text %q", s.Requests()[1].LastUserText())
	}
	_, err = c.Messages.New(context.Background(), messageParams("x"))
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 529 {
		t.Errorf("err = %v", err)
	}
}
