// Package journal is the stored form of the invocation ledger: the byte
// codec (codec.go: varints, strings, IDs, attribute values, spans;
// summary.go and raw.go: a summary not yet delivered, as its fields) and
// the framing of what the processor writes to its storage extension
// (record.go: an Op is one locked section of a shard, its Events are what
// it read and decided; a Manifest says where a partition's snapshot and
// log are; the keys they are stored under).
//
// It knows nothing of the ledger: it moves spans, attributes, events and
// summaries' fields, as filestorage moves bytes. The processor's root
// package journals a shard through its shardJournal interface
// (journal.go) and replays these records through the ledger's own
// per-span path (storage_load.go).
//
// Start reading at record.go's Op and Event.
package journal // import "github.com/agentledger/agentledger/processor/invocationprocessor/internal/journal"
