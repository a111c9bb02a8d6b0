// A TypeScript-free host on the Claude Agent SDK, with agentledger's
// drop-in in place of the Claude Code CLI: the README's loop "From
// TypeScript or Python". Run it with `make host-example` (examples/host's
// Go driver starts the collector and a scripted model, and checks the
// final figures); status.mjs and story.mjs are the drop-ins' host tests'
// helpers (cmd/agentledger/hosttest), copied next to this file.
//
// Environment: AGENTLEDGER_CLAUDE (the drop-in, linked or built as
// claude), CLAUDE_CLI (the real CLI), OTLP_HTTP (the collector's
// OTLP/HTTP endpoint), STATUS_URL (its status API), MODEL_URL (the
// model's base URL), HOST_HOME and HOST_DIR (the CLI's home and project).
import { query } from '@anthropic-ai/claude-agent-sdk';
import { getJSON, watch, watchUntil } from './status.mjs';
import { askOnce, running } from './story.mjs';

const E = process.env;

// nextResult reads the query's messages up to its next result.
async function nextResult(it) {
  for (;;) {
    const { value, done } = await it.next();
    if (done) throw new Error('the query ended before a result');
    if (value.type === 'result') return value;
  }
}

// The prompt is streamed so that the session stays open for the turn a
// background job's completion notification wakes.
let endInput;
const inputEnds = new Promise(r => { endInput = r; });
async function* prompts() {
  yield { type: 'user', session_id: '', parent_tool_use_id: null,
    message: { role: 'user', content: 'run the tests in the background' } };
  await inputEnds;
}

const q = query({ prompt: prompts(), options: {
  pathToClaudeCodeExecutable: E.AGENTLEDGER_CLAUDE, cwd: E.HOST_DIR,
  permissionMode: 'bypassPermissions', allowDangerouslySkipPermissions: true,
  env: { PATH: E.PATH, HOME: E.HOST_HOME, ANTHROPIC_API_KEY: E.ANTHROPIC_API_KEY ?? 'scripted', ANTHROPIC_BASE_URL: E.MODEL_URL,
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_AUTOUPDATER: '1', DISABLE_TELEMETRY: '1', IS_SANDBOX: '1',
    // The two lines the drop-in needs: the real CLI and the collector.
    AGENTLEDGER_CLAUDE_BIN: E.CLAUDE_CLI, OTEL_EXPORTER_OTLP_ENDPOINT: E.OTLP_HTTP } } });
const it = q[Symbol.asyncIterator]();

// 1. The prompt's result. The drop-in gave the prompt its uuid, which
// names the invocation; it exported the spans before it passed the
// result on.
const first = await nextResult(it);
const id = first.user_message_uuids?.[0] ?? first.user_message_uuid;
const session = first.session_id;
console.log(`result: ${JSON.stringify(first.result)} (session ${session}, invocation ${id})`);

// 2. Ask the collector once. Unknown after a result fails closed: owed.
const s = await askOnce(session);
console.log(`asked once: owes_work ${s.owes_work}${s.unknown ? ' (the collector does not know the session: fail closed)' : ''}, ${s.open_invocations.length} open invocation(s)`);

if (s.owes_work) {
  // 3. Release: read nothing more, watch the session until the runtime
  // starts a turn by itself (the background job's notification) or owes
  // nothing more.
  console.log('released: watching the session');
  let w = s;
  for (let i = 0; i < 60 && !running(w) && w.owes_work; i++) w = await watch(session, w.version);
  console.log(running(w) ? `woke: the runtime started a turn (version ${w.version})` : `watch: owes_work ${w.owes_work} (version ${w.version})`);
  // 4. Reattach: the reply of the turn the notification woke.
  const reply = await nextResult(it);
  console.log(`reattached: ${JSON.stringify(reply.result)}`);
}
endInput();
for (;;) { if ((await it.next()).done) break; }

// 5. The invocation's final summary, once the session owes nothing.
await watchUntil(session, x => x.closed_invocations.includes(id) && !x.owes_work);
const inv = await getJSON(`/v1/invocations/${encodeURIComponent(id)}`);
console.log(`${inv.status} ${JSON.stringify({ id: inv.id, session: inv.session, usage: inv.usage, model_calls: inv.model_calls,
  background_jobs: inv.background_jobs, continuations: inv.continuations, reasons: inv.reasons })}`);
process.exit(inv.status === 'final' ? 0 : 1);
