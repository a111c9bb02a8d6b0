#!/usr/bin/env python3
"""The status-API half of the README's host loop, for a Python host
(standard library only): after a result, ask the collector once whether
the session owes work; if it does, release the session and watch it
(GET /v1/sessions/{id}?wait=...&after=<version>) until it owes nothing;
then report each closed invocation's summary.

    python3 examples/host/release_watch.py http://127.0.0.1:4320 SESSION

Prints one line per step and, last, "<status> <json>" per closed
invocation. Exit status: 0 when every closed invocation is final, 1 when
one is not, 2 when the session still owes work after the watches.
A session the collector does not know after a result fails closed: it is
reported as owing work and asked again.
"""

import argparse
import json
import sys
import time
import urllib.error
import urllib.parse
import urllib.request


def get_json(base, path, timeout):
    """GET base+path; None for a 404 (unknown), the decoded body else."""
    try:
        with urllib.request.urlopen(base + path, timeout=timeout) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise


def running(state):
    """Whether the session shows a turn the runtime started by itself."""
    for inv in state.get("open_invocations") or []:
        for owed in (inv.get("waiting") or {}).get("owed") or []:
            if owed.get("reason", "").startswith("running_turn:"):
                return True
    return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("status_url", help="the collector's status API, e.g. http://127.0.0.1:4320")
    ap.add_argument("session", help="the runtime's session id (the result names it)")
    ap.add_argument("--wait", type=int, default=20, help="seconds one watch may wait (default 20)")
    ap.add_argument("--rounds", type=int, default=60, help="how many watches at most (default 60)")
    args = ap.parse_args()
    base = args.status_url.rstrip("/")
    path = "/v1/sessions/" + urllib.parse.quote(args.session, safe="")

    state = get_json(base, path, 10)
    if state is None:
        print("asked once: the collector does not know the session: fail closed, owes work")
        state = {"owes_work": True, "version": 0, "open_invocations": [], "closed_invocations": []}
    else:
        print("asked once: owes_work %s, %d open invocation(s)"
              % (str(state["owes_work"]).lower(), len(state.get("open_invocations") or [])))
    sys.stdout.flush()

    if state["owes_work"]:
        print("released: watching the session")
        sys.stdout.flush()
        woke = False
        for _ in range(args.rounds):
            q = "?wait=%ds&after=%d" % (args.wait, state["version"])
            nxt = get_json(base, path + q, args.wait + 10)
            if nxt is None:
                time.sleep(0.5)  # still unknown: owed, ask again
                continue
            state = nxt
            if running(state) and not woke:
                woke = True
                print("woke: the runtime started a turn (version %d)" % state["version"])
                sys.stdout.flush()
            if not state["owes_work"]:
                break
        if state["owes_work"]:
            print("still owes work after %d watches" % args.rounds)
            return 2
        print("settled: owes_work false (version %d)" % state["version"])

    ok = True
    for inv_id in state.get("closed_invocations") or []:
        inv = get_json(base, "/v1/invocations/" + urllib.parse.quote(inv_id, safe=""), 10)
        if inv is None:
            print("unknown %s" % json.dumps({"id": inv_id}))
            ok = False
            continue
        ok = ok and inv["status"] == "final"
        summary = {"id": inv["id"], "session": inv.get("session"), "usage": inv["usage"],
                   "model_calls": inv["model_calls"], "background_jobs": inv["background_jobs"],
                   "continuations": inv["continuations"]}
        if inv.get("reasons"):
            summary["reasons"] = inv["reasons"]
        print("%s %s" % (inv["status"], json.dumps(summary, separators=(",", ":"))))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
