package otelopencode

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
	// EvictedJobs counts background jobs dropped from tracking, with
	// their followup closed, beyond WithMaxJobs.
	EvictedJobs int64
}

// Stats returns the counts of the event stream so far.
func (c *Client) Stats() Stats {
	return Stats{
		Events:          c.events.Load(),
		Ignored:         c.ignored.Load(),
		Malformed:       c.malformed.Load(),
		Reconnects:      c.reconnects.Load(),
		EvictedSessions: c.evicted.Load(),
		EvictedJobs:     c.evictedJobs.Load(),
	}
}
