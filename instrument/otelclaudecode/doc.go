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
// the spans of any instrumented program its shells run. The root is marked
// invocation.remote (the ledger and the collector then wait remote_settle,
// 2 s by default, after the last span before final, and a summary read at
// the result says pending) only when CLAUDE_CODE_ENABLE_TELEMETRY is on or
// WithRemote(true) says such spans come. Run returns at the first result while the
// process goes on; Run.Wait returns once the process has exited and the
// invocation is final. Client.Start starts a warm session whose prompts
// (Process.Prompt) are each an invocation; the CLI takes its tracing
// parent only from its environment, once per process, so there its own
// spans are under no invocation.
//
// Every process gets its own model-wire proxy: a reverse proxy on loopback
// that the CLI is given as ANTHROPIC_BASE_URL, and that forwards each
// request unchanged (streaming, headers, the API key or OAuth token) to
// the real endpoint: WithUpstream, else ANTHROPIC_BASE_URL as WithEnv or
// the environment sets it, else https://api.anthropic.com; a gateway's
// URL works the same (the request path is joined to it). Each request is
// one model-call span "chat {model}" (gen_ai.provider.name "anthropic")
// carrying the usage of its own response, read by the same code as
// otelanthropic's (input_tokens = input + cache read + cache creation).
// A failed attempt the CLI retries is the same call; a response that
// began and broke off has unknown usage: its span carries none and the
// invocation closes incomplete (usage_missing), never final. Requests
// that are not model calls (count_tokens) pass through untraced.
//
// Each request is attributed by what it carries, checked against the
// stream-json:
//
//   - a subagent's request (header X-Claude-Code-Agent-Id, its task id)
//     is the subagent's: its background job's invocation, or its Agent
//     tool use's for a foreground one;
//   - a request holding the text of one of the Client's prompts (its first
//     request, or a running turn's request the CLI folded the prompt into)
//     is that prompt's: the newest such prompt's;
//   - a compaction request (the CLI's compaction instruction in its last
//     user turn, after the tool results it repeats) is the running turn's:
//     the /compact prompt's, or the turn compacting automatically;
//   - a request returning tool results is the owner's of the request
//     whose response asked for those tools (the proxy saw it);
//   - a request delivering only task notifications is a continuation
//     "continue_agent {agent}" of the first notified job's invocation,
//     with a followup link to each of its jobs it delivers; the
//     notifications of other invocations' jobs it delivers are closed
//     consumed_by it;
//   - a request carrying none of these (a compaction, /compact) is the
//     running turn's: the prompt the stream says the CLI is processing.
//     Before deciding by the stream the proxy waits until the Client has
//     read every line the CLI printed before the request
//     (DefaultStreamSync at most).
//
// Notifications a request delivers inside a turn it does not start are
// read by that turn: the job's followup is discharged when the turn is
// the job's invocation's, else closed consumed_by the turn's invocation.
// Evidence that names two owners (two pending prompts of the same text,
// tool results of two invocations, a stream that could not be read up to
// the request) fails closed: the request is an unattributed invocation
// (UnattributedAmbiguous) and each candidate gets a usage-less model call
// (AttrAmbiguous), so none is final.
//
// From the stream-json the Client makes:
//
//   - the prompt's root span "invoke_agent {agent}", ending at the result
//     that answers it (the caller's result);
//   - an "execute_tool {tool}" span per tool use, from the assistant
//     message that asks for it to its tool_result;
//   - a "background shell" span (task type local_bash; "background
//     subagent" for local_agent) per task the CLI runs in the background
//     (system/task_started with is_backgrounded), a child of the tool use
//     that launched it, ending when the task ends;
//   - a continuation and a new "background subagent" job when the CLI
//     runs a background subagent again under its task id (a new run id)
//     to read the notifications of the jobs its earlier run launched (its
//     own background shell): the notifications that woke it name the
//     invocation, the rerun's requests carry the task id, and the session
//     reads the rerun's own notification later;
//   - when the process exits, what is open ends, and followups nobody will
//     answer are closed: interrupted when the process was stopped
//     (Interrupt, Kill, its context done), session_closed otherwise.
//
// A turn no invocation can own (contract rule 7) is recorded as an
// invocation of its own, marked invocation.unattributed with a reason
// (UnattributedUnknownTask, UnattributedUnknownPrompt,
// UnattributedSelfStarted, UnattributedAmbiguous), which the ledger
// and the collector close incomplete, never final; its usage is not lost.
//
// Every result reports the usage of the requests since the previous result
// (model_usage_since_last_result). The Client compares it with the calls
// the proxy saw end since then, when none is in flight and none, in this
// window or the one before, was a subagent's (the CLI reports a
// subagent's usage in a window of its own choosing, the proxy's or the
// next): a difference is
// counted (agentledger.claudecode.usage.mismatches) and marked on the
// turn's invoke_agent span (invocation.usage.mismatch, so both halves
// report the anomaly usage_mismatch:<span name>; the CLI's counts as
// AttrReportedPrefix attributes). It changes no total: the
// wire's counts are the ones the invocations carry.
//
// after_result, in the summaries, is the usage of the model calls that
// started after the caller's result: the model-call span's start (when
// the proxy received the request) after the root's end (when the Client
// read the result line), both on this process's clock; it counts input
// (cache tokens included) and output only.
//
// The spans go through an instrument.SpanProcessor in the TracerProvider's
// pipeline; with WithLedger, Client.Wait (or Process.Wait, Run.Wait) waits
// until an invocation is final, as otelopencode's Client.Wait does, and
// Client.Session (Process.State) says whether the session still owes work.
package otelclaudecode // import "github.com/agentledger/agentledger/instrument/otelclaudecode"
