// The OpenCode SDK, through `agentledger opencode-proxy`, starts a
// background subagent and sends a second prompt before it ends; run by
// TestOpenCodeSDKBackgroundSubagent (opencode_subagent_test.go), whose
// scripted model holds the subagent's model call until POST RELEASE_URL.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { appendFileSync } from 'node:fs';
import { createOpencodeClient } from '@opencode-ai/sdk';
import { getJSON, watch, watchUntil } from './status.mjs';

const E = process.env;
function report(v) { appendFileSync(E.REPORT, JSON.stringify(v) + '\n'); }

const isOpen = (s, id) => s.open_invocations.some(i => i.id === id);

test('a background subagent and a second prompt: owes_work while it runs, the watch wakes when it ends, both final', async () => {
  const client = createOpencodeClient({ baseUrl: E.PROXY_URL });
  const { data: session } = await client.session.create({ body: { title: 'background subagent' } });

  const prompt = async (text) => {
    const { data: answer } = await client.session.prompt({ path: { id: session.id }, body: { parts: [{ type: 'text', text }] } });
    assert.equal(answer.info.role, 'assistant');
    return answer.info.parentID; // the user message: the invocation's id
  };

  // The first prompt's answer comes while its subagent runs.
  const first = await prompt('BG start a job');
  let s = await watchUntil(session.id, s => isOpen(s, first) && s.owes_work);
  let inv = await getJSON(`/v1/invocations/${first}`);
  assert.equal(inv.status, 'pending');

  // The second prompt, answered before the subagent ends: final on its own.
  const second = await prompt('hello again');
  s = await watchUntil(session.id, s => s.closed_invocations.includes(second));
  assert.ok(s.owes_work, 'the subagent still runs');
  assert.ok(isOpen(s, first), 'the first prompt is open while its subagent runs');
  inv = await getJSON(`/v1/invocations/${second}`);
  assert.equal(inv.status, 'final', JSON.stringify(inv.reasons));
  assert.equal(inv.background_jobs, 0);

  // Let the subagent finish: the watch, waiting at the version the host
  // holds, wakes on a change each time until the first is final.
  const waiting = watch(session.id, s.version);
  const r = await fetch(E.RELEASE_URL, { method: 'POST' });
  assert.equal(r.status, 200);
  let version = s.version;
  for (let next = waiting, i = 0; ; next = watch(session.id, version), i++) {
    assert.ok(i < 20, 'the first invocation did not close within 20 changes');
    s = await next;
    assert.notEqual(s.version, version, 'a watch timed out before the subagent ended');
    version = s.version;
    if (s.closed_invocations.includes(first)) break;
    assert.ok(s.owes_work, 'owes_work while the first prompt is open');
  }
  assert.equal(s.owes_work, false);
  assert.equal(s.open_invocations.length, 0);
  inv = await getJSON(`/v1/invocations/${first}`);
  assert.equal(inv.status, 'final', JSON.stringify(inv.reasons));
  assert.equal(inv.session, session.id);
  assert.equal(inv.background_jobs, 1);
  assert.equal(inv.continuations, 1);
  report({ kind: 'first', id: first, session: session.id, model_calls: inv.model_calls });
  report({ kind: 'second', id: second, session: session.id });
});
