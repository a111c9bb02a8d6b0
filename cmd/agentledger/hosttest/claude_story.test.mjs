// The release and reattach story with the Claude Agent SDK driving
// `agentledger claude`; run by TestClaudeHostStory (story_test.go).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { appendFileSync, writeFileSync } from 'node:fs';
import { query } from '@anthropic-ai/claude-agent-sdk';
import { getJSON, watchUntil } from './status.mjs';
import { askOnce, awaitWake } from './story.mjs';

const E = process.env;
function report(v) { appendFileSync(E.REPORT, JSON.stringify(v) + '\n'); }

// next reads the query's messages up to its next result.
async function nextResult(it) {
  for (;;) {
    const { value, done } = await it.next();
    if (done) throw new Error('the query ended before a result');
    if (value.type === 'result') return value;
  }
}

test('result while a shell runs: owes work, release, wake, reattach, final', async () => {
  let endInput;
  const inputEnds = new Promise(r => { endInput = r; });
  // A prompt without a uuid: the drop-in gives it one.
  async function* prompts() {
    yield { type: 'user', session_id: '', parent_tool_use_id: null,
      message: { role: 'user', content: 'run the tests in the background' } };
    await inputEnds;
  }
  const q = query({ prompt: prompts(), options: {
    pathToClaudeCodeExecutable: E.AGENTLEDGER_CLAUDE, cwd: E.HOST_DIR,
    permissionMode: 'bypassPermissions', allowDangerouslySkipPermissions: true,
    env: { PATH: E.PATH, HOME: E.HOST_HOME, ANTHROPIC_API_KEY: 'scripted', ANTHROPIC_BASE_URL: E.MODEL_URL,
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_AUTOUPDATER: '1', DISABLE_TELEMETRY: '1', IS_SANDBOX: '1',
      AGENTLEDGER_CLAUDE_BIN: E.CLAUDE_CLI, OTEL_EXPORTER_OTLP_ENDPOINT: E.OTLP_HTTP } } });
  const it = q[Symbol.asyncIterator]();

  const first = await nextResult(it);
  assert.equal(first.result, 'The tests run in the background.');
  const id = first.user_message_uuids?.[0] ?? first.user_message_uuid;
  assert.ok(id, `the result names the prompt: ${JSON.stringify(first)}`);
  const session = first.session_id;
  // Asked once, right after the result, with the exporter's default
  // schedule (5 s): the drop-in exported before it passed the result on.
  const s = await askOnce(session);
  assert.ok(!s.unknown, 'the collector knows the session when the host has the result');
  assert.equal(s.owes_work, true);
  assert.ok(s.open_invocations.some(i => i.id === id), `the invocation ${id} is open in ${JSON.stringify(s)}`);
  const inv = await getJSON(`/v1/invocations/${id}`);
  assert.equal(inv.status, 'pending');

  // Released: the host reads nothing more. The shell ends.
  writeFileSync(E.GATE, '');
  const { at } = await awaitWake(session, s.version);

  // Reattached: the reply of the turn the notification woke.
  const reply = await nextResult(it);
  assert.equal(reply.result, 'The tests passed.');
  endInput();
  for (;;) { if ((await it.next()).done) break; }

  const closed = await watchUntil(session, s => s.closed_invocations.includes(id) && !s.owes_work);
  assert.equal(closed.open_invocations.length, 0);
  const fin = await getJSON(`/v1/invocations/${id}`);
  assert.equal(fin.status, 'final', JSON.stringify(fin.reasons));
  assert.equal(fin.background_jobs, 1);
  assert.equal(fin.continuations, 1);
  report({ kind: 'story', id, session, woke_at: at, model_calls: fin.model_calls });
});

test('a string prompt: its result names the id the collector knows it by', async () => {
  const q = query({ prompt: 'say hi', options: {
    pathToClaudeCodeExecutable: E.AGENTLEDGER_CLAUDE, cwd: E.HOST_DIR,
    permissionMode: 'bypassPermissions', allowDangerouslySkipPermissions: true,
    env: { PATH: E.PATH, HOME: E.HOST_HOME, ANTHROPIC_API_KEY: 'scripted', ANTHROPIC_BASE_URL: E.MODEL_URL,
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_AUTOUPDATER: '1', DISABLE_TELEMETRY: '1', IS_SANDBOX: '1',
      AGENTLEDGER_CLAUDE_BIN: E.CLAUDE_CLI, OTEL_EXPORTER_OTLP_ENDPOINT: E.OTLP_HTTP } } });
  let result;
  for await (const m of q) {
    if (m.type !== 'result') continue;
    result = m;
    const id = m.user_message_uuids?.[0] ?? m.user_message_uuid;
    assert.ok(id, `the result names the prompt: ${JSON.stringify(m)}`);
    // Known at once: exported before the result was passed on.
    const inv = await getJSON(`/v1/invocations/${id}`);
    assert.equal(inv.session, m.session_id);
    result.id = id;
  }
  assert.equal(result.result, 'Hello from the scripted model.');
  await watchUntil(result.session_id, s => s.closed_invocations.includes(result.id) && !s.owes_work);
  const inv = await getJSON(`/v1/invocations/${result.id}`);
  assert.equal(inv.status, 'final', JSON.stringify(inv.reasons));
  report({ kind: 'string_prompt', id: result.id, session: result.session_id, model_calls: inv.model_calls });
});
