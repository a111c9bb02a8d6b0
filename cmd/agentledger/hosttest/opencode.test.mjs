// The OpenCode SDK points its baseUrl at `agentledger opencode-proxy`
// in front of a real `opencode serve`; run by TestOpenCodeSDK
// (hosts_test.go).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { appendFileSync } from 'node:fs';
import { createOpencodeClient } from '@opencode-ai/sdk';
import { getJSON, watchUntil } from './status.mjs';

const E = process.env;
function report(v) { appendFileSync(E.REPORT, JSON.stringify(v) + '\n'); }

test('two prompts through the proxy: each is an invocation known by its user message id, final with the wire usage', async () => {
  const client = createOpencodeClient({ baseUrl: E.PROXY_URL });
  const plain = createOpencodeClient({ baseUrl: E.OPENCODE_URL });
  const { data: session } = await client.session.create({ body: { title: 'host test' } });
  assert.ok(session.id);
  // The event stream passes through unchanged.
  const stop = new AbortController();
  const events = await client.event.subscribe({ signal: stop.signal });
  const first = await events.stream.next();
  assert.equal(first.value.type, 'server.connected');

  for (const text of ['first prompt', 'second prompt']) {
    const { data: answer } = await client.session.prompt({ path: { id: session.id }, body: { parts: [{ type: 'text', text }] } });
    assert.equal(answer.info.role, 'assistant');
    const userMessage = answer.info.parentID;
    // The answer is what opencode serve itself keeps.
    const { data: kept } = await plain.session.message({ path: { id: session.id, messageID: answer.info.id } });
    assert.deepEqual(kept.info.tokens, answer.info.tokens);
    const s = await watchUntil(session.id, s => s.closed_invocations.includes(userMessage));
    assert.equal(s.owes_work, false);
    const inv = await getJSON(`/v1/invocations/${userMessage}`);
    assert.equal(inv.status, 'final', JSON.stringify(inv.reasons));
    assert.equal(inv.session, session.id);
    report({ kind: 'prompt', id: userMessage, session: session.id, model_calls: inv.model_calls });
  }
  stop.abort();

  // prompt_async: the proxy records it too (its id in the
  // Agentledger-Invocation-Id header), and its result, the session's
  // idle on the event stream, reaches the host only once the collector
  // holds the invocation's root: asked at once, it is neither a 404 nor
  // root_missing (without the wait it was root_missing, no session).
  const stop2 = new AbortController();
  const events2 = await client.event.subscribe({ signal: stop2.signal });
  assert.equal((await events2.stream.next()).value.type, 'server.connected');
  const sent = await client.session.promptAsync({ path: { id: session.id }, body: { parts: [{ type: 'text', text: 'third prompt, async' }] } });
  const id = sent.response.headers.get('agentledger-invocation-id');
  assert.ok(id, `no Agentledger-Invocation-Id on the prompt_async answer (${sent.response.status})`);
  let ours = false;
  for (;;) {
    const { value: ev, done } = await events2.stream.next();
    assert.ok(!done, 'the event stream ended before the idle');
    const p = ev.properties ?? {};
    if (ev.type === 'message.updated' && p.info?.id === id) ours = true;
    const idle = ev.type === 'session.idle' || (ev.type === 'session.status' && p.status?.type === 'idle');
    if (ours && idle && p.sessionID === session.id) break;
  }
  const known = await getJSON(`/v1/invocations/${id}`);
  assert.ok(!known.waiting?.root_missing, `root missing at the idle: ${JSON.stringify(known)}`);
  assert.equal(known.session, session.id);
  await watchUntil(session.id, s => s.closed_invocations.includes(id));
  const inv = await getJSON(`/v1/invocations/${id}`);
  assert.equal(inv.status, 'final', JSON.stringify(inv.reasons));
  report({ kind: 'prompt_async', id, session: session.id, model_calls: inv.model_calls, known_at_idle: known.status });
  stop2.abort();
});
