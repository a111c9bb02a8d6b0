// Package instrument is the in-process half of agentledger: it gives every
// span of an agent invocation the invocation's identity, counts children,
// and records the lifecycle of invocations whose background jobs outlive
// the call that started them, as the wire contract (CONTRACT.md) describes.
//
// Three pieces work together:
//
//   - SpanProcessor wraps the exporting span processor of an SDK
//     TracerProvider. For every span, including spans of other libraries,
//     it stamps invocation.id from the W3C baggage member of the same name
//     (or inherits it from a parent span it tracks), and adds
//     invocation.children, the number of sampled direct children of the
//     same invocation that started before the span ended, to the span it
//     hands to the next processor. A child that starts after its parent
//     ended is still exported with its invocation id and is marked
//     invocation.late_child=true; the collector reports it as
//     extra_children.
//   - Tracker starts the lifecycle spans: the invocation root
//     (invoke_agent), background jobs (background {kind}), continuations
//     (continue_agent) and followup_closed spans, and carries a job's
//     context to a subprocess (Job.Env) or into a completion notification
//     (Job.Carrier).
//   - Ledger, fed by the SpanProcessor, keeps running usage sums per
//     invocation and decides finality by the contract's rule, so a runtime
//     can tell in process when an invocation is final, and whether a
//     session still owes work.
//
// The ledger only sees spans that end in this process. Spans exported by
// subprocesses that received a job's context are not seen; as in the
// collector, a remote span's subtree must be quiet for the remote settle
// time (WithRemoteSettle) before the invocation is final, but here the
// quiet time only covers the spans of this process.
package instrument // import "github.com/agentledger/agentledger/instrument"
