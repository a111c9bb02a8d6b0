package main

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/contract"
)

func TestReadFlushTimeout(t *testing.T) {
	for v, want := range map[string]time.Duration{"": defaultFlushTimeout, "0": -1, "0s": -1, "750ms": 750 * time.Millisecond} {
		env := envOf()
		if v != "" {
			env = envOf(envFlushTimeout + "=" + v)
		}
		got, err := readFlushTimeout(env)
		if err != nil || got != want {
			t.Errorf("%s=%q: %v, %v; want %v", envFlushTimeout, v, got, err, want)
		}
	}
	for _, v := range []string{"-1s", "soon", "5"} {
		if _, err := readFlushTimeout(envOf(envFlushTimeout + "=" + v)); err == nil {
			t.Errorf("%s=%q: no error", envFlushTimeout, v)
		}
	}
}

// notifyingExporter tells exported of each span it exports.
type notifyingExporter struct{ exported chan string }

func (e notifyingExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	for _, s := range spans {
		e.exported <- s.Name()
	}
	return nil
}

func (notifyingExporter) Shutdown(context.Context) error { return nil }

// TestWakeFlusherExportsAWakeAtOnce: with the batch processor's schedule
// an hour away, a wake span (and what was queued before it) is exported
// without anyone flushing; another span asks for no flush.
func TestWakeFlusherExportsAWakeAtOnce(t *testing.T) {
	exp := notifyingExporter{exported: make(chan string, 16)}
	bsp := sdktrace.NewBatchSpanProcessor(exp, sdktrace.WithBatchTimeout(time.Hour))
	wake := newWakeFlusher(bsp, time.Minute)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(bsp), sdktrace.WithSpanProcessor(wake))
	tr := tp.Tracer("t")
	_, other := tr.Start(context.Background(), "execute_tool Bash")
	other.SetAttributes(attribute.String(contract.AttrRole, contract.RoleBackground))
	other.End()
	if len(wake.kick) != 0 {
		t.Fatal("a flush asked for a span that is no wake")
	}
	_, w := tr.Start(context.Background(), "wake_agent claude-code")
	w.SetAttributes(attribute.String(contract.AttrRole, contract.RoleWake))
	w.End()
	got := map[string]bool{}
	for len(got) < 2 {
		select {
		case name := <-exp.exported:
			got[name] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("exported %v; the wake span was not flushed", got)
		}
	}
	if !got["wake_agent claude-code"] {
		t.Fatalf("exported %v", got)
	}
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
