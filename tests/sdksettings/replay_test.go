package sdksettings_test

import (
	"testing"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/internal/testbin"
	"github.com/agentledger/agentledger/tests/internal/otlpreplay"
)

// collectorSays feeds the exported spans, as OTLP carries them (dropped
// counts included), to the collector's processor and returns its last
// summary of id (after a shutdown when it was still pending).
func collectorSays(t *testing.T, spans []tracetest.SpanStub, id string) testbin.Summary {
	t.Helper()
	return otlpreplay.Last(t, tracetest.SpanStubs(spans).Snapshots(), id)
}
