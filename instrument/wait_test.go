package instrument

import (
	"context"
	"errors"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/contract"
)

// cancelled is a context that has already ended: a Wait given it returns
// at once, with its error unless the answer was there without waiting.
func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// TestWaitUnknownCreatesNothing (issue 9 item 10): waiting on ids the
// ledger never saw answers at once, creates no state and evicts no open
// invocation, however many there are.
func TestWaitUnknownCreatesNothing(t *testing.T) {
	p := newPipelineWith(t, []SpanProcessorOption{WithMaxOpenInvocations(1)})
	l := p.sp.Ledger()
	_, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	for _, id := range []string{"never-1", "never-2", "never-3"} {
		s, err := l.Wait(context.Background(), id)
		if !errors.Is(err, ErrUnknownInvocation) || s.Status != "" {
			t.Errorf("Wait(%s) = %+v, %v; want ErrUnknownInvocation", id, s, err)
		}
		if _, ok := l.Summary(id); ok {
			t.Errorf("Wait(%s) created state", id)
		}
	}
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusPending, contract.ReasonRootMissing)
	inv.End()
	wantStatus(t, p.summary(t, inv.ID()), contract.StatusFinal)
}

// TestLateWaitAnswersFromClosedRecord: after the retention forgot an
// invocation, Wait still answers from the bounded record of closed ids;
// beyond the record's bound the oldest is dropped (and counted).
func TestLateWaitAnswersFromClosedRecord(t *testing.T) {
	p := newPipelineWith(t, []SpanProcessorOption{WithClosedRecords(2)})
	l := p.sp.Ledger()
	var ids []string
	for range 3 {
		ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
		p.chat(ctx, 3, 1)
		inv.End()
		ids = append(ids, inv.ID())
	}
	p.clock.Advance(DefaultRetention)
	for _, id := range ids {
		if _, ok := l.Summary(id); ok {
			t.Fatalf("%s still held after the retention", id)
		}
	}
	if _, err := l.Wait(cancelled(), ids[0]); !errors.Is(err, ErrUnknownInvocation) {
		t.Errorf("Wait on the dropped record: %v", err)
	}
	for _, id := range ids[1:] {
		s, err := l.Wait(cancelled(), id)
		if err != nil || s.Status != contract.StatusFinal || s.InvocationID != id || s.Usage.InputTokens != 3 {
			t.Errorf("late Wait(%s) = %+v, %v", id, s, err)
		}
	}
}

// TestWaitNotSampled (issue 9 item 11): a root the sampler drops, or
// records without sampling, makes Wait answer at once incomplete with
// not_sampled instead of blocking until the open timeout.
func TestWaitNotSampled(t *testing.T) {
	for _, tc := range []struct {
		name    string
		sampler sdktrace.Sampler
	}{
		{"dropped", sdktrace.NeverSample()},
		{"record only", recordOnlySampler{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPipeline(t, sdktrace.WithSampler(tc.sampler))
			ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
			p.chat(ctx, 10, 1)
			inv.End()
			s, err := p.sp.Ledger().Wait(cancelled(), inv.ID())
			if err != nil {
				t.Fatalf("Wait blocked: %v", err)
			}
			wantStatus(t, s, contract.StatusIncomplete, contract.ReasonNotSampled)
			if s.InvocationID != inv.ID() {
				t.Errorf("summary %+v", s)
			}
		})
	}
}

// TestWaitNotSampledWithSampledChildren: a sampler that drops the root but
// samples a child still answers not_sampled (the root never arrives).
func TestWaitNotSampledWithSampledChildren(t *testing.T) {
	p := newPipeline(t, sdktrace.WithSampler(dropRootSampler{}))
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	p.chat(ctx, 10, 1)
	s, err := p.sp.Ledger().Wait(cancelled(), inv.ID())
	if err != nil {
		t.Fatalf("Wait blocked: %v", err)
	}
	wantStatus(t, s, contract.StatusIncomplete, contract.ReasonNotSampled)
	inv.End()
}

type recordOnlySampler struct{}

func (recordOnlySampler) ShouldSample(sdktrace.SamplingParameters) sdktrace.SamplingResult {
	return sdktrace.SamplingResult{Decision: sdktrace.RecordOnly}
}

func (recordOnlySampler) Description() string { return "recordOnly" }

// dropRootSampler drops invocation roots and samples everything else.
type dropRootSampler struct{}

func (dropRootSampler) ShouldSample(p sdktrace.SamplingParameters) sdktrace.SamplingResult {
	if p.Name == "invoke_agent coder" {
		return sdktrace.SamplingResult{Decision: sdktrace.Drop}
	}
	return sdktrace.SamplingResult{Decision: sdktrace.RecordAndSample}
}

func (dropRootSampler) Description() string { return "dropRoot" }
