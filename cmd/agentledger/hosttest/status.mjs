// A host's view of the collector's invocation_status API: what a
// TypeScript host needs, with fetch only.
const base = process.env.STATUS_URL;

export async function getJSON(path) {
  const r = await fetch(base + path);
  const body = await r.json();
  if (!r.ok) throw Object.assign(new Error(`GET ${path}: ${r.status} ${body.error}`), { status: r.status });
  return body;
}

// watch is GET /v1/sessions/{session}?wait=...&after=<version>.
export function watch(session, after, wait = '20s') {
  return getJSON(`/v1/sessions/${encodeURIComponent(session)}?wait=${wait}&after=${after}`);
}

// watchUntil watches the session until done(state) holds, at most
// rounds watches; it returns that state.
export async function watchUntil(session, done, rounds = 30) {
  let version = 0;
  for (let i = 0; i < rounds; i++) {
    const s = await watch(session, version);
    if (done(s)) return s;
    version = s.version;
  }
  throw new Error(`session ${session}: condition not met after ${rounds} watches`);
}
