package wireproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"

	"go.opentelemetry.io/otel/propagation"

	"github.com/agentledger/agentledger/instrument/internal/genaicall"
	"github.com/agentledger/agentledger/instrument/internal/genaitest"
)

// BenchmarkRequest measures one Messages request of a long conversation
// (64 KiB of turns) to a scripted model on loopback, its answer read to
// the end, plain and streamed: straight to the model (mode=unwrapped, the
// baseline) and through the model-wire proxy with a span-dropping
// TracerProvider (mode=wrapped). Compare the modes with benchstat -col /mode.
func BenchmarkRequest(b *testing.B) {
	srv := genaitest.BenchServer("toolu_b", "Bash", `{"command":"go test ./..."}`)
	defer srv.Close()
	up, err := url.Parse(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	tp := genaitest.BenchTracerProvider()
	ctx, span := tp.Tracer("bench").Start(context.Background(), "turn")
	defer span.End()
	mw := genaicall.New(genaicall.Config{TracerProvider: tp, Propagators: propagation.NewCompositeTextMapPropagator()}.WithDefaults(),
		genaicall.Scope{Name: "bench", Version: "0", Provider: "anthropic"})
	p, err := Start(Config{Upstream: up, Middleware: mw, Describe: describe,
		Attribute: func(*http.Request, []byte) Decision {
			return Decision{Ctx: ctx, OnTool: func(string) {}, Done: func(genaicall.Usage) {}}
		}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Close(context.Background()) }()
	client := &http.Client{}
	body := func(stream bool) []byte {
		var msgs []map[string]any
		for i, text := range genaitest.Conversation(64) {
			role := []string{"user", "assistant"}[i%2]
			msgs = append(msgs, map[string]any{"role": role, "content": []map[string]any{{"type": "text", "text": text}}})
		}
		msgs = append(msgs, map[string]any{"role": "user", "content": "go on"})
		out, _ := json.Marshal(map[string]any{"model": "claude-bench", "max_tokens": 1024, "stream": stream, "messages": msgs})
		return out
	}
	call := func(stream bool) func(context.Context, string) error {
		b := body(stream)
		return func(ctx context.Context, base string) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/messages", bytes.NewReader(b))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/json")
			res, err := client.Do(req)
			if err != nil {
				return err
			}
			defer res.Body.Close()
			if _, err := io.Copy(io.Discard, res.Body); err != nil {
				return err
			}
			if res.StatusCode != http.StatusOK {
				return fmt.Errorf("HTTP %d", res.StatusCode)
			}
			return nil
		}
	}
	genaitest.BenchModes(b, func(proxied bool) string {
		if proxied {
			return p.URL()
		}
		return srv.URL()
	}, []genaitest.BenchCall[string]{
		{Name: "api=messages/call=plain", Call: call(false)},
		{Name: "api=messages/call=stream", Call: call(true)},
	})
}
