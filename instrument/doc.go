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
// The Ledger applies the contract's v0.2 rules the same way the collector
// does (both are tested on internal/contract/fixtures): a late child never
// discharges its parent's count; a span discharges at most one followup
// per job it links to; self parents, parents in another trace, parent
// cycles, self or followup-and-consumed links and reused span IDs, counts
// that cannot be proven, a model call that did not fail yet carries no
// usage, and an unattributed turn (Tracker.StartUnattributed) close the
// invocation incomplete, never final. A span that arrives after the
// invocation closed revises its summary by the whole rule. Because it
// sees every span start, the Ledger also never says final while a span of
// the invocation that no count declares is open (a background job, a
// continuation, a late child): its pending reasons name it
// "open_span:<name>".
//
// A job launched from a span that has already ended (a tool that returned
// before its job started) is declared by the nearest open span of its
// invocation (Tracker.StartBackground), with a launched_by link to the
// ended span; with none open, it starts its own trace marked
// invocation.late_child and the Ledger reports orphan_job.
//
// Pitfalls the package reports rather than hides: a Tracker whose
// TracerProvider has no SpanProcessor in its pipeline reaches no Ledger;
// it says so through otel.Handle (ErrNoSpanProcessor, once per Tracker) and
// counts its spans in agentledger.instrument.tracker.unledgered_spans. An
// invocation whose root the sampler does not sample cannot be observed:
// Ledger.Wait answers it at once, incomplete with reason not_sampled.
// Ledger.Wait never creates state for an id it does not know; it answers
// from a bounded record of forgotten invocations (WithClosedRecords) or
// with ErrUnknownInvocation.
//
// Spans the collector would never see are declared (contract v0.6 rules
// 3 and 4). A span started as the root of a new trace
// (trace.WithNewRoot) from the context of an open span of its invocation
// is counted in that span's invocation.detached and links back to it
// with invocation.link=detached_from; the Ledger, like the collector, is
// final only when every such span arrived (else missing_detached). Started
// so from a span that has ended, it is marked invocation.late_child and
// declares nothing; the Ledger still waits for it. The Tracker's own
// new-trace spans (continuations, followup_closed) are declared otherwise
// and are not counted.
//
// A span the sampler drops inside a recording invocation is never
// exported, and the SDK does not show it to the SpanProcessor. Two things
// make it visible, and each makes its invocation incomplete with
// not_sampled, never final:
//
//   - Sampler wraps the provider's sampler: a span the inner sampler drops
//     below a sampled span of an invocation is recorded without being
//     sampled (not exported), and its parent counts it in
//     invocation.unrecorded. Every span is covered, from any library.
//     A span recorded without being sampled is counted the same way,
//     with or without Sampler.
//   - The client wrappers (otelopenai, otelanthropic, otelopencode,
//     otelclaudecode) report a model call whose span is not recording
//     with NoteUnrecorded: the nearest recording span counts it, and the
//     Ledger reports not_sampled:<call span name>. This covers the model
//     calls, whose usage is the invocation's, without Sampler.
//
// A dropped span that no open span counts (its context carries only the
// baggage, or its parent or context span ended) is counted on an open
// turn (root or continuation) of its invocation in the same pipeline;
// with none open, and under another process's sampled span when the
// baggage names the invocation, the SpanProcessor exports a declaration
// in its place, past the sampler: a zero-length root span named as the
// dropped one with invocation.role = unrecorded, which the Ledger and the
// collector both read as not_sampled:<span name> (a final summary the
// collector already emitted is revised incomplete). A dropped span is
// declared only in the SpanProcessor of the provider that started it.
//
// What neither sees: without Sampler, a dropped span that is not a model
// call of a wrapper or a Tracker's span (a tool span, a model call of a
// client the wrappers do not cover) when no model call below it is
// dropped too (sampled children of a dropped span still arrive and are
// summed), or one dropped before its SpanProcessor saw any span of its
// provider; with or without it, a span dropped under another process's
// span that was not sampled (that process declares its drops), or on a
// TracerProvider whose pipeline has no SpanProcessor.
// With a ParentBased sampler (the SDK's default) a sampled root samples
// every span below it and nothing is dropped inside a recording
// invocation: install Sampler when the inner sampler decides per span.
//
// Shutdown and ForceFlush of the SpanProcessor first end the model calls
// the client wrappers (otelopenai, otelanthropic) hold open for an SDK
// retry, so that a process exiting within the retry window exports them.
//
// The ledger only sees spans that end in this process. Spans exported by
// subprocesses that received a job's context are not seen; as in the
// collector, a remote span's subtree must be quiet for the remote settle
// time (WithRemoteSettle) before the invocation is final, but here the
// quiet time only covers the spans of this process.
//
// Where to start reading: the examples (ExampleNewSpanProcessor for the
// pipeline, ExampleTracker_StartBackground and
// ExampleTracker_StartContinuation for a job and the turn it wakes), then
// NewSpanProcessor, NewTracker and Ledger. The rule the Ledger applies is
// internal/ledgerrule's, shared with the collector; docs/CONTRACT.md, "The
// in-process half", lists what only this half does. The client adapters
// are the sub-packages otel<target>.
package instrument // import "github.com/agentledger/agentledger/instrument"
