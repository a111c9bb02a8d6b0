package instrument

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

// limits returns the SDK's default span limits with f applied.
func limits(f func(*sdktrace.SpanLimits)) sdktrace.TracerProviderOption {
	l := sdktrace.NewSpanLimits()
	f(&l)
	return sdktrace.WithRawSpanLimits(l)
}

// streamedChat records a model call as a streaming client does: request
// attributes at its start, usage at its end, when the attribute count
// limit may already be reached.
func (p *pipeline) streamedChat(ctx context.Context, in, out, cacheRead int64) {
	_, s := p.tp.Tracer("example.com/llm").Start(ctx, "chat m", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String(contract.AttrOperationName, contract.OpChat),
			attribute.String(contract.AttrRequestModel, "m"),
			attribute.String("server.address", "localhost"),
			attribute.Int("server.port", 8080),
		))
	s.SetAttributes(attribute.Int64(contract.AttrUsageInputTokens, in))
	s.SetAttributes(attribute.Int64(contract.AttrUsageOutputTokens, out), attribute.Int64(contract.AttrUsageCacheReadTokens, cacheRead))
	s.End()
}

// TestSDKAttributeCountLimitIsNeverFinal: the attribute count limit drops
// the usage a streamed call sets at its end; the ledger says so.
func TestSDKAttributeCountLimitIsNeverFinal(t *testing.T) {
	for limit := 4; limit <= 8; limit++ {
		p := newPipeline(t, limits(func(l *sdktrace.SpanLimits) { l.AttributeCountLimit = limit }))
		ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
		p.streamedChat(ctx, 100, 20, 7)
		inv.End()
		s := p.summary(t, inv.ID())
		dropped := p.span(t, "chat m").DroppedAttributes
		if dropped == 0 {
			wantStatus(t, s, StatusFinal)
			if s.Usage.InputTokens != 100 || s.Usage.OutputTokens != 20 || s.Usage.CacheReadInputTokens != 7 {
				t.Fatalf("limit %d: final with usage %+v", limit, s.Usage)
			}
			continue
		}
		if s.Status == StatusFinal || !hasReason(s.Reasons, "sdk_limit:attributes on ") {
			t.Fatalf("limit %d (dropped %d): %s %v", limit, dropped, s.Status, s.Reasons)
		}
	}
}

// TestSDKLinkCountLimitIsNeverFinal: a span that lost links to the
// SDK's link limit may have lost a followup link.
func TestSDKLinkCountLimitIsNeverFinal(t *testing.T) {
	p := newPipeline(t, limits(func(l *sdktrace.SpanLimits) { l.LinkCountLimit = 1 }))
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	other := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9}, SpanID: trace.SpanID{9}})
	_, s := p.tp.Tracer("x").Start(ctx, "linker", trace.WithLinks(trace.Link{SpanContext: other}, trace.Link{SpanContext: other}))
	s.End()
	inv.End()
	sum := p.summary(t, inv.ID())
	if sum.Status == StatusFinal || !hasReason(sum.Reasons, "sdk_limit:links on linker") {
		t.Fatalf("%s %v", sum.Status, sum.Reasons)
	}
}

func hasReason(reasons []string, want string) bool {
	for _, r := range reasons {
		if r == want || strings.HasPrefix(r, want) {
			return true
		}
	}
	return false
}

// TestSDKValueLengthLimitKeysOneWay: a value length limit shorter than
// the invocation and session ids cuts them on every span; the ledger keys
// the invocation and its session by the full ids, the exported spans carry
// them whole with invocation.sdk_limit, and nothing is final.
func TestSDKValueLengthLimitKeysOneWay(t *testing.T) {
	for _, limit := range []int{0, 1, 8, 31, 32, 40} {
		p := newPipeline(t, limits(func(l *sdktrace.SpanLimits) { l.AttributeValueLengthLimit = limit }))
		session := "session-0123456789abcdef0123456789"
		ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", session)
		_, job := p.tracker.StartBackground(ctx, "shell")
		p.chat(ctx, 10, 2)
		inv.End()
		if got := p.sp.Ledger().Session(session); !got.OwesWork {
			t.Fatalf("limit %d: Session(full id) owes no work while a job runs: %+v", limit, got)
		}
		if len(session) > limit {
			if got := p.sp.Ledger().Session(session[:limit]); got.OwesWork {
				t.Fatalf("limit %d: the cut session owes work", limit)
			}
		}
		job.EndWithoutFollowup(nil)
		s := p.summary(t, inv.ID())
		cutID := len(inv.ID()) > limit
		for _, sp := range p.exp.GetSpans() {
			if got := strAttr(sp, contract.AttrInvocationID); got != inv.ID() {
				t.Fatalf("limit %d: span %s exported with invocation.id %q, want %q", limit, sp.Name, got, inv.ID())
			}
			_, marked := attrOf(sp, contract.AttrSDKLimit)
			sessionCut := strAttr(sp, contract.AttrRole) == contract.RoleRoot && len(session) > limit
			if marked != (cutID || sessionCut) {
				t.Fatalf("limit %d: span %s marked %v", limit, sp.Name, marked)
			}
			if sessionCut && strAttr(sp, contract.AttrConversationID) != session {
				t.Fatalf("limit %d: root exported with session %q", limit, strAttr(sp, contract.AttrConversationID))
			}
		}
		if cutID || len(session) > limit {
			if s.Status == StatusFinal || !hasReason(s.Reasons, "sdk_limit:attribute_value_length on ") {
				t.Fatalf("limit %d: %s %v", limit, s.Status, s.Reasons)
			}
		}
		if s.SessionID != session && s.SessionID != "" {
			t.Fatalf("limit %d: session %q", limit, s.SessionID)
		}
	}
}
