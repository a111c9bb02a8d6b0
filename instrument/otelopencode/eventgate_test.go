package otelopencode

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
)

// eventServer is an OpenCode server whose event streams the test writes
// to one by one: streams[0] is the Client's own, streams[1] the host's
// (through Transport). prompt_async reports the prompt's message id.
type eventServer struct {
	prompts chan string
	mu      sync.Mutex
	streams []chan string
	opened  chan struct{}
}

func (f *eventServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/event":
		ch := make(chan string, 16)
		f.mu.Lock()
		f.streams = append(f.streams, ch)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"type\":\"server.connected\",\"properties\":{}}\n\n")
		w.(http.Flusher).Flush()
		f.opened <- struct{}{}
		for {
			select {
			case data := <-ch:
				fmt.Fprintf(w, "data: %s\n\n", data)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/prompt_async"):
		var body struct {
			MessageID string `json:"messageID"`
		}
		_ = json.NewDecoder(r.Body).Decode(&body)
		f.prompts <- body.MessageID
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Path == "/session/status":
		fmt.Fprint(w, `{}`)
	default:
		fmt.Fprint(w, `[]`)
	}
}

// send writes an event to the given streams.
func (f *eventServer) send(data string, streams ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, i := range streams {
		f.streams[i] <- data
	}
}

// TestTransportIdleAfterExport: a host that posts prompt_async through
// Transport gets the invocation's id, and reads the session's idle from
// the event stream through Transport only once the Client has handled
// the idle (which ends the prompt's root) and flushed it: the root is
// exported when the host sees the idle, though the exporter's own
// schedule is an hour away. With flushing off the idle passes at once.
func TestTransportIdleAfterExport(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
	}{{"gated", 0}, {"flush off", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			sp := instrument.NewSpanProcessor(sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithBatchTimeout(time.Hour)))
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			f := &eventServer{prompts: make(chan string, 4), opened: make(chan struct{}, 4)}
			srv := httptest.NewServer(f)
			t.Cleanup(srv.Close)
			c, err := New(srv.URL, srv.Client(), WithTracerProvider(tp), WithLedger(sp.Ledger()), WithMessageInvocationIDs(),
				WithFlushTimeout(tc.timeout), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := c.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
			<-f.opened
			tr := c.Transport(srv.Client().Transport)

			// The host's event stream.
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/event", nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			<-f.opened
			var id string
			var idMu sync.Mutex
			exportedAtIdle := make(chan bool, 1)
			go func() {
				sc := bufio.NewScanner(resp.Body)
				for sc.Scan() {
					if strings.Contains(sc.Text(), `"session.idle"`) {
						idMu.Lock()
						want := id
						idMu.Unlock()
						exported := false
						for _, s := range exp.GetSpans() {
							if !s.Parent.SpanID().IsValid() && s.Name == "invoke_agent build" {
								for _, a := range s.Attributes {
									exported = exported || a.Key == contract.AttrInvocationID && a.Value.AsString() == want
								}
							}
						}
						exportedAtIdle <- exported
						return
					}
				}
			}()

			req, _ = http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/session/ses_A/prompt_async", strings.NewReader(`{"parts":[{"type":"text","text":"hi"}]}`))
			presp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = presp.Body.Close()
			msgID := <-f.prompts
			idMu.Lock()
			id = presp.Header.Get(HeaderInvocationID)
			idMu.Unlock()
			if id != msgID || presp.StatusCode != http.StatusNoContent {
				t.Fatalf("prompt_async: %s, invocation %q; want 204 and the message id %q", presp.Status, id, msgID)
			}
			f.send(fmt.Sprintf(`{"type":"message.updated","properties":{"sessionID":"ses_A","info":{"id":%q,"sessionID":"ses_A","role":"user","time":{"created":10}}}}`, msgID), 0, 1)
			f.send(fmt.Sprintf(`{"type":"message.updated","properties":{"sessionID":"ses_A","info":{"id":"%s_a","sessionID":"ses_A","role":"assistant","parentID":%q,"modelID":"m","providerID":"p","agent":"build","finish":"stop","tokens":{"input":7,"output":2,"reasoning":0,"cache":{"read":0,"write":0}},"time":{"created":20,"completed":30}}}}`, msgID, msgID), 0, 1)
			// The host's stream has the idle first.
			f.send(`{"type":"session.idle","properties":{"sessionID":"ses_A"}}`, 1)
			if tc.timeout < 0 {
				if <-exportedAtIdle {
					t.Fatal("the root was exported before the Client saw the idle")
				}
				f.send(`{"type":"session.idle","properties":{"sessionID":"ses_A"}}`, 0)
			} else {
				select {
				case <-exportedAtIdle:
					t.Fatal("the host got the idle before the Client handled it")
				default:
				}
				f.send(`{"type":"session.idle","properties":{"sessionID":"ses_A"}}`, 0)
				select {
				case exported := <-exportedAtIdle:
					if !exported {
						t.Fatal("the host got the idle before the prompt's root was exported")
					}
				case <-ctx.Done():
					t.Fatal("the host never got the idle")
				}
			}
			sum, err := sp.Ledger().Wait(ctx, id)
			if err != nil || sum.Status != contract.StatusFinal || sum.Usage.InputTokens != 7 {
				t.Fatalf("invocation %s: %v %+v; want final with the turn's 7 input tokens", id, err, sum)
			}
		})
	}
}
