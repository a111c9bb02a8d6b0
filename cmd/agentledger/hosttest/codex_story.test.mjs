// The story as far as the Codex SDK tells it (`codex exec` kills what it
// left running at exit: no wake); run by TestCodexHostStory
// (story_test.go).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { appendFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Codex } from '@openai/codex-sdk';
import { getJSON, watchUntil } from './status.mjs';
import { askOnce } from './story.mjs';

const E = process.env;
function report(v) { appendFileSync(E.REPORT, JSON.stringify(v) + '\n'); }

test('turn.completed names the turn; asked once, the collector knows it and owes its command; final', async () => {
  mkdirSync(join(E.HOST_HOME, '.codex'), { recursive: true });
  const codex = new Codex({
    codexPathOverride: E.AGENTLEDGER_CODEX,
    // The exporter's default schedule (5 s): only the export before the
    // event lets the host find the turn when it asks.
    env: { PATH: E.PATH, HOME: E.HOST_HOME, CODEX_HOME: join(E.HOST_HOME, '.codex'), SCRIPTED_API_KEY: 'scripted',
      AGENTLEDGER_CODEX_BIN: E.CODEX_CLI, OTEL_EXPORTER_OTLP_ENDPOINT: E.OTLP_HTTP },
    config: {
      model_provider: 'scripted',
      model_providers: { scripted: { name: 'scripted', base_url: E.MODEL_URL, wire_api: 'responses', env_key: 'SCRIPTED_API_KEY' } },
      check_for_update_on_startup: false, analytics: { enabled: false }, features: { plugins: false },
      otel: { exporter: 'none', trace_exporter: 'none', metrics_exporter: 'none' },
    },
  });
  const thread = codex.startThread({ model: 'gpt-5.5', sandboxMode: 'danger-full-access', approvalPolicy: 'never',
    workingDirectory: E.HOST_DIR, skipGitRepoCheck: true });
  const { events } = await thread.runStreamed('BACKGROUND: start the tests in the background');
  let id, asked, reply;
  for await (const ev of events) {
    if (ev.type === 'item.completed' && ev.item.type === 'agent_message') reply = ev.item.text;
    if (ev.type !== 'turn.completed') continue;
    // The SDK's own fields are as before.
    assert.ok(ev.usage && typeof ev.usage.input_tokens === 'number', JSON.stringify(ev));
    id = ev.turn_id;
    assert.ok(id, `turn.completed names the turn: ${JSON.stringify(ev)}`);
    asked = await askOnce(thread.id);
  }
  assert.equal(reply, 'The tests run in the background.');
  assert.ok(asked && !asked.unknown, 'the collector knows the session when the host has turn.completed');
  if (asked.owes_work) {
    assert.ok(asked.open_invocations.some(i => i.id === id), `the turn ${id} is open in ${JSON.stringify(asked)}`);
  } else {
    // Never "owes nothing" while the turn is open: Codex had exited already.
    assert.ok(asked.closed_invocations.includes(id), `owes_work false with the turn ${id} not closed: ${JSON.stringify(asked)}`);
  }
  const s = await watchUntil(thread.id, s => s.closed_invocations.includes(id) && !s.owes_work);
  assert.deepEqual(s.closed_invocations, [id]);
  const inv = await getJSON(`/v1/invocations/${id}`);
  assert.equal(inv.status, 'final', JSON.stringify(inv.reasons));
  assert.equal(inv.background_jobs, 1);
  assert.deepEqual(inv.anomalies, ['followup_interrupted:background shell']);
  report({ kind: 'story', id, session: thread.id, model_calls: inv.model_calls, owed_at_result: asked.owes_work });
});
