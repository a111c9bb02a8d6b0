// Package refmodel is an executable reading of the finality rule of
// docs/CONTRACT.md (up to agentledger v0.8; v0.9 and v0.10 add bounds and
// readings that can only delay or forbid a final, which it need not
// model), written from the contract alone and sharing no code with either
// half (instrument/, processor/, internal/ledgerrule).
// It exists to be compared against them: a differential fuzz target feeds
// the same spans to the processor and to Evaluate, and fails when the
// processor says `final` where the model cannot prove it, or with other
// totals or other followup_interrupted or usage_mismatch anomalies.
//
// It is quadratic and deliberately naive: every verdict is recomputed
// from the full list of delivered spans, in delivery order, with no
// state carried between calls. Spans are described in a neutral form
// (Span, KeyValue, Value) in which a key may repeat and a value may have
// any OTLP type, so that inputs the processor's pdata types can carry but
// its Put* APIs cannot build are expressible.
//
// What it decides, per invocation id: whether `final` is provable at a
// given moment (conditions 1-4 of "When an invocation is final", the v0.2
// rules, v0.5's abandoned followups, v0.6's one reading of every span);
// the exact totals a final summary must carry; the kinds of reason that
// forbid final; and v0.7's followup_interrupted:<job name> and v0.8's
// usage_mismatch:<span name> anomalies, which a final summary must list
// exactly (the kinds of anomaly it computes). It knows nothing of open_timeout, eviction, retention,
// shutdown, pending summaries or tenants: those can only make an
// invocation incomplete, never final, so they cannot make a wrong `final`
// right. Of v0.12 it models the wake span: a member with invocation.role
// = wake whose parent span ID is no member's owes running_turn; and the
// unrecorded-span declaration: a member with invocation.role = unrecorded
// is not_sampled, whatever its count.
//
// Where to start reading: Evaluate in model.go (one invocation's verdict
// from the delivered spans), then judge.go (the conditions, checked one by
// one).
//
// # Ambiguities, resolved towards "not final"
//
// Where the contract admits two readings, the model takes the one that
// forbids `final` (a wrong `final` is the one outcome neither half may
// produce; a spurious `incomplete` is only a missed proof):
//
//   - invocation.id repeated with a string and a value of another type
//     (the contract covers "not a string" and "repeated with different
//     strings"): the span belongs to the first string value and makes
//     that invocation malformed. A span whose only invocation.id values
//     are not strings belongs to no invocation.
//   - A self-link of kind consumed or detached_from (the contract names
//     only a followup link to itself) is malformed_link too: a
//     detached_from link to itself would otherwise discharge its own
//     invocation.detached.
//   - "Both a followup and a consumed link to the same target" compares
//     targets by span ID alone, whatever their trace IDs.
//   - A negative invocation.unrecorded is an unprovable count
//     (invalid_count), like a negative invocation.children.
//   - invocation.unattributed is read on every span of the invocation,
//     not only on its root.
//   - The targets of a member's well-formed followup and detached_from
//     links count toward max_spans_per_invocation with their span IDs
//     (rule 5: the span IDs an invocation holds, "named by a parent or a
//     link"), and parent IDs count too. A consumed link names a span of
//     another invocation and a link of another kind discharges nothing,
//     so their targets are not held and do not count. A bound equal to the number of span
//     IDs is not exceeded ("beyond it").
//   - remote_settle is measured from the first arrival of each span of
//     the subtree: a duplicate re-delivery does not restart the quiet
//     time ("duplicates do not matter").
//   - late_child does not stop a span from discharging a followup (rule 1
//     speaks of children, v0.6 rule 4 of detached_from links only); a
//     processor that is stricter is not wrong.
//   - A rule attribute of a span that is not a model call (the usage
//     keys) is not read. A usage key's reading on a model call: a
//     wrong-type value anywhere among its repeats is invalid_usage, ints
//     repeated with different values are malformed_attribute.
//   - Dedup is per invocation by (trace ID, span ID); the first arrival
//     of a (trace, span) wins and later copies are ignored even when
//     their attributes differ.
//
// # followup_interrupted
//
// invocation.followup.reason = interrupted is read on every span, as
// v0.5's abandoned is. A member whose followup, consumed or detached_from
// links are malformed (v0.2 rule 3, v0.6 rule 2) discharges nothing, so
// it names no job; the halves may still name one then, but such an
// invocation is never final, and only final summaries are compared. Two
// jobs of one name are one entry.
//
// # usage_mismatch
//
// invocation.usage.mismatch is read on every member, whatever its role
// (the contract puts it on invoke_agent spans). A member beyond
// max_spans_per_invocation is still a member here, so it may name a span
// that a half does not index; such an invocation is never final (span
// limit), and only final summaries are compared.
package refmodel
