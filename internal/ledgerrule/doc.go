// Package ledgerrule is agentledger's finality rule, once: the one reader
// that turns a span into the facts the rule reads (docs/CONTRACT.md,
// "Malformed input fails closed"; the changelog's v0.6, "One reading of
// every span"), and the one implementation of the rule itself, Graph
// (CONTRACT.md v0.10, "One rule on both halves"): membership by span ID,
// counts, followups, detached and unrecorded spans, links by (trace ID,
// span ID), parent cycles, the span bound, per-subtree remote settle,
// usage sums, reasons and anomalies, and compaction at close.
//
// Both halves use it: the in-process ledger (instrument) and the collector
// processor (processor/invocationprocessor), live and, in the processor,
// when it replays its journal after a restart. Each keeps one Graph per
// invocation and no second copy of what it decides. Neither half decodes a
// rule attribute itself: each walks its own attribute representation (an
// OpenTelemetry Go attribute.KeyValue slice, a pdata map) and hands every
// value whose key Lookup knows to a SpanReader as a Value. Because every
// reading goes through here, a value of the wrong type or a key repeated
// with different values reads the same way everywhere: malformed, never
// absent.
//
// Where to start reading: facts.go (Lookup, SpanReader.Read, Facts: a
// span's reading), graph_span.go (a Span, the Result of its arrival),
// then Graph.Arrive in graph_arrive.go (one span's arrival, the rule's
// conditions as state; graph_usage.go sums a model call's usage),
// graph_parent.go,
// graph_links.go and graph_detached.go (the parts of the graph), and
// graph_close.go (Obligations, Reasons, AnomaliesFor, Shut); status.go
// turns Obligations into a status, and graph_state.go is the Graph's
// stored form for the processor's journal.
//
// The package depends on the standard library and the contract package
// only, so a user of instrument compiles nothing of the collector.
package ledgerrule
