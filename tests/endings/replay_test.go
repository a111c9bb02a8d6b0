package endings_test

import (
	"slices"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/tests/internal/otlpreplay"
)

// verdict is what the collector's processor said of an invocation: the
// last summary it emitted.
type verdict struct {
	status  string
	reasons []string
	usage   usage
}

// replay feeds spans, as exported, to the collector's processor and
// returns its verdict on id.
func replay(t *testing.T, spans []sdktrace.ReadOnlySpan, id string) verdict {
	t.Helper()
	last := otlpreplay.Last(t, spans, id)
	return verdict{status: last.Status, reasons: slices.Clone(last.IncompleteReasons), usage: usage{
		last.InputTokens, last.OutputTokens, last.CacheReadTokens, last.CacheCreationTokens, last.ReasoningTokens}}
}
