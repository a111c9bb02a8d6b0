// The Claude Agent SDK drives `agentledger claude` in place of the CLI
// (pathToClaudeCodeExecutable), against the scripted model; run by
// TestClaudeAgentSDK (hosts_test.go).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { writeFileSync, appendFileSync } from 'node:fs';
import { query } from '@anthropic-ai/claude-agent-sdk';
import { getJSON, watchUntil } from './status.mjs';

const E = process.env;
const base = {
  PATH: E.PATH, HOME: E.HOST_HOME, ANTHROPIC_API_KEY: 'scripted',
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_AUTOUPDATER: '1', DISABLE_TELEMETRY: '1', IS_SANDBOX: '1',
};
// The drop-in: the real CLI's path, the collector's OTLP endpoint.
const dropIn = {
  pathToClaudeCodeExecutable: E.AGENTLEDGER_CLAUDE,
  env: { ...base, ANTHROPIC_BASE_URL: E.MODEL_URL, AGENTLEDGER_CLAUDE_BIN: E.CLAUDE_CLI,
    OTEL_EXPORTER_OTLP_ENDPOINT: E.OTLP_HTTP, OTEL_BSP_SCHEDULE_DELAY: '50' },
};
const plain = { pathToClaudeCodeExecutable: E.CLAUDE_CLI, env: { ...base, ANTHROPIC_BASE_URL: E.PLAIN_MODEL_URL } };

function report(v) { appendFileSync(E.REPORT, JSON.stringify(v) + '\n'); }

async function run(how, prompt, onMessage = () => {}) {
  const started = performance.now();
  let first;
  const messages = [];
  const q = query({ prompt, options: { ...how, cwd: E.HOST_DIR, permissionMode: 'bypassPermissions', allowDangerouslySkipPermissions: true } });
  for await (const m of q) {
    first ??= performance.now() - started;
    messages.push(m);
    await onMessage(m);
  }
  return { messages, firstMs: first };
}

// shape is what a host reads of a message, without the ids and timings
// that differ from run to run.
function shape(m) {
  const s = { type: m.type, subtype: m.subtype };
  if (m.type === 'assistant') s.content = m.message.content.map(b => b.type === 'text' ? b.text : b.type + ':' + (b.name ?? ''));
  if (m.type === 'result') Object.assign(s, { result: m.result, is_error: m.is_error, num_turns: m.num_turns });
  if (m.type === 'system' && m.subtype === 'init') Object.assign(s, { tools: m.tools, model: m.model });
  return s;
}

test('the SDK reads the same messages through the drop-in as from the plain CLI', async () => {
  const a = await run(plain, 'say hi');
  const b = await run(dropIn, 'say hi');
  assert.deepEqual(b.messages.map(shape), a.messages.map(shape));
  report({ kind: 'first_message_ms', plain: a.firstMs, drop_in: b.firstMs });
  report({ kind: 'foreground', session: b.messages.at(-1).session_id });
});

test('a background shell: the session owes work, the watch wakes when its notification turn ends, the invocation is final', async () => {
  const uuid = randomUUID();
  async function* prompts() {
    yield { type: 'user', uuid, session_id: '', parent_tool_use_id: null,
      message: { role: 'user', content: [{ type: 'text', text: 'run the tests in the background' }] } };
  }
  let session, atResult;
  const { messages } = await run(dropIn, prompts(), async (m) => {
    if (m.type !== 'result' || session) return;
    session = m.session_id;
    // The host has its result; the shell still runs.
    atResult = await watchUntil(session, s => s.open_invocations.some(i => i.id === uuid) && s.owes_work);
    writeFileSync(E.GATE, '');
  });
  assert.ok(session, 'a result');
  assert.ok(atResult.owes_work);
  const results = messages.filter(m => m.type === 'result');
  assert.equal(results.length, 2, 'the prompt\'s result and the notification turn\'s');
  const closed = await watchUntil(session, s => s.closed_invocations.includes(uuid) && !s.owes_work);
  assert.equal(closed.open_invocations.length, 0);
  const inv = await getJSON(`/v1/invocations/${uuid}`);
  assert.equal(inv.status, 'final', JSON.stringify(inv.reasons));
  assert.equal(inv.session, session);
  assert.equal(inv.background_jobs, 1);
  assert.equal(inv.continuations, 1);
  report({ kind: 'background', id: uuid, session, usage: inv.usage, model_calls: inv.model_calls });
});
