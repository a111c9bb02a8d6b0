// The Codex SDK drives `agentledger codex` in place of the CLI
// (codexPathOverride), against the scripted model; run by TestCodexSDK
// (hosts_test.go).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { appendFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Codex } from '@openai/codex-sdk';
import { getJSON, watchUntil } from './status.mjs';

const E = process.env;

// Each client gets a home of its own: Codex keeps its threads there.
function client(name, how, modelURL) {
  const home = join(E.HOST_HOME, name);
  mkdirSync(join(home, '.codex'), { recursive: true });
  return new Codex({
    codexPathOverride: how === 'plain' ? E.CODEX_CLI : E.AGENTLEDGER_CODEX,
    env: { PATH: E.PATH, HOME: home, CODEX_HOME: join(home, '.codex'), SCRIPTED_API_KEY: 'scripted',
      ...(how === 'plain' ? {} : { AGENTLEDGER_CODEX_BIN: E.CODEX_CLI, OTEL_EXPORTER_OTLP_ENDPOINT: E.OTLP_HTTP, OTEL_BSP_SCHEDULE_DELAY: '50' }) },
    // The host's own endpoint: the drop-in points it at its proxy.
    config: {
      model_provider: 'scripted',
      model_providers: { scripted: { name: 'scripted', base_url: modelURL, wire_api: 'responses', env_key: 'SCRIPTED_API_KEY' } },
      check_for_update_on_startup: false, analytics: { enabled: false }, features: { plugins: false },
      otel: { exporter: 'none', trace_exporter: 'none', metrics_exporter: 'none' },
    },
  });
}

const threadOptions = { model: 'gpt-5.5', sandboxMode: 'danger-full-access', approvalPolicy: 'never',
  workingDirectory: E.HOST_DIR, skipGitRepoCheck: true };

function report(v) { appendFileSync(E.REPORT, JSON.stringify(v) + '\n'); }

// run runs one turn streamed, returning its events and when the first came.
async function run(thread, prompt) {
  const started = performance.now();
  let first;
  const events = [];
  const { events: stream } = await thread.runStreamed(prompt);
  for await (const ev of stream) {
    first ??= performance.now() - started;
    events.push(ev);
  }
  return { events, firstMs: first };
}

// shape is what a host reads of an event, without ids and timings.
function shape(ev) {
  const s = { type: ev.type };
  if (ev.item) Object.assign(s, { item: ev.item.type, text: ev.item.text, command: ev.item.command, status: ev.item.status, exit: ev.item.exit_code });
  return s;
}

test('the SDK reads the same events through the drop-in as from the plain CLI', async () => {
  const a = await run(client('plain', 'plain', E.PLAIN_MODEL_URL).startThread(threadOptions), 'FOREGROUND: run echo');
  const thread = client('dropin', 'drop-in', E.MODEL_URL).startThread(threadOptions);
  const b = await run(thread, 'FOREGROUND: run echo');
  assert.deepEqual(b.events.map(shape), a.events.map(shape));
  assert.ok(b.events.some(ev => ev.item?.type === 'command_execution'), 'a command ran');
  report({ kind: 'first_message_ms', plain: a.firstMs, drop_in: b.firstMs });

  // The thread goes on (exec ... resume <thread id>): a second invocation
  // of the same session.
  const again = await thread.run('say hi');
  assert.equal(again.finalResponse, 'Hello from the scripted model.');
  const s = await watchUntil(thread.id, s => s.closed_invocations.length === 2 && s.open_invocations.length === 0);
  assert.equal(s.owes_work, false);
  for (const id of s.closed_invocations) {
    const inv = await getJSON(`/v1/invocations/${id}`);
    assert.equal(inv.status, 'final', JSON.stringify(inv.reasons));
    assert.equal(inv.session, thread.id);
    report({ kind: 'foreground', id, session: thread.id, model_calls: inv.model_calls });
  }
});

test('a command left running: codex exec kills it at exit, the invocation is final with the interruption', async () => {
  const thread = client('background', 'drop-in', E.MODEL_URL).startThread(threadOptions);
  const turn = await thread.run('BACKGROUND: start the tests in the background');
  assert.equal(turn.finalResponse, 'The tests run in the background.');
  const s = await watchUntil(thread.id, s => s.closed_invocations.length === 1 && !s.owes_work);
  const inv = await getJSON(`/v1/invocations/${s.closed_invocations[0]}`);
  assert.equal(inv.status, 'final', JSON.stringify(inv.reasons));
  assert.equal(inv.background_jobs, 1);
  assert.deepEqual(inv.anomalies, ['followup_interrupted:background shell']);
  report({ kind: 'background', id: s.closed_invocations[0], session: thread.id, model_calls: inv.model_calls });
});
