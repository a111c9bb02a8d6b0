// Command scriptedmodel serves the scripted OpenAI-compatible model
// (POST /v1/chat/completions, streaming with usage) that the OpenCode
// example runs opencode serve against, since no real model can be reached
// from the test machines. A prompt containing "background" makes the model
// launch a background subagent (the task tool with background: true); the
// subagent, the turn after the tool call and the turn the completion
// notification wakes answer with text. Every answer reports a distinct
// usage (input 1000+n with 10+n cached, output 100+n with 5 reasoning, for
// the n-th request), logged to stderr, so the sums can be checked.
//
//	go run ./examples/opencode/scriptedmodel -listen 127.0.0.1:4010
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/agentledger/agentledger/scriptedmodel"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:4010", "address to serve on")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, *listen, log); err != nil {
		log.Error("scriptedmodel failed", "err", err)
		os.Exit(1)
	}
}

func serve(ctx context.Context, addr string, log *slog.Logger) error {
	srv := scriptedmodel.New(scriptedmodel.Options{Responder: func(r scriptedmodel.Request) scriptedmodel.Step {
		st := respond(r)
		n := r.Seq
		st.Usage = scriptedmodel.Usage{InputTokens: 1000 + n, CacheReadTokens: 10 + n, OutputTokens: 100 + n, ReasoningTokens: 5}
		log.Info("model call", "seq", n, "tool_calls", len(st.ToolCalls), "text", st.Text,
			"input_tokens", st.Usage.InputTokens, "output_tokens", st.Usage.OutputTokens)
		return st
	}})
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	log.Info("serving", "base_url", "http://"+l.Addr().String()+"/v1")
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

const subagentMarker = "[subagent]"

// respond routes a request by its content.
func respond(r scriptedmodel.Request) scriptedmodel.Step {
	msgs, _ := r.Body["messages"].([]any)
	var lastRole, firstUser string
	if len(msgs) > 0 {
		if m, ok := msgs[len(msgs)-1].(map[string]any); ok {
			lastRole, _ = m["role"].(string)
		}
	}
	for _, x := range msgs {
		if m, ok := x.(map[string]any); ok && m["role"] == "user" {
			firstUser = text(m["content"])
			break
		}
	}
	last := r.LastUserText()
	switch {
	case strings.Contains(firstUser, subagentMarker):
		return scriptedmodel.Step{Text: "The subagent finished its work."}
	case strings.Contains(last, "<task id="):
		return scriptedmodel.Step{Text: "The background job finished; here is its result."}
	case lastRole == "tool":
		return scriptedmodel.Step{Text: "I started that in the background."}
	case strings.Contains(strings.ToLower(last), "background"):
		return scriptedmodel.Step{ToolCalls: []scriptedmodel.ToolCall{{
			Name:      "task",
			Arguments: `{"description":"background work","prompt":"` + subagentMarker + ` do the work","subagent_type":"general","background":true}`,
		}}}
	}
	return scriptedmodel.Step{Text: "Hello from the scripted model."}
}

func text(c any) string {
	switch v := c.(type) {
	case string:
		return v
	case []any:
		var b strings.Builder
		for _, x := range v {
			if m, ok := x.(map[string]any); ok {
				if s, ok := m["text"].(string); ok {
					b.WriteString(s)
				}
			}
		}
		return b.String()
	}
	return ""
}
