package otelopencode

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/genaitest"
	"github.com/agentledger/agentledger/instrument/internal/wireproxy"
)

// TestTransportAnswersAfterExport: the answer to POST
// /session/:id/message reaches the caller after the prompt's root was
// exported, though the exporter's own schedule is an hour away.
func TestTransportAnswersAfterExport(t *testing.T) {
	for _, tc := range []struct {
		name     string
		timeout  time.Duration
		exported int
	}{{"flushed", 0, 1}, {"flush off", -1, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			sp := instrument.NewSpanProcessor(sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithBatchTimeout(time.Hour)))
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			p := &pipeline{tp: tp, rec: tracetest.NewSpanRecorder(), sp: sp, tracker: instrument.NewTracker(instrument.WithTracerProvider(tp))}
			f := newPromptServer()
			f.answer = true
			c := startClientOf(t, p, f, WithSyncTimeout(time.Millisecond), WithMessageInvocationIDs(), WithFlushTimeout(tc.timeout))
			req, err := http.NewRequest(http.MethodPost, c.api.base.String()+"/session/ses_A/message", strings.NewReader(`{"parts":[{"type":"text","text":"hi"}]}`))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := c.Transport(nil).RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			id := resp.Header.Get(HeaderInvocationID)
			var roots int
			for _, s := range exp.GetSpans() {
				for _, a := range s.Attributes {
					if a.Key == contract.AttrInvocationID && a.Value.AsString() == id && !s.Parent.SpanID().IsValid() {
						roots++
					}
				}
			}
			if id == "" || roots != tc.exported {
				t.Fatalf("invocation %q: %d roots exported when the answer came, want %d", id, roots, tc.exported)
			}
		})
	}
}

// TestWakeExportedAtOnce: a turn OpenCode starts by itself (here a model
// request of a session the Client tracks no message of: an unattributed
// turn) exports its wake span through the Client's flush, not on the
// exporter's schedule, an hour away; the proxy's decision does not wait
// for it.
func TestWakeExportedAtOnce(t *testing.T) {
	tp, exp := genaitest.WakeProvider(t)
	c, err := New("http://127.0.0.1:9", nil, WithTracerProvider(tp))
	if err != nil {
		t.Fatal(err)
	}
	c.m.wire = true
	w := &wireAttributor{m: c.m, wait: time.Millisecond, toolOwners: wireproxy.NewToolOwners(0)}
	d := w.attribute(wireReq("ses_nobody", chatBody), []byte(chatBody))
	id := invocationOf(d.Ctx)
	if x := exp.WaitWake(t); x.Invocation != id || id == "" {
		t.Fatalf("wake of %q exported, want the unattributed turn %q", x.Invocation, id)
	}
	d.Done(zeroUsage)
}
