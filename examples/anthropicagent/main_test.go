package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/scriptedmodel"
)

// keepSpans keeps the exported spans past the provider's shutdown, which
// would reset the in-memory exporter.
type keepSpans struct{ *tracetest.InMemoryExporter }

func (keepSpans) Shutdown(context.Context) error { return nil }

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// want is one invocation's final line: three model calls (tool use,
// answer, and the continuation's streamed call after the result), each
// with stepUsage.
var want = line{
	Status: contract.StatusFinal, InputTokens: 360, OutputTokens: 45,
	CacheReadInputTokens: 240, CacheCreationInputTokens: 60, ReasoningOutputTokens: 15,
	AfterResultInputTokens: 120, AfterResultOutputTokens: 15,
	ModelCalls: 3, BackgroundJobs: 1, Continuations: 1,
}

func runLines(t *testing.T, cfg config) ([]line, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	cfg.exporter = keepSpans{exp}
	cfg.timeout = time.Minute
	var out bytes.Buffer
	if err := run(context.Background(), cfg, &out, slog.New(slog.NewTextHandler(testWriter{t}, nil))); err != nil {
		t.Fatal(err)
	}
	var lines []line
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines, exp
}

func check(t *testing.T, lines []line, n int) {
	t.Helper()
	if len(lines) != n {
		t.Fatalf("lines = %d, want %d", len(lines), n)
	}
	for _, l := range lines {
		got := l
		got.InvocationID, got.SessionID, got.TimeToFinalMS = "", "", 0
		if got != want {
			t.Errorf("line %+v\nwant %+v", got, want)
		}
	}
}

func TestRun(t *testing.T) {
	lines, exp := runLines(t, config{prompts: 2})
	check(t, lines, 2)
	chats, bg, conts := 0, 0, 0
	for _, s := range exp.GetSpans() {
		switch {
		case strings.HasPrefix(s.Name, "chat "):
			chats++
			for _, kv := range s.Attributes {
				if kv.Key == contract.AttrProviderName && kv.Value.AsString() != "anthropic" {
					t.Errorf("provider %v", kv.Value.AsString())
				}
			}
		case strings.HasPrefix(s.Name, contract.SpanNameBackgroundPrefix+" "):
			bg++
		case strings.HasPrefix(s.Name, contract.SpanNameContinuationPrefix+" "), strings.HasPrefix(s.Name, contract.SpanNameRootPrefix+" "):
			if strings.HasPrefix(s.Name, contract.SpanNameContinuationPrefix+" ") {
				conts++
			}
			provider := ""
			for _, kv := range s.Attributes {
				if kv.Key == contract.AttrProviderName {
					provider = kv.Value.AsString()
				}
			}
			if provider != contract.ProviderAnthropic {
				t.Errorf("%s: provider %q", s.Name, provider)
			}
		case strings.HasPrefix(s.Name, "anthropic."):
			t.Errorf("the SDK's own span %q is exported: usage would count twice", s.Name)
		}
	}
	if chats != 6 || bg != 2 || conts != 2 {
		t.Errorf("chat %d background %d continuation %d spans", chats, bg, conts)
	}
}

// A rate-limited first attempt of each call is retried by the SDK; the
// usage is still counted once per call.
func TestRetriesCountedOnce(t *testing.T) {
	var mu sync.Mutex
	requests := 0
	cfg := config{prompts: 1, responder: func(r scriptedmodel.Request) scriptedmodel.Step {
		mu.Lock()
		requests++
		mu.Unlock()
		if r.Header.Get("X-Stainless-Retry-Count") == "0" {
			return scriptedmodel.Step{Status: http.StatusTooManyRequests, Header: http.Header{"Retry-After-Ms": {"1"}}}
		}
		return respond(r)
	}}
	lines, _ := runLines(t, cfg)
	check(t, lines, 1)
	if requests != 6 {
		t.Errorf("model requests = %d, want 6 (3 calls, each retried once)", requests)
	}
}
