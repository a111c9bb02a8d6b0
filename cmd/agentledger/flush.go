package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/contract"
)

// envFlushTimeout bounds the export a drop-in waits for before it passes
// a result on to the host (the adapters' WithFlushTimeout); 0 turns the
// wait off.
const envFlushTimeout = "AGENTLEDGER_FLUSH_TIMEOUT"

// defaultFlushTimeout is the flush bound without AGENTLEDGER_FLUSH_TIMEOUT.
const defaultFlushTimeout = 2 * time.Second

// readFlushTimeout reads AGENTLEDGER_FLUSH_TIMEOUT: a duration, "0" for
// no flush. It returns the adapters' option value: negative for off.
func readFlushTimeout(env environ) (time.Duration, error) {
	v, ok := env(envFlushTimeout)
	if !ok || v == "" {
		return defaultFlushTimeout, nil
	}
	d, err := time.ParseDuration(v)
	if v == "0" {
		d, err = 0, nil
	}
	if err != nil || d < 0 {
		return 0, fmt.Errorf("%s=%q: want a duration such as 2s, or 0 to pass results on without waiting for the export", envFlushTimeout, v)
	}
	if d == 0 {
		return -1, nil
	}
	return d, nil
}

// wakeFlusher exports a wake span (contract.RoleWake) as soon as it ends,
// instead of on the batch processor's schedule: the collector's session
// watch wakes a released host on it, while the turn it announces runs.
// It follows the batch processor in the provider, so the wake is queued
// when it is told; the flush runs on its own goroutine (a span's End
// never waits for the collector), one at a time, each bounded.
type wakeFlusher struct {
	next    sdktrace.SpanProcessor
	timeout time.Duration
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

func newWakeFlusher(next sdktrace.SpanProcessor, timeout time.Duration) *wakeFlusher {
	w := &wakeFlusher{next: next, timeout: timeout, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *wakeFlusher) run() {
	defer close(w.done)
	for {
		select {
		case <-w.kick:
			ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
			// Errors reach the exporter's error handler.
			_ = w.next.ForceFlush(ctx)
			cancel()
		case <-w.stop:
			return
		}
	}
}

func (*wakeFlusher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd asks for a flush when s is a wake span; a flush already asked for
// covers it.
func (w *wakeFlusher) OnEnd(s sdktrace.ReadOnlySpan) {
	for _, a := range s.Attributes() {
		if a.Key == contract.AttrRole {
			if a.Value.AsString() == contract.RoleWake {
				select {
				case w.kick <- struct{}{}:
				default:
				}
			}
			return
		}
	}
}

// Shutdown stops the goroutine; the provider shuts the batch processor
// down itself.
func (w *wakeFlusher) Shutdown(context.Context) error {
	w.once.Do(func() { close(w.stop) })
	<-w.done
	return nil
}

func (*wakeFlusher) ForceFlush(context.Context) error { return nil }
