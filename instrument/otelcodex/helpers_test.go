package otelcodex

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
)

// pipeline is an SDK provider whose spans go through the core
// SpanProcessor (ledger) into a recorder and, optionally, an exporter.
type pipeline struct {
	tp  *sdktrace.TracerProvider
	rec *tracetest.SpanRecorder
	sp  *instrument.SpanProcessor
}

func newPipeline(t testing.TB, export sdktrace.SpanProcessor) *pipeline {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	next := fanout{rec}
	if export != nil {
		next = append(next, export)
	}
	sp := instrument.NewSpanProcessor(next)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &pipeline{tp: tp, rec: rec, sp: sp}
}

func (p *pipeline) ledger() *instrument.Ledger { return p.sp.Ledger() }

// mapper returns a mapper on this pipeline, as a Client makes one.
func (p *pipeline) mapper(session string) *mapper {
	tracker := instrument.NewTracker(instrument.WithTracerProvider(p.tp))
	return newMapper(p.tp.Tracer(ScopeName), tracker, DefaultAgent, session, DefaultTurnSync)
}

// fanout hands every span to each processor in turn.
type fanout []sdktrace.SpanProcessor

func (f fanout) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) {
	for _, p := range f {
		p.OnStart(ctx, s)
	}
}

func (f fanout) OnEnd(s sdktrace.ReadOnlySpan) {
	for _, p := range f {
		p.OnEnd(s)
	}
}

func (f fanout) Shutdown(ctx context.Context) error {
	for _, p := range f {
		if err := p.Shutdown(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (f fanout) ForceFlush(ctx context.Context) error {
	for _, p := range f {
		if err := p.ForceFlush(ctx); err != nil {
			return err
		}
	}
	return nil
}

// spans returns the ended spans named name (all when ""), of invocation
// inv when inv is not "".
func (p *pipeline) spans(name, inv string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range p.rec.Ended() {
		if (name == "" || s.Name() == name) && (inv == "" || attr(s, contract.AttrInvocationID).AsString() == inv) {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// linksTo returns the spans of inv (any when "") with a link of kind to
// target.
func (p *pipeline) linksTo(target trace.SpanContext, kind, inv string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range p.spans("", inv) {
		for _, l := range s.Links() {
			if l.SpanContext.SpanID() != target.SpanID() || l.SpanContext.TraceID() != target.TraceID() {
				continue
			}
			for _, kv := range l.Attributes {
				if string(kv.Key) == contract.AttrLink && kv.Value.AsString() == kind {
					out = append(out, s)
				}
			}
		}
	}
	return out
}

// checkDischargedOnce checks that every background span of invocation inv
// has invocation.followups = 1 and exactly one span of inv following it up
// (a continuation, a turn that read it, a followup_closed span).
func checkDischargedOnce(t testing.TB, p *pipeline, inv string) {
	t.Helper()
	for _, s := range p.spans("", inv) {
		if attr(s, contract.AttrRole).AsString() != contract.RoleBackground {
			continue
		}
		if f := attr(s, contract.AttrFollowups).AsInt64(); f != 1 {
			t.Errorf("%s: followups %d", s.Name(), f)
		}
		if n := len(p.linksTo(s.SpanContext(), contract.LinkFollowup, inv)); n != 1 {
			t.Errorf("%s of %s: %d followup spans, want exactly 1", s.Name(), inv, n)
		}
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// wantSummary checks a summary's status, reasons, anomalies and counts.
func wantSummary(t testing.TB, what string, got instrument.Summary, status string, reasons, anomalies []string, jobs, continuations int64) {
	t.Helper()
	slices.Sort(anomalies)
	gotAnomalies := slices.Clone(got.Anomalies)
	slices.Sort(gotAnomalies)
	if string(got.Status) != status || fmt.Sprint(nonNil(got.Reasons)) != fmt.Sprint(nonNil(reasons)) ||
		fmt.Sprint(nonNil(gotAnomalies)) != fmt.Sprint(nonNil(anomalies)) ||
		got.Usage.BackgroundJobs != jobs || got.Usage.Continuations != continuations {
		t.Errorf("%s: status %s reasons %v anomalies %v jobs %d continuations %d; want %s %v %v %d %d",
			what, got.Status, got.Reasons, got.Anomalies, got.Usage.BackgroundJobs, got.Usage.Continuations,
			status, reasons, anomalies, jobs, continuations)
	}
}
