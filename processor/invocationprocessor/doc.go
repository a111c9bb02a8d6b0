// Package invocationprocessor is the collector half of agentledger: a
// traces processor (component type "invocation") that closes each AI-agent
// invocation's token usage from exported spans alone, as docs/CONTRACT.md
// describes. It decides when an invocation is final (its root, every
// declared child, every promised followup and every detached span have
// arrived, and its remote subtrees have settled), and adds one
// invocation.summary span per decision (pending, final, incomplete, and
// revisions on late spans) to the spans it passes on unchanged.
//
// The rule itself is not here: internal/ledgerrule reads each span's rule
// attributes and decides finality, for this processor and the in-process
// ledger (instrument) alike. This package keeps what a collector adds
// around it: routing spans to shards by (tenant, invocation.id), the
// bounds and tenant quotas, the journal a storage extension holds across
// restarts, the summary spans and their marker, dropping summaries it did
// not write, and publishing live state to the invocation_status extension.
//
// Where to start reading: factory.go and config.go (the component and
// every setting with its default), then processor.go (Start, Shutdown,
// ConsumeTraces and the timer goroutine). A span enters in ConsumeTraces,
// is read and routed to the shard that owns its invocation, is applied to
// that invocation's ledgerrule.Graph, and a summary leaves through the
// shard's outbox to the next consumer. The README's "Internals" section
// maps the remaining files.
package invocationprocessor // import "github.com/agentledger/agentledger/processor/invocationprocessor"
