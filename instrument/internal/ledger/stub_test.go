package ledger

import (
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentledger/agentledger/instrument/internal/clock"
)

// Defaults of the tests' ledgers: instrument's (DefaultMaxSpansPerInvocation
// and the others of instrument/config.go).
const (
	defaultMaxSpans = 100000
	stubOpenTimeout = 4 * time.Hour
	stubRetention   = 15 * time.Minute
)

// stubBase is when the stubs' spans and the manual clock start.
var stubBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// stubLedger feeds hand-made ended spans straight into a ledger, as the
// SpanProcessor's OnEnd does, for sequences the SDK cannot produce (self
// parents, cycles, reused ids, arbitrary arrival orders).
type stubLedger struct {
	t     *testing.T
	l     *Ledger
	clock *clock.Manual
}

// newStubLedger returns a stubLedger on newTestLedger.
func newStubLedger(t *testing.T, settle time.Duration, maxSpans int) *stubLedger {
	t.Helper()
	l, clk := newTestLedger(settle, maxSpans)
	return &stubLedger{t: t, l: l, clock: clk}
}

// newTestLedger returns a ledger on a manual clock with the settle time
// and span limit given, and instrument's other defaults.
func newTestLedger(settle time.Duration, maxSpans int) (*Ledger, *clock.Manual) {
	clk := clock.NewManual()
	cfg := Config{Clock: clk, RemoteSettle: settle, OpenTimeout: stubOpenTimeout, Retention: stubRetention,
		MaxOpenInvocations: 100000, MaxSpans: maxSpans, ClosedRecords: 1024}
	return New(cfg, metricnoop.NewMeterProvider().Meter("t")), clk
}

// feed delivers spans in order; invocation.children is taken from each
// span's attributes, as the SpanProcessor passes it.
func (sl *stubLedger) feed(spans ...tracetest.SpanStub) {
	for _, s := range spans {
		sl.l.Arrived(s.Snapshot(), CountAbsent)
	}
}
