package instrument

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"

	"github.com/agentledger/agentledger/contract"
)

// childEnv switches the test binary into the subprocess role of
// TestSubprocessSpanJoinsInvocation.
const childEnv = "AGENTLEDGER_INSTRUMENT_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		if err := runChild(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// runChild is the subprocess: it reads its parent job's context from the
// environment and exports one span as JSON on stdout.
func runChild() error {
	exp, err := stdouttrace.New(stdouttrace.WithWriter(os.Stdout))
	if err != nil {
		return fmt.Errorf("stdout exporter: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(NewSpanProcessor(sdktrace.NewSimpleSpanProcessor(exp))))
	ctx := ContextFromEnv(context.Background(), os.Environ())
	_, span := tp.Tracer("example.com/child").Start(ctx, "child work")
	span.End()
	return tp.Shutdown(context.Background())
}

func TestSubprocessSpanJoinsInvocation(t *testing.T) {
	p := newPipeline(t)
	ctx, inv := p.tracker.StartInvocation(context.Background(), "coder", "s1")
	_, job := p.tracker.StartBackground(ctx, "shell")

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"=1"), job.Env()...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	job.EndWithoutFollowup(nil)
	inv.End()

	var got struct {
		Name        string
		SpanContext struct{ TraceID, SpanID string }
		Parent      struct {
			TraceID, SpanID string
			Remote          bool
		}
		Attributes []struct {
			Key   string
			Value struct{ Value any }
		}
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("child output %q: %v", out, err)
	}
	jsc := job.Span().SpanContext()
	if got.Name != "child work" || got.Parent.SpanID != jsc.SpanID().String() ||
		got.SpanContext.TraceID != jsc.TraceID().String() || !got.Parent.Remote {
		t.Errorf("child span = %+v, want a child of %s", got, jsc.SpanID())
	}
	attrs := map[string]any{}
	for _, a := range got.Attributes {
		attrs[a.Key] = a.Value.Value
	}
	if attrs[contract.AttrInvocationID] != inv.ID() {
		t.Errorf("child attributes %v, want invocation.id %s", attrs, inv.ID())
	}
	if _, ok := attrs[contract.AttrChildren]; !ok {
		t.Errorf("child attributes %v lack invocation.children", attrs)
	}
}
