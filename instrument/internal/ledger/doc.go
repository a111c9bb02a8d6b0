// Package ledger is the in-process ledger of package instrument: the
// state behind instrument.Ledger, which the instrument.SpanProcessor
// feeds every span it sees start and end. It keeps one
// ledgerrule.Graph per invocation (internal/ledgerrule, the finality rule
// the collector runs too) plus what only the process can see (spans seen
// to start and not yet ended, sessions, timers), and answers Usage,
// Summary, Wait and Session in its own types, which instrument converts
// into its public ones.
//
// Start reading at Ledger (ledger.go); spans enter through ingest.go
// (Started at a span's start; Read, then Apply, at its end), each read
// once as exported (facts.go, with the counts of exportcounts.go that the
// exported span carries too); finality.go closes and revises an
// invocation; query.go answers.
package ledger
