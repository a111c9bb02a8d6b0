// Package ledgerrule is the one place where agentledger turns a span into
// the facts its finality rule reads (docs/CONTRACT.md, "One reading of
// every span", v0.6), and where the parts of the rule that need no graph
// are decided: which attributes are malformed, what a count or a link
// kind reads as, which usage is summed, and the status an invocation's
// obligations allow.
//
// Both halves use it: the in-process ledger (instrument) and the collector
// processor (processor/invocationprocessor), live and, in the processor,
// when it replays its journal after a restart. Neither half decodes a rule
// attribute itself: each walks its own attribute representation (an
// OpenTelemetry Go attribute.KeyValue slice, a pdata map) and hands every
// value whose key Lookup knows to a SpanReader as a Value. Because every
// reading goes through here, a value of the wrong type or a key repeated
// with different values reads the same way everywhere: malformed, never
// absent.
//
// The package depends on the standard library and the contract package
// only, so a user of instrument compiles nothing of the collector.
package ledgerrule
