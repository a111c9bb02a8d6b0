// The release and reattach story with the OpenCode SDK through
// `agentledger opencode-proxy`; run by TestOpenCodeHostStory
// (story_test.go), whose scripted model holds the background subagent's
// model call until POST RELEASE_URL and the woken turn's until the host
// woke.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { appendFileSync } from 'node:fs';
import { createOpencodeClient } from '@opencode-ai/sdk';
import { getJSON, watchUntil } from './status.mjs';
import { askOnce, awaitWake } from './story.mjs';

const E = process.env;
function report(v) { appendFileSync(E.REPORT, JSON.stringify(v) + '\n'); }

test('answer while a background job runs: owes work, release, wake, reattach, final', async () => {
  const client = createOpencodeClient({ baseUrl: E.PROXY_URL });
  const { data: session } = await client.session.create({ body: { title: 'host story' } });

  const { data: answer } = await client.session.prompt({ path: { id: session.id }, body: { parts: [{ type: 'text', text: 'BG start a job' }] } });
  assert.equal(answer.info.role, 'assistant');
  const id = answer.info.parentID; // the user message: the invocation's id
  // Asked once, right after the answer, with the exporter's default
  // schedule: the proxy exported before it passed the answer on.
  const s = await askOnce(session.id);
  assert.ok(!s.unknown, 'the collector knows the session when the host has the answer');
  assert.equal(s.owes_work, true);
  assert.ok(s.open_invocations.some(i => i.id === id), `the invocation ${id} is open in ${JSON.stringify(s)}`);

  // Released: the host reads nothing more. The job ends.
  const r = await fetch(E.RELEASE_URL, { method: 'POST' });
  assert.equal(r.status, 200);
  const { at } = await awaitWake(session.id, s.version);

  // Reattached: the reply of the turn the job's notification woke.
  const closed = await watchUntil(session.id, s => s.closed_invocations.includes(id) && !s.owes_work);
  assert.equal(closed.open_invocations.length, 0);
  const { data: messages } = await client.session.messages({ path: { id: session.id } });
  const last = messages.filter(m => m.info.role === 'assistant').at(-1);
  const reply = last.parts.filter(p => p.type === 'text').map(p => p.text).join('');
  assert.equal(reply, 'The job is done.');

  const inv = await getJSON(`/v1/invocations/${id}`);
  assert.equal(inv.status, 'final', JSON.stringify(inv.reasons));
  assert.equal(inv.background_jobs, 1);
  assert.equal(inv.continuations, 1);
  report({ kind: 'story', id, session: session.id, woke_at: at, model_calls: inv.model_calls });
});
