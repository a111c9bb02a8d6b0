package instrument

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// dropCase starts a model call, which the sampler drops, from a context
// that no open parent of the invocation declares it from.
type dropCase struct {
	name  string
	start func(p *pipeline, ctx context.Context, id string) context.Context
}

var dropCases = []dropCase{
	{"baggage only", func(p *pipeline, ctx context.Context, id string) context.Context {
		c, err := ContextWithInvocation(context.Background(), id)
		if err != nil {
			panic(err)
		}
		return c
	}},
	{"new root from an ended span", func(p *pipeline, ctx context.Context, id string) context.Context {
		tctx, tool := p.tool(ctx)
		tool.End()
		return tctx
	}},
	{"ended parent", func(p *pipeline, ctx context.Context, id string) context.Context {
		tctx, tool := p.tool(ctx)
		tool.End()
		return tctx
	}},
}

// TestEveryDropDeclared: with instrument.Sampler, a model call the inner
// sampler drops is declared whatever its context: the exported spans
// carry the declaration (so the collector cannot say final either), and
// the ledger is never final. Without Sampler, the wrappers'
// NoteUnrecorded does the same.
func TestEveryDropDeclared(t *testing.T) {
	for _, withSampler := range []bool{true, false} {
		for _, rootOpen := range []bool{true, false} {
			for _, c := range dropCases {
				sampler := sdktrace.Sampler(dropNamed{"chat dropped"})
				if withSampler {
					sampler = Sampler(sampler)
				}
				p := newPipeline(t, sdktrace.WithSampler(sampler))
				ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
				p.chat(ctx, 10, 2)
				from := c.start(p, ctx, inv.ID())
				if !rootOpen {
					inv.End()
				}
				var opts []trace.SpanStartOption
				if c.name == "new root from an ended span" {
					opts = append(opts, trace.WithNewRoot())
				}
				opts = append(opts, trace.WithAttributes(attribute.String(contract.AttrOperationName, contract.OpChat)))
				_, call := p.tp.Tracer("example.com/llm").Start(from, "chat dropped", opts...)
				if !withSampler {
					NoteUnrecorded(from, call, "chat dropped")
				}
				call.SetAttributes(attribute.Int64(contract.AttrUsageInputTokens, 500))
				call.End()
				if rootOpen {
					inv.End()
				}
				s := p.summary(t, inv.ID())
				label := c.name
				if s.Status == StatusFinal {
					t.Fatalf("sampler %v, root open %v, %s: final %+v", withSampler, rootOpen, label, s.Usage)
				}
				if rootOpen && intAttr(t, p.span(t, "invoke_agent coder"), contract.AttrUnrecorded) < 1 {
					t.Fatalf("sampler %v, %s: the open root does not declare the drop", withSampler, label)
				}
			}
		}
	}
}

// TestDropHeardByItsOwnPipeline: two pipelines run one invocation id; a
// call pipeline 2 drops is declared in pipeline 2 only.
func TestDropHeardByItsOwnPipeline(t *testing.T) {
	for _, withSampler := range []bool{true, false} {
		p1 := newPipeline(t)
		sampler := sdktrace.Sampler(dropNamed{"chat dropped"})
		if withSampler {
			sampler = Sampler(sampler)
		}
		p2 := newPipeline(t, sdktrace.WithSampler(sampler))
		ctx1, inv1 := p1.tracker.StartInvocation(context.Background(), "coder", "s1")
		ctx2, inv2, err := p2.tracker.StartInvocationWithID(context.Background(), inv1.ID(), "coder", "s1")
		if err != nil {
			t.Fatal(err)
		}
		p1.chat(ctx1, 10, 2)
		_, call := p2.tp.Tracer("x").Start(ctx2, "chat dropped", trace.WithAttributes(attribute.String(contract.AttrOperationName, contract.OpChat)))
		if !withSampler {
			NoteUnrecorded(ctx2, call, "chat dropped")
		}
		call.End()
		inv1.End()
		inv2.End()
		if s := p1.summary(t, inv1.ID()); s.Status != StatusFinal {
			t.Fatalf("sampler %v: pipeline 1 heard of pipeline 2's drop: %s %v", withSampler, s.Status, s.Reasons)
		}
		if s := p2.summary(t, inv2.ID()); s.Status == StatusFinal {
			t.Fatalf("sampler %v: pipeline 2 final without its dropped call", withSampler)
		}
	}
}

// TestDoubleInstrumentationNeverFinal: a model call inside another model
// call of the invocation (an SDK's own span around a wrapper's, or two
// wrappers) is exported marked and the invocation is never final; a model
// call beside another is not.
func TestDoubleInstrumentationNeverFinal(t *testing.T) {
	for _, depth := range []int{0, 1, 2} {
		p := newPipeline(t)
		ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
		tr := p.tp.Tracer("example.com/sdk")
		outer := trace.Span(nil)
		cctx := ctx
		if depth > 0 {
			cctx, outer = tr.Start(ctx, "chat sdk", trace.WithAttributes(attribute.String(contract.AttrOperationName, contract.OpChat)))
			for range depth - 1 {
				var hop trace.Span
				cctx, hop = tr.Start(cctx, "http POST")
				defer hop.End()
			}
		}
		p.chat(cctx, 10, 2)
		if outer != nil {
			outer.SetAttributes(attribute.Int64(contract.AttrUsageInputTokens, 10), attribute.Int64(contract.AttrUsageOutputTokens, 2))
			outer.End()
		}
		p.chat(ctx, 1, 1)
		inv.End()
		s := p.summary(t, inv.ID())
		if depth == 0 {
			wantStatus(t, s, StatusFinal)
			continue
		}
		if s.Status == StatusFinal || !hasReason(s.Reasons, "double_instrumented:chat m") {
			t.Fatalf("depth %d: %s %v", depth, s.Status, s.Reasons)
		}
	}
}
