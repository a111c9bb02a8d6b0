// Package otelopencode records the prompts sent to an OpenCode server
// (opencode serve) as agentledger invocations, from the outside: OpenCode
// is not changed, the Client reads its HTTP API and its event stream.
//
// For each prompt (POST /session/:id/message) the Client starts an
// invocation root span, "invoke_agent {agent}", that ends when the answer
// is back. From the event stream (GET /event) it makes:
//
//   - a model-call span "chat {model}" per assistant message (OpenCode
//     makes one per model request; with WithModelProxy the proxy makes
//     it from the request instead, see "Two ways of counting" below),
//     with gen_ai.usage.* in the GenAI
//     semantic-convention sense: OpenCode's tokens.input excludes cache
//     reads and writes and its tokens.output excludes reasoning (measured
//     on opencode 1.18.33, see testdata/README.md), so input_tokens is
//     input+cache.read+cache.write and output_tokens is output+reasoning;
//     the model, provider and cost (opencode.cost) are attributes, the
//     provider as the GenAI registry's gen_ai.provider.name where the
//     registry lists it (google is gcp.gemini, amazon-bedrock aws.bedrock,
//     azure azure.ai.openai, ...; other ids as they are) and as OpenCode's
//     id in opencode.provider.id; the invoke_agent span of the turn (root,
//     continuation or unattributed turn) gets the same
//     gen_ai.provider.name;
//   - an "execute_tool {tool}" span per tool part; the model calls and
//     tools of a foreground subagent (the task tool without background)
//     are children of its task call's span, also when the call resumes a
//     subagent session an earlier call ran (task_id);
//   - a "background subagent" span when the task tool launches a
//     background subagent (OPENCODE_EXPERIMENTAL_BACKGROUND_SUBAGENTS=1), a
//     child of the tool's span, ending when the child session finishes;
//     the child session's model calls and tools are its children. A bash
//     call the runtime ran in the background (its state's metadata names
//     the job, jobId, or says background; not in OpenCode 1.18.33) gives a
//     "background shell" span the same way; a call that only asked for it
//     (background or run_in_background in its input, which 1.18.33 runs in
//     the foreground) is a foreground tool;
//   - when OpenCode posts the job's completion notification (a synthetic
//     user message `<task id="..." state="completed">`) and it starts a
//     turn, a "continue_agent {agent}" span, root of its own trace, of the
//     invocation that launched the job, with a followup link to the job,
//     even when the caller has sent other prompts since; the turn's model
//     calls are that invocation's usage. When the turn also answers a
//     prompt of the Client that OpenCode stored before the notification
//     and no turn had answered (one request for both; its parent is the
//     newest, the notification), the prompt's invocation owns the turn
//     and the notification is closed consumed_by it (see README.md);
//   - a "background turn" job (KindTurn) when the caller gives up a
//     prompt call (Prompt, PromptAsync or through the Transport: its
//     context ends, its connection breaks) after the request may have
//     reached the server, since OpenCode runs the turn on, or when the
//     answer comes while neither the event stream nor a read-back showed
//     the turn: a child of the invocation's root that ends when the
//     session goes idle after the turn (or is deleted), with the turn's
//     later model calls and tools under it, so the turn the caller started
//     stays its invocation's and the invocation is final only once the
//     turn ended and was seen;
//   - a followup_closed span with reason interrupted when an abort cancels
//     a job (OpenCode then posts no notification); one with reason
//     abandoned when an abort cancels the turn a posted notification was
//     queued behind, since OpenCode may or may not still run the
//     notification's turn (the invocation is then incomplete, never final,
//     and the turn, if it comes, is still its continuation); and one with
//     reason consumed_by when a turn of another invocation read the
//     notification;
//   - a turn in a session the Client tracks (one it prompted, or a child
//     session of its subagents) that no invocation of the Client owns: the
//     notification of a job it does not track, another client's prompt, a
//     message it never saw because its stream was down, a prompt answered
//     again after its invocation ended. Such a turn is an invocation of
//     its own (instrument.Tracker.StartUnattributed, contract rule 7) with
//     the reason (UnattributedUnknownTask, ...) in
//     invocation.unattributed on its root and the turn's model calls and
//     tools as its usage; it closes incomplete with
//     unattributed_wakeup:<reason>, never final, and the session owes work
//     until the turn ends (the session's idle). Sessions nobody prompted
//     through the Client are not recorded.
//
// The spans go through an instrument.SpanProcessor in the TracerProvider's
// pipeline; with WithLedger, Client.Wait waits until an invocation is
// final and Client.Session says whether a session still owes work.
//
// The event stream is reconnected when it breaks, and the sessions with
// open work, and the tracked ones the server reports running, are then
// read back (GET /session/:id/message, GET /session/status); events of
// unknown types are ignored, malformed ones are counted (Stats, metric
// agentledger.opencode.events.malformed), logged and skipped.
//
// Memory is bounded: sessions that owe nothing are forgotten beyond
// WithMaxSessions, what is done in a session is forgotten as it finishes
// (so a session that always owes something stays small), and jobs are
// tracked only until their followup is settled, at most WithMaxJobs of
// them; a job dropped beyond that bound has its span, if running, ended
// with an error and its followup left open, so that its invocation is
// never final (it closes incomplete with open_followup at the open
// timeout), and its later work is recorded as unattributed turns. Both are counted (Stats,
// metrics agentledger.opencode.sessions.evicted and
// agentledger.opencode.jobs.evicted).
//
// Client.PromptAsync sends a prompt with prompt_async; its root ends when
// the session is idle after a turn answered it. Deleting a session
// (session.deleted) ends what it ran and closes its open followups with
// reason session_closed.
//
// Users of another client of the server, such as the generated Go SDK,
// route its requests through Client.Transport: every POST
// /session/:id/message it sends then becomes an invocation as with
// Client.Prompt, and every POST /session/:id/prompt_async one as with
// Client.PromptAsync (the response's Agentledger-Invocation-Id names it).
// The result of a prompt_async prompt is the session's idle: the event
// stream read through the Transport (GET /event, /global/event) passes a
// session.idle (or session.status idle) on only once the Client's own
// stream has handled it, which ends the prompt's root, and the spans were
// flushed, so a host that acts on the idle finds the invocation in the
// collector. Each wait is bounded by the flush timeout (WithFlushTimeout;
// a negative one passes the stream unchanged), and holds the events after
// the idle back with it. Other events (an assistant message's completion)
// are not results: the root is still open then.
//
// A turn OpenCode starts by itself (a continuation, an unattributed turn)
// exports its wake span at once: the Client's Tracker flushes the
// provider in the background after it (instrument.WithWakeFlush, bounded
// by the flush timeout), never holding up the turn.
//
// # Two ways of counting
//
// A Client counts the model calls in one of two modes, never both:
//
//   - From the events (the default: a server the Client only attaches
//     to): one model-call span per assistant message, with the usage
//     OpenCode reports for it. Model calls OpenCode makes without
//     reporting them in events (the title of an untitled session: give
//     sessions a title) cannot be recorded.
//   - From the model wire (WithModelProxy: a server you start, or one
//     whose provider's baseURL you can set): New starts a loopback
//     reverse proxy (Client.ModelProxyURL; WithModelProxyAddress fixes
//     its port) that relays every request unchanged (streaming, headers,
//     the provider's API key; only a streamed chat request that does not
//     ask for usage is sent asking for it, the usage-only chunk hidden
//     from OpenCode, as otelopenai does) to the upstream, the provider's real base
//     URL or a gateway's, and makes one model-call span per request with
//     the usage of its own response (chat completions and responses, read
//     as otelopenai reads them; the span's gen_ai.provider.name is
//     openai, the API's shape). ProviderConfig and WriteProviderConfig set
//     provider.<id>.options.baseURL in opencode.json to the proxy; OpenCode
//     reads it when the server starts. The events then make no model-call
//     spans: they still make the invocations, turns, tools, jobs and
//     continuations the requests are attributed to. A request is
//     attributed by what it carries: OpenCode's X-Session-Id header names
//     its session, and it is the model call of the session's oldest open
//     assistant message no request has claimed (OpenCode runs one turn of
//     a session at a time and creates the message before the request; the
//     proxy waits up to WithSyncTimeout for the event stream to show it),
//     so it belongs to the turn the message is in: the prompt's root, a
//     continuation, a subagent's job or task call (a child session), an
//     unattributed turn. A request of OpenCode's title agent carries the
//     text of the session's first prompt and is that prompt's
//     invocation's while it is open (else an unattributed invocation,
//     UnattributedEndedTurn). The tool results a request returns name the
//     request that asked for them: another invocation's is evidence for
//     two owners. Title requests and subagents' requests are counted this
//     way; so is a compaction (POST /session/:id/summarize), as the turn
//     of the compaction message OpenCode posts, which the Client did not
//     send: an unattributed invocation (UnattributedOtherPrompt), counted,
//     never final (OpenCode's automatic compaction inside a prompt's turn
//     was not tested). Fail closed: a request nobody can own (no session
//     header, UnattributedNoSession; a session nobody prompted through the
//     Client, UnattributedOtherPrompt; no message in time,
//     UnattributedNoMessage) is an unattributed invocation of its own,
//     never dropped; when the evidence names two owners
//     (UnattributedAmbiguous), or no message came in time, each candidate
//     turn gets a usage-less "chat ambiguous" span (AttrAmbiguous) and
//     cannot be final; so does the turn of an assistant message that
//     completes with usage although no request claimed it (a provider not
//     pointed at the proxy). Requests on other paths (Anthropic's
//     /v1/messages, model lists) pass through uncounted; a body over
//     wireproxy's limit (64 MiB) passes through uncounted and keeps its
//     session's open turn from final. In this mode after_result is decided
//     by the model-call span's own time (the request's), not OpenCode's
//     message time.
package otelopencode // import "github.com/agentledger/agentledger/instrument/otelopencode"
