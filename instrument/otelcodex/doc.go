// Package otelcodex runs the Codex CLI (codex, npm @openai/codex 0.169.0)
// and records its work as agentledger invocations, from the outside: Codex
// is not changed, the Client reads what it prints and counts its model
// requests on the wire. README.md lists what was observed of the real
// CLI, and the tests check it against the binary.
//
// Every process gets its own model-wire proxy: a reverse proxy on
// loopback that Codex is given as the base_url of a model provider the
// Client defines on the command line (-c model_provider="agentledger",
// wire_api "responses", env_key WithAPIKeyEnv), and that forwards each
// request unchanged (streaming, headers, the API key) to WithUpstream.
// Each POST .../responses is one model-call span "chat {model}"
// (gen_ai.provider.name "openai") with the usage of its own
// response.completed, read by the same code as otelopenai's. The same
// overrides keep Codex offline but for that endpoint: no update check, no
// analytics, no plugins, no exporters of its own (unless
// WithOwnTelemetry). WithHome gives it a HOME and CODEX_HOME of its own.
//
// Client.Run is a one-shot `codex exec --json`: one invocation, whose root
// starts before the process (its environment carries TRACEPARENT and
// BAGGAGE) and ends at turn.completed; every request of the process is
// its. Client.Start starts a warm Session over `codex app-server` (JSON-RPC
// on stdio): initialize, thread/start (approvalPolicy never, sandbox
// danger-full-access), then one turn/start per Session.Prompt, each an
// invocation whose root ends at the turn's turn/completed. Turns run one at
// a time: a Prompt waits while a turn runs, because app-server answers a
// turn/start during a running turn with that turn's id (the prompt joins
// it, and its requests would have two owners).
//
// Client.Exec runs Codex for a host that drives it itself (a drop-in for
// the codex executable, as @openai/codex-sdk's codexPathOverride runs
// it): the host's arguments and streams unchanged but for the provider's
// base URL, which is the proxy's; `codex exec` is one invocation and each
// app-server turn/start one, known by Codex's turn ids, in the session of
// their thread.
//
// A request is attributed by what it carries: the turn id of its
// X-Codex-Turn-Metadata header (which its body's client_metadata must
// repeat) names the turn, and so the prompt or continuation, that a
// turn/start returned; the tool results it returns must be of calls the
// same invocation's requests asked for. Evidence naming two owners fails
// closed: the request is an unattributed invocation (UnattributedAmbiguous)
// and each candidate gets a usage-less model call (AttrAmbiguous), so none
// is final. A request naming a turn nobody started is an unattributed
// invocation (UnattributedUnknownTurn), so no usage goes missing silently.
//
// From the requests' tool results the Client makes an "execute_tool
// {tool}" span per tool call, from the response that asked for it to the
// request that returns its result. An exec_command whose result says
// "Process running with session ID N" (a small yield_time_ms) left its
// command in the background: a "background shell" span, a child of that
// tool span, until app-server's item/completed for the command (a
// write_stdin result "Process exited with code C" for session N, or
// Codex's exit, ends it too). Codex starts no turn when such a command
// ends; the turn that reads its exit is:
//
//   - a continuation "continue_agent {agent}" of the invocation that
//     launched it (followup link), which the Session starts itself
//     (ContinueAuto, the default: once no turn runs and no turn read the
//     exit meanwhile) or the host starts with Session.Continue
//     (ContinueByHost, told by WithOnCompletion); even when other prompts
//     ran meanwhile;
//   - or a turn already running that polled the command (write_stdin) and
//     read its exit: the job's followup is discharged by it when it is the
//     job's invocation's, else closed consumed_by that turn's invocation.
//
// Subagents (multi_agent v2's spawn_agent and wait_agent, offered by the
// gpt-6* models) are attributed by their requests' turn metadata: each
// subagent turn is a "background subagent" job of the invocation whose
// turn its parent_turn_id names, started as a child of the spawn_agent
// tool span, with its model calls and tools under it. It ends when
// app-server reports the child's turn completed, when the parent reads
// its answer, or at exit (interrupted when it was still working). Its
// answer is its followup, as a command's exit is: read by the turn whose
// request delivers it (after wait_agent), or by a continuation (Codex
// starts none: ContinueAuto or Session.Continue, Completion.Agent set).
// See subagent.go.
//
// When the process exits, followups nobody will answer close: interrupted
// for commands still running (codex exec and a closed app-server kill
// them) or when the process was stopped, session_closed for commands that
// ended without a continuation. Session.State (Client.Session) says
// whether the session owes work: while a command runs or its continuation
// is owed. With WithLedger, Client.Wait waits until an invocation is final.
package otelcodex // import "github.com/agentledger/agentledger/instrument/otelcodex"
