// Package summary is where an invocation's summary leaves the processor:
// a Summary is the snapshot the ledger took under its shard's lock
// (the processor's snapshot.go), and Build turns a send's summaries into
// the invocation.summary spans of one ptrace.Traces, each under its root's
// resource, with the attributes CONTRACT.md lists.
//
// It knows nothing of shards, finality or storage. Start reading at Build.
package summary // import "github.com/agentledger/agentledger/processor/invocationprocessor/internal/summary"
