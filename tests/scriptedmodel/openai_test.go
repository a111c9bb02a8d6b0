package scriptedmodel_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/agentledger/agentledger/scriptedmodel"
)

func openAIClient(s *scriptedmodel.Server) openai.Client {
	return openai.NewClient(option.WithBaseURL(s.OpenAIBaseURL()), option.WithAPIKey("test"), option.WithMaxRetries(0))
}

func chatParams(text string) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:    "gpt-test",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)},
	}
}

func TestChatPlain(t *testing.T) {
	s := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{
		{Text: "héllo wörld", Usage: scriptedmodel.Usage{InputTokens: 10, OutputTokens: 5, CacheReadTokens: 3, ReasoningTokens: 2}},
		{ToolCalls: []scriptedmodel.ToolCall{{ID: "call_a", Name: "shell", Arguments: `{"cmd":"ls"}`}}},
	}}).Start()
	defer s.Close()
	c := openAIClient(s)
	res, err := c.Chat.Completions.New(context.Background(), chatParams("hi"))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Choices[0].Message.Content; got != "héllo wörld" {
		t.Errorf("content = %q", got)
	}
	if res.Usage.PromptTokens != 10 || res.Usage.CompletionTokens != 5 ||
		res.Usage.PromptTokensDetails.CachedTokens != 3 || res.Usage.CompletionTokensDetails.ReasoningTokens != 2 {
		t.Errorf("usage = %+v", res.Usage)
	}
	if res.Model != "gpt-test" || res.Choices[0].FinishReason != "stop" {
		t.Errorf("model %q finish %q", res.Model, res.Choices[0].FinishReason)
	}
	res, err = c.Chat.Completions.New(context.Background(), chatParams("again"))
	if err != nil {
		t.Fatal(err)
	}
	tc := res.Choices[0].Message.ToolCalls
	if len(tc) != 1 || tc[0].ID != "call_a" || tc[0].Function.Name != "shell" || tc[0].Function.Arguments != `{"cmd":"ls"}` {
		t.Errorf("tool calls = %+v", tc)
	}
	if res.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("finish = %q", res.Choices[0].FinishReason)
	}
	reqs := s.Requests()
	if len(reqs) != 2 || reqs[1].LastUserText() != "again" || reqs[0].Model != "gpt-test" || reqs[0].Stream {
		t.Errorf("requests = %+v", reqs)
	}
}

func TestChatStreaming(t *testing.T) {
	for _, includeUsage := range []bool{false, true} {
		t.Run(fmt.Sprint("include_usage=", includeUsage), func(t *testing.T) {
			s := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{{
				Text:      "streamed text",
				ToolCalls: []scriptedmodel.ToolCall{{Name: "read", Arguments: `{"path":"/tmp/x"}`}},
				Usage:     scriptedmodel.Usage{InputTokens: 7, OutputTokens: 4},
			}}}).Start()
			defer s.Close()
			c := openAIClient(s)
			p := chatParams("hi")
			if includeUsage {
				p.StreamOptions.IncludeUsage = openai.Bool(true)
			}
			st := c.Chat.Completions.NewStreaming(context.Background(), p)
			var acc openai.ChatCompletionAccumulator
			emptyChoices := 0
			for st.Next() {
				ch := st.Current()
				if len(ch.Choices) == 0 {
					emptyChoices++
				}
				acc.AddChunk(ch)
			}
			if err := st.Err(); err != nil {
				t.Fatal(err)
			}
			if got := acc.Choices[0].Message.Content; got != "streamed text" {
				t.Errorf("content = %q", got)
			}
			tc := acc.Choices[0].Message.ToolCalls
			if len(tc) != 1 || tc[0].ID != "call_1_0" || tc[0].Function.Arguments != `{"path":"/tmp/x"}` {
				t.Errorf("tool calls = %+v", tc)
			}
			wantUsage := int64(0)
			wantEmpty := 0
			if includeUsage {
				wantUsage, wantEmpty = 7, 1
			}
			if acc.Usage.PromptTokens != wantUsage || emptyChoices != wantEmpty {
				t.Errorf("usage %d empty-choice chunks %d", acc.Usage.PromptTokens, emptyChoices)
			}
			if r := s.Requests()[0]; !r.Stream || r.IncludeUsage != includeUsage {
				t.Errorf("request stream=%v include_usage=%v", r.Stream, r.IncludeUsage)
			}
		})
	}
}

func TestChatStreamCut(t *testing.T) {
	s := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{{Text: "a long answer that is cut", CutAfter: 2}}}).Start()
	defer s.Close()
	c := openAIClient(s)
	st := c.Chat.Completions.NewStreaming(context.Background(), chatParams("hi"))
	n := 0
	for st.Next() {
		n++
	}
	if st.Err() == nil || n != 2 {
		t.Errorf("chunks %d err %v, want 2 and an error", n, st.Err())
	}
}

func TestErrorsAndExhaustion(t *testing.T) {
	s := scriptedmodel.New(scriptedmodel.Options{Steps: []scriptedmodel.Step{{Status: 429, ErrorMessage: "slow down"}}}).Start()
	defer s.Close()
	c := openAIClient(s)
	_, err := c.Chat.Completions.New(context.Background(), chatParams("hi"))
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests || apiErr.Message != "slow down" || apiErr.Code != "rate_limit_exceeded" {
		t.Fatalf("err = %v", err)
	}
	_, err = c.Chat.Completions.New(context.Background(), chatParams("hi"))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusInternalServerError || apiErr.Message == "" {
		t.Fatalf("exhausted err = %v", err)
	}
	if len(s.Requests()) != 2 || s.Pending() != 0 {
		t.Errorf("requests %d pending %d", len(s.Requests()), s.Pending())
	}
}

func TestResponderConcurrent(t *testing.T) {
	s := scriptedmodel.New(scriptedmodel.Options{Responder: func(r scriptedmodel.Request) scriptedmodel.Step {
		return scriptedmodel.Step{Text: "echo " + r.LastUserText(), Usage: scriptedmodel.Usage{InputTokens: len(r.LastUserText())}}
	}}).Start()
	defer s.Close()
	c := openAIClient(s)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := fmt.Sprintf("session-%d", i)
			res, err := c.Chat.Completions.New(context.Background(), chatParams(q))
			if err != nil {
				errs <- err
				return
			}
			if res.Choices[0].Message.Content != "echo "+q || res.Usage.PromptTokens != int64(len(q)) {
				errs <- fmt.Errorf("%s got %q", q, res.Choices[0].Message.Content)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := len(s.Requests()); n != 8 {
		t.Errorf("requests = %d", n)
	}
}
