package otelopencode

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"
)

// Stats are counts of the Client's event stream.
type Stats struct {
	// Events is the number of events read.
	Events int64
	// Ignored counts events of types the mapping does not use.
	Ignored int64
	// Malformed counts events that could not be decoded; they are skipped.
	Malformed int64
	// Reconnects counts reconnections of the stream.
	Reconnects int64
	// EvictedSessions counts sessions that owed nothing and were
	// forgotten beyond WithMaxSessions.
	EvictedSessions int64
	// EvictedJobs counts background jobs dropped from tracking beyond
	// WithMaxJobs; their followup stays open, so their invocation closes
	// incomplete.
	EvictedJobs int64
}

// Stats returns the counts of the event stream so far.
func (c *Client) Stats() Stats { return c.stats.snapshot() }

// telemetry is the Client's internal telemetry: every count of Stats, also
// added to a metric. It is safe for concurrent use.
type telemetry struct {
	events, ignored, malformed, reconnects, evictedSessions, evictedJobs atomic.Int64

	mEvents, mMalformed, mReconnects, mEvictedSessions, mEvictedJobs metric.Int64Counter
}

func newTelemetry(mp metric.MeterProvider) *telemetry {
	meter := mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version()))
	t := &telemetry{}
	// Errors from instrument creation leave a usable no-op instrument.
	t.mEvents, _ = meter.Int64Counter("agentledger.opencode.events",
		metric.WithDescription("Events read from the OpenCode event stream."), metric.WithUnit("{event}"))
	t.mMalformed, _ = meter.Int64Counter("agentledger.opencode.events.malformed",
		metric.WithDescription("Events of the OpenCode event stream that could not be decoded (skipped)."), metric.WithUnit("{event}"))
	t.mReconnects, _ = meter.Int64Counter("agentledger.opencode.reconnects",
		metric.WithDescription("Reconnections of the OpenCode event stream."), metric.WithUnit("{reconnect}"))
	t.mEvictedSessions, _ = meter.Int64Counter("agentledger.opencode.sessions.evicted",
		metric.WithDescription("Sessions that owed nothing, forgotten beyond the session limit (WithMaxSessions)."), metric.WithUnit("{session}"))
	t.mEvictedJobs, _ = meter.Int64Counter("agentledger.opencode.jobs.evicted",
		metric.WithDescription("Background jobs dropped from tracking beyond the job limit (WithMaxJobs); their followup stays open, so their invocation closes incomplete at the open timeout."), metric.WithUnit("{job}"))
	return t
}

func (t *telemetry) eventRead(ctx context.Context) {
	t.events.Add(1)
	t.mEvents.Add(ctx, 1)
}

func (t *telemetry) eventIgnored() { t.ignored.Add(1) }

func (t *telemetry) eventMalformed() {
	t.malformed.Add(1)
	t.mMalformed.Add(context.Background(), 1)
}

func (t *telemetry) reconnected(ctx context.Context) {
	t.reconnects.Add(1)
	t.mReconnects.Add(ctx, 1)
}

func (t *telemetry) sessionEvicted() {
	t.evictedSessions.Add(1)
	t.mEvictedSessions.Add(context.Background(), 1)
}

func (t *telemetry) jobEvicted() {
	t.evictedJobs.Add(1)
	t.mEvictedJobs.Add(context.Background(), 1)
}

func (t *telemetry) snapshot() Stats {
	return Stats{
		Events:          t.events.Load(),
		Ignored:         t.ignored.Load(),
		Malformed:       t.malformed.Load(),
		Reconnects:      t.reconnects.Load(),
		EvictedSessions: t.evictedSessions.Load(),
		EvictedJobs:     t.evictedJobs.Load(),
	}
}
