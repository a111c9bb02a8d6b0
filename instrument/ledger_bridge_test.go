package instrument

import (
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentledger/agentledger/instrument/internal/ledger"
)

// The ledger's tests in this package feed it spans through these bridges
// to instrument/internal/ledger.

// countAbsent is a child count the SpanProcessor did not keep.
const countAbsent = ledger.CountAbsent

// arrived applies one ended, sampled span s, whose invocation.children
// the SpanProcessor counted (countAbsent for none), as OnEnd does.
func (l *Ledger) arrived(s sdktrace.ReadOnlySpan, children int) { l.l.Arrived(s, children) }

// TestUnattributedUnknown: the ledger reads a turn's root that names no
// reason as UnattributedUnknown.
func TestUnattributedUnknown(t *testing.T) {
	if ledger.UnattributedUnknown != string(UnattributedUnknown) {
		t.Errorf("ledger.UnattributedUnknown %q, want %q", ledger.UnattributedUnknown, UnattributedUnknown)
	}
}
