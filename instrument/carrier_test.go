package instrument

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentledger/agentledger/contract"
)

const goodTraceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestParseCarrier(t *testing.T) {
	good := Carrier{"traceparent": goodTraceparent, "baggage": "invocation.id=abc,other=1", "tracestate": "k=v"}
	ref, err := ParseCarrier(good)
	if err != nil {
		t.Fatal(err)
	}
	if ref.InvocationID != "abc" || ref.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		ref.SpanContext.SpanID().String() != "00f067aa0ba902b7" || !ref.SpanContext.IsSampled() ||
		ref.SpanContext.TraceState().Get("k") != "v" {
		t.Errorf("ref = %+v", ref)
	}

	for name, tc := range map[string]struct {
		c    Carrier
		want error
	}{
		"no traceparent":  {Carrier{"baggage": "invocation.id=a"}, ErrBadTraceparent},
		"short":           {Carrier{"traceparent": goodTraceparent[:54], "baggage": "invocation.id=a"}, ErrBadTraceparent},
		"upper hex":       {Carrier{"traceparent": strings.ToUpper(goodTraceparent), "baggage": "invocation.id=a"}, ErrBadTraceparent},
		"version ff":      {Carrier{"traceparent": "ff" + goodTraceparent[2:], "baggage": "invocation.id=a"}, ErrBadTraceparent},
		"zero trace id":   {Carrier{"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01", "baggage": "invocation.id=a"}, ErrBadTraceparent},
		"zero span id":    {Carrier{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "baggage": "invocation.id=a"}, ErrBadTraceparent},
		"bad separator":   {Carrier{"traceparent": strings.Replace(goodTraceparent, "-", "_", 1), "baggage": "invocation.id=a"}, ErrBadTraceparent},
		"no baggage":      {Carrier{"traceparent": goodTraceparent}, ErrBadBaggage},
		"no member":       {Carrier{"traceparent": goodTraceparent, "baggage": "other=1"}, ErrBadBaggage},
		"empty member":    {Carrier{"traceparent": goodTraceparent, "baggage": "invocation.id="}, ErrBadBaggage},
		"broken baggage":  {Carrier{"traceparent": goodTraceparent, "baggage": "=,="}, ErrBadBaggage},
		"oversized value": {Carrier{"traceparent": goodTraceparent, "baggage": "invocation.id=" + strings.Repeat("a", 300)}, ErrBadBaggage},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseCarrier(tc.c); !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
		})
	}
	// An invalid tracestate is dropped, not fatal.
	if ref, err := ParseCarrier(Carrier{"traceparent": goodTraceparent, "baggage": "invocation.id=a", "tracestate": "###"}); err != nil || ref.SpanContext.TraceState().Len() != 0 {
		t.Errorf("invalid tracestate: %+v, %v", ref, err)
	}
}

func TestJobCarrierAndEnvRoundTrip(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	_, job := p.tracker.StartBackground(ctx, "shell")
	ref, err := ParseCarrier(job.Carrier())
	if err != nil {
		t.Fatal(err)
	}
	if ref.InvocationID != inv.ID() || ref.SpanContext.SpanID() != job.Span().SpanContext().SpanID() {
		t.Errorf("carrier names %+v", ref)
	}
	env := job.Env()
	got := ContextFromEnv(context.Background(), append([]string{"PATH=/bin", "junk"}, env...))
	sc := trace.SpanContextFromContext(got)
	if sc.SpanID() != job.Span().SpanContext().SpanID() || !sc.IsRemote() {
		t.Errorf("env span context = %+v (env %v)", sc, env)
	}
	if id := baggage.FromContext(got).Member(contract.BaggageInvocationID).Value(); id != inv.ID() {
		t.Errorf("env invocation = %q", id)
	}
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != "TRACEPARENT" && k != "BAGGAGE" && k != "TRACESTATE" {
			t.Errorf("unexpected env var %s", kv)
		}
	}
	job.EndWithoutFollowup(nil)
	inv.End()
	if v, ok := attrOf(p.span(t, "background shell"), contract.AttrRemote); !ok || !v.AsBool() {
		t.Error("background span handed to a subprocess is not remote")
	}
}

func FuzzParseCarrier(f *testing.F) {
	f.Add(goodTraceparent, "k=v", "invocation.id=abc")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "", "invocation.id=%20x,y=z;p")
	f.Add("", "", "")
	f.Add("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "", "invocation.id=a")
	f.Add(goodTraceparent+"-extra", "a=b,c=d", "invocation.id="+strings.Repeat("z", 257))
	f.Add("00-00000000000000000000000000000000-0000000000000000-ff", "###", "=;=")
	f.Fuzz(func(t *testing.T, tp, ts, bag string) {
		ref, err := ParseCarrier(Carrier{"traceparent": tp, "tracestate": ts, "baggage": bag})
		if err != nil {
			if !errors.Is(err, ErrBadTraceparent) && !errors.Is(err, ErrBadBaggage) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		if !ref.SpanContext.IsValid() || ref.InvocationID == "" || len(ref.InvocationID) > maxInvocationIDLen {
			t.Fatalf("accepted %q %q %q as %+v", tp, ts, bag, ref)
		}
		// What is accepted survives a round trip through a carrier.
		ctx := trace.ContextWithRemoteSpanContext(context.Background(), ref.SpanContext)
		ctx, cerr := ContextWithInvocation(ctx, ref.InvocationID)
		if cerr != nil {
			return // a value the parser accepts but baggage cannot carry raw
		}
		c := Carrier{}
		w3c.Inject(ctx, c)
		again, err := ParseCarrier(c)
		if err != nil {
			t.Fatalf("re-parse of %v: %v", c, err)
		}
		if again.InvocationID != ref.InvocationID || again.SpanContext.SpanID() != ref.SpanContext.SpanID() ||
			again.SpanContext.TraceID() != ref.SpanContext.TraceID() {
			t.Fatalf("round trip %+v -> %+v", ref, again)
		}
	})
}
