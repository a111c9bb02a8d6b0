package otelclaudecode

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
	"github.com/agentledger/agentledger/instrument"
	"github.com/agentledger/agentledger/instrument/internal/genaireg"
	"github.com/agentledger/agentledger/instrument/internal/genaitest"
)

// pipeline is an SDK provider whose spans go through the core
// SpanProcessor (ledger) into a recorder and, optionally, an exporter.
type pipeline struct {
	tp  *sdktrace.TracerProvider
	rec *tracetest.SpanRecorder
	sp  *instrument.SpanProcessor
}

func newPipeline(t testing.TB, export sdktrace.SpanProcessor, opts ...instrument.SpanProcessorOption) *pipeline {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	next := fanout{rec}
	if export != nil {
		next = append(next, export)
	}
	sp := instrument.NewSpanProcessor(next, opts...)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return &pipeline{tp: tp, rec: rec, sp: sp}
}

func (p *pipeline) ledger() *instrument.Ledger { return p.sp.Ledger() }

// mapper returns a mapper on this pipeline, as a Client makes one.
func (p *pipeline) mapper(session string) *mapper {
	tracker := instrument.NewTracker(instrument.WithTracerProvider(p.tp))
	return newMapper(p.tp.Tracer(ScopeName), tracker, DefaultAgent, session)
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

// spans returns the ended spans named name (all when name is ""), of
// invocation inv when inv is not "".
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

// checkGenAINames checks the GenAI names of every span p recorded: no
// gen_ai attribute outside the registry; gen_ai.provider.name anthropic on
// every invoke_agent span (root, continuation, unattributed turn) and
// model call; gen_ai.request.stream true on each model call whose
// response began (it came as stream events), absent on the others.
func checkGenAINames(t *testing.T, p *pipeline) {
	t.Helper()
	agents, calls := 0, 0
	for _, s := range p.rec.Ended() {
		genaireg.WantRegistered(t, s)
		op := attr(s, contract.AttrOperationName).AsString()
		if op != contract.OpInvokeAgent && op != contract.OpChat {
			continue
		}
		if got := attr(s, contract.AttrProviderName).AsString(); got != "anthropic" {
			t.Errorf("%s: gen_ai.provider.name %q", s.Name(), got)
		}
		if op == contract.OpInvokeAgent {
			agents++
			continue
		}
		began := attr(s, "gen_ai.response.id").AsString() != ""
		stream, ok := attr(s, contract.AttrRequestStream), false
		if stream.Type() == attribute.BOOL {
			ok = stream.AsBool()
		}
		if ok != began {
			t.Errorf("%s (response id %v): gen_ai.request.stream %v", s.Name(), attr(s, "gen_ai.response.id").Emit(), stream.Emit())
		}
		calls++
	}
	if agents == 0 || calls == 0 {
		t.Errorf("%d invoke_agent spans, %d model calls", agents, calls)
	}
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

// checkDischargedOnce checks that every background span of the pipeline
// has invocation.followups = 1 and exactly one span of its invocation
// that follows it up: a continuation or consuming turn of the same
// invocation, or a followup_closed span.
func checkDischargedOnce(t testing.TB, p *pipeline) {
	t.Helper()
	for _, s := range p.rec.Ended() {
		if attr(s, contract.AttrRole).AsString() != contract.RoleBackground {
			continue
		}
		inv := attr(s, contract.AttrInvocationID).AsString()
		if f := attr(s, contract.AttrFollowups).AsInt64(); f != 1 {
			t.Errorf("%s %s: followups %d", s.Name(), attr(s, AttrTaskID).AsString(), f)
		}
		if n := len(p.linksTo(s.SpanContext(), contract.LinkFollowup, inv)); n != 1 {
			t.Errorf("%s %s of %s: %d followup spans, want exactly 1", s.Name(), attr(s, AttrTaskID).AsString(), inv, n)
		}
	}
}

// want is what one invocation amounts to: the scripted model's request
// numbers it owns, those after its result, and its counts.
type want struct {
	status       string
	calls, after []int
	// cut are requests whose response broke off after message_start:
	// calls of unknown usage; failedCalls calls without usage.
	cut                  []int
	failedCalls          int64
	jobs, continuations  int64
	reasons              []string
	unattributed, reason string
}

func (w want) usage() instrument.Usage {
	var u instrument.Usage
	for _, seq := range w.calls {
		s := scriptedUsage(seq)
		u.InputTokens += int64(s.InputTokens)
		u.OutputTokens += int64(s.OutputTokens)
		u.CacheReadInputTokens += int64(s.CacheReadTokens)
		u.CacheCreationInputTokens += int64(s.CacheCreationTokens)
		u.ReasoningOutputTokens += int64(s.ReasoningTokens)
		if slices.Contains(w.after, seq) {
			u.AfterResultInputTokens += int64(s.InputTokens)
			u.AfterResultOutputTokens += int64(s.OutputTokens)
		}
	}
	u.ModelCalls = int64(len(w.calls)+len(w.cut)) + w.failedCalls
	u.BackgroundJobs, u.Continuations = w.jobs, w.continuations
	return u
}

func checkSummary(t *testing.T, what string, got instrument.Summary, w want) {
	t.Helper()
	wu := w.usage()
	checkUsage(t, what, got, wu)
	if string(got.Status) != w.status || got.Usage.BackgroundJobs != wu.BackgroundJobs || got.Usage.Continuations != wu.Continuations ||
		fmt.Sprint(nonNil(got.Reasons)) != fmt.Sprint(nonNil(w.reasons)) {
		t.Errorf("%s: status %s reasons %v jobs %d continuations %d, want %s %v %d %d",
			what, got.Status, got.Reasons, got.Usage.BackgroundJobs, got.Usage.Continuations, w.status, w.reasons, wu.BackgroundJobs, wu.Continuations)
	}
}

// balance is genaitest.Balance over this harness: every request the
// scripted model answered since its rules were set is on exactly one
// summary of the sessions; the invocations join the collector comparison.
func (h *harness) balance(t *testing.T, sessions ...string) {
	t.Helper()
	ids := genaitest.Balance(t, h.router.Answered(), h.p.ledger(), h.p.rec.Ended(), usageSeed, sessions...)
	h.track(ids...)
	// The CLI's own reports agree with the wire in every scenario here:
	// the cross-check (usage_mismatch) must not fire.
	for _, id := range ids {
		if s, ok := h.p.ledger().Summary(id); ok && slices.ContainsFunc(s.Anomalies, func(a string) bool {
			return strings.HasPrefix(a, contract.AnomalyUsageMismatch+":")
		}) {
			t.Errorf("invocation %s: anomalies %v: the CLI's usage report disagrees with the wire", id, s.Anomalies)
		}
	}
}
