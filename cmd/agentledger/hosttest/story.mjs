// The host's side of the release and reattach story (story_test.go):
// what a TypeScript host does with the collector's status API.
import { writeFileSync } from 'node:fs';
import { getJSON, watch } from './status.mjs';

// askOnce is the one question after a result: does the session owe work?
// A 404 after a result (the drop-ins export before they pass a result on)
// means the collector does not know the invocation: fail closed.
export async function askOnce(session) {
  try {
    return await getJSON(`/v1/sessions/${encodeURIComponent(session)}`);
  } catch (e) {
    if (e.status === 404) return { owes_work: true, unknown: true, version: 0, open_invocations: [] };
    throw e;
  }
}

// running is whether the session shows a turn the runtime started by
// itself (a wake span arrived: a running_turn owed item).
export function running(s) {
  return s.open_invocations.some(i => (i.waiting?.owed ?? []).some(o => o.reason.startsWith('running_turn:')));
}

// awaitWake watches the released session from version until the runtime
// wakes, and returns the session then and when (Unix ms). It then tells
// the test's model, which holds the woken turn, that the host woke.
export async function awaitWake(session, version, rounds = 60) {
  for (let i = 0; i < rounds; i++) {
    const s = await watch(session, version);
    if (running(s)) {
      const at = Date.now();
      writeFileSync(process.env.WOKE, '');
      return { s, at };
    }
    version = s.version;
  }
  throw new Error(`session ${session}: no wake after ${rounds} watches`);
}
