// Package otelclaudecode runs the Claude Code CLI (claude) and records its
// work as agentledger invocations, from the outside: the CLI is not
// changed, the Client reads its stream-json output. Tested against the
// real CLI 2.1.328 (npm @anthropic-ai/claude-code, see testdata/README.md
// for what its output shows).
//
// The CLI runs as
//
//	claude -p --input-format stream-json --output-format stream-json --verbose \
//	  --include-partial-messages --replay-user-messages --session-id <uuid> [WithArgs...]
//
// Client.Run is a one-shot run (one prompt, stdin closed at once): one
// invocation whose root starts before the process, and whose context the
// process gets in its environment (TRACEPARENT, BAGGAGE), so that Claude
// Code's own spans, when its telemetry is on, sit under the root, as do
// the spans of any instrumented program its shells run (the root is marked
// invocation.remote for them). Run returns at the first result while the
// process goes on; Run.Wait returns once the process has exited and the
// invocation is final. Client.Start starts a warm session whose prompts
// (Process.Prompt) are each an invocation; the CLI takes its tracing
// parent only from its environment, once per process, so there its own
// spans are under no invocation.
//
// From the output the Client makes:
//
//   - the prompt's root span "invoke_agent {agent}", ending at the result
//     that answers the prompt (the caller's result), with
//     gen_ai.provider.name "anthropic" (as on continuations, unattributed
//     turns and model calls);
//   - a model-call span "chat {model}" per model request, from the CLI's
//     "requesting" status to message_stop, with gen_ai.usage.* in the GenAI
//     sense (input_tokens = input + cache read + cache creation, as in
//     otelanthropic), from the message_start and message_delta events the
//     CLI passes through, and gen_ai.request.stream=true once the
//     response began (its events are the API's stream); a failed attempt (system/api_retry) is a span
//     with an error status and no usage; a response cut off after it began
//     (message_stop without message_delta) has unknown usage: its span
//     (AttrCut) carries none and keeps the invocation incomplete
//     (usage_missing), never final;
//   - an "execute_tool {tool}" span per tool use, from the assistant message
//     that asks for it to its tool_result;
//   - a "background shell" span (task type local_bash; "background
//     subagent" for local_agent) per task the CLI runs in the background
//     (system/task_started with is_backgrounded), a child of the tool use
//     that launched it, ending when the task ends;
//   - when the CLI starts a turn by itself for the notifications of ended
//     tasks (a "requesting" status naming no prompt), a "continue_agent
//     {agent}" span of the invocation whose job's notification is the
//     oldest, with a followup link to each of its jobs, even when the
//     caller has sent other prompts since; notifications of other
//     invocations it reads are closed consumed_by it;
//   - when the CLI puts a notification into a request of a turn already
//     running (a replayed user line with origin task-notification), the
//     followup is discharged by that turn if it is the job's invocation's,
//     else closed consumed_by the turn's invocation, whose usage the
//     request stays;
//   - a prompt the CLI reads while another prompt's turn runs is answered
//     by that turn: the requests after it are the new prompt's;
//   - when the process exits, what is open ends, and followups nobody will
//     answer are closed: interrupted when the process was stopped
//     (Interrupt, Kill, its context done), session_closed otherwise.
//
// A turn no invocation can own (contract rule 7) is recorded as an
// invocation of its own, marked invocation.unattributed with a reason
// (UnattributedUnknownTask, UnattributedUnknownPrompt,
// UnattributedSelfStarted, UnattributedUnreportedUsage), which the ledger
// and the collector close incomplete, never final; its usage is not lost.
//
// Every result reports the usage of the requests since the previous result
// (model_usage_since_last_result). The Client compares it with the calls
// it saw; when they differ (a request the stream did not show) it records
// a model-call span without usage carrying the difference
// (AttrUnexplainedPrefix), so the invocation closes incomplete with
// usage_missing instead of final with wrong totals.
//
// The spans go through an instrument.SpanProcessor in the TracerProvider's
// pipeline; with WithLedger, Process.Wait waits until an invocation is
// final and Process.State says whether the session still owes work.
package otelclaudecode // import "github.com/agentledger/agentledger/instrument/otelclaudecode"
